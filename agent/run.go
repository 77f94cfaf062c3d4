package agent

import "fmt"

// Mode selects the system prompt's mode paragraph and what the agent may do.
type Mode string

// Modes of SPEC §4. The empty mode means the deployment's default.
const (
	ModePlan  Mode = "plan"
	ModeAsk   Mode = "ask"
	ModeAgent Mode = "agent"
)

// Valid reports whether m is empty or one of the known modes.
func (m Mode) Valid() bool { return m == "" || m == ModePlan || m == ModeAsk || m == ModeAgent }

// RunStart is the request of run::start (SPEC §4): start a run of the
// session on provider/model with the given new messages. MaxTurns bounds
// the number of model calls of the run (0: the deployment's default).
type RunStart struct {
	SessionID      string    `json:"session_id"`
	MessageID      string    `json:"message_id,omitempty"`
	Provider       string    `json:"provider"`
	Model          string    `json:"model"`
	Mode           Mode      `json:"mode,omitempty"`
	Messages       []Message `json:"messages"`
	MaxTurns       int       `json:"max_turns,omitempty"`
	SystemPrompt   string    `json:"system_prompt,omitempty"`
	WorkspaceID    string    `json:"workspace_id,omitempty"`
	AgentID        string    `json:"agent_id,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	// ToolMode says how functions are offered to the model: "native" (the
	// default: catalog functions as native tools) or "none".
	ToolMode ToolMode `json:"tool_mode,omitempty"`
	// Tools are function id patterns ('*' the only glob) of the functions
	// offered; empty offers every catalog function outside
	// [ControlSurface]. The policy still decides every call.
	Tools []string `json:"tools,omitempty"`
	// MaxTokens bounds each answer's output tokens (0: the provider's
	// default for the model).
	MaxTokens int `json:"max_tokens,omitempty"`
	// ThinkingLevel is "", "off", "low", "medium" or "high".
	ThinkingLevel string `json:"thinking_level,omitempty"`
	// Sandbox makes provisioning create an isolated sandbox for the run
	// (sandbox::create); its workdir is where fs::* and shell::exec work,
	// and it is destroyed when the run ends.
	Sandbox bool `json:"sandbox,omitempty"`
	// SandboxNetwork lets the sandbox reach the network (off by default).
	SandboxNetwork bool `json:"sandbox_network,omitempty"`
	// Skills are skill ids ("worker/function" or "iii://worker/function")
	// whose documents provisioning puts into the assembled system prompt.
	Skills []string `json:"skills,omitempty"`
}

// MaxRunSkills bounds RunStart.Skills.
const MaxRunSkills = 32

// ToolMode is how a run offers functions to the model.
type ToolMode string

// Tool modes.
const (
	ToolsNative ToolMode = "native"
	ToolsNone   ToolMode = "none"
)

// ControlSurface are the function id patterns never offered to the model
// as tools by default: the harness's own machinery (the shipped policy
// denies them too).
var ControlSurface = []string{
	"provider::*", "run::*", "harness::*", "agent::*", "session::*", "turn::*",
	"policy::*", "hooks::*", "approval::*", "auth::*", "budget::*", "models::reconcile",
	"queue::*", "topic::*", "cron::*", "http::*", "engine::*", "state::set", "state::update", "state::delete",
	"sandbox::*",
}

// Offers reports whether a run offers functionID to the model as a tool.
func (r RunStart) Offers(functionID string) bool {
	if r.ToolMode == ToolsNone {
		return false
	}
	if len(r.Tools) > 0 {
		for _, p := range r.Tools {
			if MatchPattern(p, functionID) {
				return true
			}
		}
		return false
	}
	for _, p := range ControlSurface {
		if MatchPattern(p, functionID) {
			return false
		}
	}
	return true
}

// Validate checks r: a valid session id and, when set, valid message,
// workspace, agent and idempotency ids ([ValidateID]); a provider that is an
// id (it becomes a function id segment, provider::<name>::stream); a model
// name; a known mode; max_turns ≥ 0; and at least one message, each valid.
// Errors wrap [ErrInvalidRunStart], and [ErrInvalidID] or
// [ErrInvalidMessage] when that is the cause.
func (r RunStart) Validate() error {
	if err := ValidateSessionID(r.SessionID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRunStart, err)
	}
	for _, opt := range []struct{ kind, id string }{
		{"message_id", r.MessageID},
		{"workspace_id", r.WorkspaceID},
		{"agent_id", r.AgentID},
		{"idempotency_key", r.IdempotencyKey},
	} {
		if opt.id == "" {
			continue
		}
		if err := ValidateID(opt.kind, opt.id); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidRunStart, err)
		}
	}
	if r.Provider == "" {
		return fmt.Errorf("%w: provider is missing", ErrInvalidRunStart)
	}
	if err := ValidateID("provider", r.Provider); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRunStart, err)
	}
	if r.Model == "" {
		return fmt.Errorf("%w: model is missing", ErrInvalidRunStart)
	}
	if err := validName("model", r.Model); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRunStart, err)
	}
	if !r.Mode.Valid() {
		return fmt.Errorf("%w: unknown mode %q (want plan, ask or agent)", ErrInvalidRunStart, r.Mode)
	}
	if r.MaxTurns < 0 {
		return fmt.Errorf("%w: max_turns is negative", ErrInvalidRunStart)
	}
	if r.MaxTokens < 0 {
		return fmt.Errorf("%w: max_tokens is negative", ErrInvalidRunStart)
	}
	switch r.ToolMode {
	case "", ToolsNative, ToolsNone:
	default:
		return fmt.Errorf("%w: unknown tool_mode %q (want native or none)", ErrInvalidRunStart, r.ToolMode)
	}
	if len(r.Tools) > 256 {
		return fmt.Errorf("%w: more than 256 tool patterns", ErrInvalidRunStart)
	}
	for _, p := range r.Tools {
		if err := validName("tool pattern", p); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidRunStart, err)
		}
	}
	if len(r.Skills) > MaxRunSkills {
		return fmt.Errorf("%w: more than %d skills", ErrInvalidRunStart, MaxRunSkills)
	}
	for _, id := range r.Skills {
		if err := validName("skill id", id); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidRunStart, err)
		}
	}
	switch r.ThinkingLevel {
	case "", "off", "low", "medium", "high":
	default:
		return fmt.Errorf("%w: unknown thinking_level %q (want off, low, medium or high)", ErrInvalidRunStart, r.ThinkingLevel)
	}
	if len(r.Messages) == 0 {
		return fmt.Errorf("%w: no messages", ErrInvalidRunStart)
	}
	for i, m := range r.Messages {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("%w: messages[%d]: %w", ErrInvalidRunStart, i, err)
		}
	}
	return nil
}
