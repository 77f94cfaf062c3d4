package openai

import (
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// InterruptedResult is the content of the tool message sent for a call of
// the transcript that has no result (the process running it died): the
// API refuses a tool call without an answer, and the model must not assume
// either outcome.
const InterruptedResult = agent.InterruptedText

// reasoningFamilies are the model name prefixes that accept
// reasoning_effort in [ReasoningAuto] mode.
var reasoningFamilies = []string{"o1", "o3", "o4", "gpt-5", "gpt-oss"}

// toolNames names the request's tools.
func toolNames(req agent.ProviderRequest) agent.ToolNames {
	ids := make([]string, len(req.Tools))
	for i, t := range req.Tools {
		ids[i] = t.FunctionID
	}
	return agent.NewToolNames(ids)
}

// buildParams maps req onto a Chat Completions request (the SDK adds
// "stream": true).
func (o *options) buildParams(req agent.ProviderRequest, names agent.ToolNames) sdk.ChatCompletionNewParams {
	p := sdk.ChatCompletionNewParams{
		Model:         req.Model,
		Messages:      mapMessages(req.SystemPrompt, req.Messages, names),
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)},
	}
	if req.MaxTokens > 0 {
		if o.maxTokensField == MaxTokens {
			p.MaxTokens = param.NewOpt(int64(req.MaxTokens))
		} else {
			p.MaxCompletionTokens = param.NewOpt(int64(req.MaxTokens))
		}
	}
	if effort := o.reasoningEffort(req.Model, req.ThinkingLevel); effort != "" {
		p.ReasoningEffort = shared.ReasoningEffort(effort)
	}
	if len(req.Tools) > 0 {
		p.Tools = make([]sdk.ChatCompletionToolUnionParam, 0, len(req.Tools))
		seen := make(map[string]bool, len(req.Tools))
		for _, t := range req.Tools {
			if seen[t.FunctionID] {
				continue
			}
			seen[t.FunctionID] = true
			def := shared.FunctionDefinitionParam{Name: names.Name(t.FunctionID), Parameters: toolSchema(t.InputSchema)}
			if t.Description != "" {
				def.Description = param.NewOpt(t.Description)
			}
			p.Tools = append(p.Tools, sdk.ChatCompletionFunctionTool(def))
		}
	}
	return p
}

// toolSchema is a tool's parameters: its schema, or any object.
func toolSchema(s map[string]any) shared.FunctionParameters {
	if len(s) == 0 {
		return shared.FunctionParameters{"type": "object", "properties": map[string]any{}}
	}
	return shared.FunctionParameters(s)
}

// reasoningEffort is the reasoning_effort to send for a thinking level, or
// "" for none.
func (o *options) reasoningEffort(model, level string) string {
	if level == "" || level == "off" || o.reasoning == ReasoningNever {
		return ""
	}
	if o.reasoning == ReasoningAuto && !reasoningModel(model) {
		return ""
	}
	return level
}

// reasoningModel reports whether model (possibly "vendor/model") is of a
// family that accepts reasoning_effort.
func reasoningModel(model string) bool {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	for _, f := range reasoningFamilies {
		if strings.HasPrefix(m, f) {
			return true
		}
	}
	return false
}

// mapMessages maps a transcript onto Chat Completions messages:
//
//   - the system prompt is a system message;
//   - a user message is a string (one text block) or content parts (text,
//     image_url with a data: URL);
//   - an assistant message is its text (blocks joined by a newline) and its
//     calls as tool_calls; thinking and images are not sent back, and an
//     assistant message with neither text nor calls is left out;
//   - a function_result that answers a call of the assistant message before
//     it is a tool message; images it carries, and results that answer no
//     open call, follow the tool messages as one user message;
//   - a call left without a result when the next user or assistant message
//     (or the end) comes gets a tool message [InterruptedResult].
func mapMessages(system string, msgs []agent.Message, names agent.ToolNames) []sdk.ChatCompletionMessageParamUnion {
	out := make([]sdk.ChatCompletionMessageParamUnion, 0, len(msgs)+1)
	if system != "" {
		out = append(out, sdk.SystemMessage(system))
	}
	var run toolRun
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case agent.RoleUser:
			out = run.flush(out)
			out = append(out, userMessage(m.Content))
		case agent.RoleAssistant:
			out = run.flush(out)
			if a, ok := assistantMessage(m, names); ok {
				out = append(out, sdk.ChatCompletionMessageParamUnion{OfAssistant: a})
				run.open(m)
			}
		case agent.RoleFunctionResult:
			text := resultText(m)
			if run.answers(m.FunctionCallID) {
				out = append(out, sdk.ToolMessage(text, m.FunctionCallID))
			} else {
				run.extra = append(run.extra, sdk.TextContentPart("Result of "+m.FunctionID+" (call "+m.FunctionCallID+"): "+text))
			}
			for _, c := range m.Content {
				if c.Type == agent.ContentImage {
					run.extra = append(run.extra,
						sdk.TextContentPart("Image returned by "+m.FunctionID+" (call "+m.FunctionCallID+"):"),
						imagePart(c))
				}
			}
		}
	}
	return run.flush(out)
}

