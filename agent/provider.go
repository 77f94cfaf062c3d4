package agent

import (
	"strconv"
	"strings"
)

// ProviderRequest is the payload of provider::<name>::stream (with Channel,
// the id of the channel the caller opened and reads) and
// provider::<name>::complete (without it). SPEC §4 providers.
type ProviderRequest struct {
	Channel      string    `json:"channel,omitempty"`
	SystemPrompt string    `json:"system_prompt,omitempty"`
	Model        string    `json:"model"`
	Messages     []Message `json:"messages"`
	// Tools are the functions offered to the model as native tools.
	Tools []Tool `json:"tools,omitempty"`
	// MaxTokens bounds the answer's output tokens (0: the provider's
	// default for the model).
	MaxTokens int `json:"max_tokens,omitempty"`
	// ThinkingLevel is "", "off", "low", "medium" or "high".
	ThinkingLevel string `json:"thinking_level,omitempty"`
	// SessionID is for the provider's logs and traces (never for auth).
	SessionID string `json:"session_id,omitempty"`
	// Transcript, when set, names the transcript so the provider can keep
	// it, and may make Messages a continuation ([TranscriptRef]).
	Transcript *TranscriptRef `json:"transcript,omitempty"`
	// EventBatches says the caller also reads a channel frame whose body
	// is an array of model events (in order) rather than one event: a
	// provider may then send the events it has ready at once in one frame.
	// A provider that ignores it sends one event per frame (SPEC §4).
	EventBatches bool `json:"event_batches,omitempty"`
}

// Tool is a function offered to the model: its function id, description
// and the JSON Schema of its arguments (an object schema; nil means any
// object).
type Tool struct {
	FunctionID  string         `json:"function_id"`
	Description string         `json:"description,omitempty"`
	InputSchema map[string]any `json:"input_schema,omitempty"`
}

// maxToolName is the longest tool name vendors accept
// (^[a-zA-Z0-9_-]{1,64}$ for both Anthropic and OpenAI).
const maxToolName = 64

// ToolName is the vendor-safe tool name of a function id: "::" becomes
// "__", any other byte outside [A-Za-z0-9_-] becomes '_', cut to 64 bytes
// ("math::add" → "math__add"). It is not injective: use [ToolNames] to name
// a request's tools and map the model's calls back.
func ToolName(functionID string) string {
	s := strings.ReplaceAll(functionID, "::", "__")
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > maxToolName {
		b = b[:maxToolName]
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// NewToolNames names the tools of one request: each function id gets
// [ToolName], and a name already taken gets a numeric suffix, so the names
// are unique and the mapping is reversible. It returns both directions.
// Function ids of the transcript that are not tools are named with
// [ToolName] by the caller; [ToolNames.FunctionID] maps an unknown name
// back by undoing "__".
func NewToolNames(functionIDs []string) ToolNames {
	t := ToolNames{ByID: make(map[string]string, len(functionIDs)), ByName: make(map[string]string, len(functionIDs))}
	for _, id := range functionIDs {
		if _, ok := t.ByID[id]; ok {
			continue
		}
		name := ToolName(id)
		for n := 2; ; n++ {
			if _, taken := t.ByName[name]; !taken {
				break
			}
			suffix := "_" + strconv.Itoa(n)
			base := ToolName(id)
			if len(base)+len(suffix) > maxToolName {
				base = base[:maxToolName-len(suffix)]
			}
			name = base + suffix
		}
		t.ByID[id], t.ByName[name] = name, id
	}
	return t
}

// ToolNames maps function ids to the tool names of one request and back.
type ToolNames struct {
	ByID   map[string]string
	ByName map[string]string
}

// Name is the tool name of function id (ToolName when it is not a tool of
// the request, such as a call in the transcript).
func (t ToolNames) Name(functionID string) string {
	if n, ok := t.ByID[functionID]; ok {
		return n
	}
	return ToolName(functionID)
}

// FunctionID is the function id of a tool name the model used: the tool's
// when it is one of the request's, otherwise the name with "__" read back
// as "::".
func (t ToolNames) FunctionID(name string) string {
	if id, ok := t.ByName[name]; ok {
		return id
	}
	return strings.ReplaceAll(name, "__", "::")
}