// toolRun tracks the calls of the last assistant message until the next
// user or assistant message.
type toolRun struct {
	calls   []string        // call ids in order
	pending map[string]bool // calls without a result yet
	extra   []sdk.ChatCompletionContentPartUnionParam
}

func (r *toolRun) open(m *agent.Message) {
	for _, c := range m.Content {
		if c.Type != agent.ContentFunctionCall {
			continue
		}
		if r.pending == nil {
			r.pending = make(map[string]bool)
		}
		r.calls = append(r.calls, c.ID)
		r.pending[c.ID] = true
	}
}

// answers marks call id answered and reports whether it was pending.
func (r *toolRun) answers(id string) bool {
	if !r.pending[id] {
		return false
	}
	delete(r.pending, id)
	return true
}

// flush closes the run: interrupted results for the calls left open, then
// the extra parts as one user message.
func (r *toolRun) flush(out []sdk.ChatCompletionMessageParamUnion) []sdk.ChatCompletionMessageParamUnion {
	for _, id := range r.calls {
		if r.pending[id] {
			out = append(out, sdk.ToolMessage(InterruptedResult, id))
		}
	}
	if len(r.extra) > 0 {
		out = append(out, sdk.UserMessage(r.extra))
	}
	*r = toolRun{}
	return out
}

// userMessage is a user message: a string when it is one text block (what
// every compatible server accepts), content parts otherwise.
func userMessage(content []agent.Content) sdk.ChatCompletionMessageParamUnion {
	if len(content) == 1 && content[0].Type == agent.ContentText {
		return sdk.UserMessage(content[0].Text)
	}
	return sdk.UserMessage(userParts(content))
}

// userParts is a user message's content parts.
func userParts(content []agent.Content) []sdk.ChatCompletionContentPartUnionParam {
	parts := make([]sdk.ChatCompletionContentPartUnionParam, 0, len(content))
	for _, c := range content {
		switch c.Type {
		case agent.ContentText:
			parts = append(parts, sdk.TextContentPart(c.Text))
		case agent.ContentImage:
			parts = append(parts, imagePart(c))
		}
	}
	return parts
}

func imagePart(c agent.Content) sdk.ChatCompletionContentPartUnionParam {
	return sdk.ImageContentPart(sdk.ChatCompletionContentPartImageImageURLParam{URL: "data:" + c.Mime + ";base64," + c.Data})
}

// assistantMessage maps an assistant message; false when it has nothing
// the API takes back (no text, no calls).
func assistantMessage(m *agent.Message, names agent.ToolNames) (*sdk.ChatCompletionAssistantMessageParam, bool) {
	var texts []string
	var calls []sdk.ChatCompletionMessageToolCallUnionParam
	for _, c := range m.Content {
		switch c.Type {
		case agent.ContentText:
			if c.Text != "" {
				texts = append(texts, c.Text)
			}
		case agent.ContentFunctionCall:
			calls = append(calls, sdk.ChatCompletionMessageToolCallUnionParam{OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
				ID:       c.ID,
				Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: names.Name(c.FunctionID), Arguments: argumentsJSON(c.Arguments)},
			}})
		}
	}
	if len(texts) == 0 && len(calls) == 0 {
		return nil, false
	}
	a := &sdk.ChatCompletionAssistantMessageParam{ToolCalls: calls}
	if len(texts) > 0 {
		a.Content.OfString = param.NewOpt(strings.Join(texts, "\n"))
	}
	return a, true
}

// argumentsJSON is a call's arguments as the JSON object string the API
// wants ("{}" for none).
func argumentsJSON(args map[string]any) string {
	if len(args) == 0 {
		return "{}"
	}
	// Without HTML escaping: the model reads its own earlier arguments.
	b, err := wire.MarshalJSON(args)
	if err != nil {
		return "{}" // unreachable for a validated request
	}
	return string(b)
}

// resultText is the text of a function result; an error result starts
// with "error: ".
func resultText(m *agent.Message) string {
	var b strings.Builder
	if m.IsError {
		b.WriteString("error: ")
	}
	first := true
	for _, c := range m.Content {
		if c.Type != agent.ContentText {
			continue
		}
		if !first {
			b.WriteByte('\n')
		}
		b.WriteString(c.Text)
		first = false
	}
	return b.String()
}
