package hook

import (
	"encoding/json"

	"github.com/iii-on-nats/iii/agent"
)

// The harness's hook topics and the merge rule the orchestrator uses for
// each.
const (
	// TopicBeforeCall fires before a function call runs; payload
	// [BeforeCall], reply [BeforeReply].
	TopicBeforeCall = "agent::before_function_call"
	// TopicAfterCall fires after a function call ran; payload [AfterCall],
	// reply [AfterReply].
	TopicAfterCall = "agent::after_function_call"

	// BeforeCallMergeRule: the first hook that blocks decides; otherwise
	// rewrites merge.
	BeforeCallMergeRule = FirstBlockWins
	// AfterCallMergeRule: a later hook's result replaces an earlier one's.
	AfterCallMergeRule = FieldMerge
)

// BeforeCall is the payload of [TopicBeforeCall].
type BeforeCall struct {
	SessionID      string         `json:"session_id"`
	FunctionCallID string         `json:"function_call_id"`
	FunctionID     string         `json:"function_id"`
	Args           map[string]any `json:"args"`
}

// BeforeReply is a subscriber's reply to [TopicBeforeCall], and the shape
// of the merged reply ([Result.Bind]). Block denies the call with Reason;
// Args, when present, replaces the call's arguments (the orchestrator
// checks the rewritten call with the policy again). {} lets the call run
// unchanged.
type BeforeReply struct {
	Block  bool           `json:"block,omitempty"`
	Reason string         `json:"reason,omitempty"`
	Args   map[string]any `json:"args,omitempty"`
}

// UnmarshalJSON decodes r, its arguments exact (agent.DecodeArguments:
// an int64 a hook wrote is not rounded through a float64).
func (r *BeforeReply) UnmarshalJSON(b []byte) error {
	type plain BeforeReply
	var p struct {
		plain
		Args json.RawMessage `json:"args,omitempty"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	args, err := agent.RawArguments(p.Args)
	if err != nil {
		return err
	}
	*r = BeforeReply(p.plain)
	r.Args = args
	return nil
}

// AfterCall is the payload of [TopicAfterCall].
type AfterCall struct {
	SessionID      string               `json:"session_id"`
	FunctionCallID string               `json:"function_call_id"`
	FunctionID     string               `json:"function_id"`
	Args           map[string]any       `json:"args"`
	Result         agent.FunctionResult `json:"result"`
}

// AfterReply is a subscriber's reply to [TopicAfterCall], and the shape of
// the merged reply. Result, when present, replaces the call's result (to
// redact it, say); {} keeps it.
type AfterReply struct {
	Result *agent.FunctionResult `json:"result,omitempty"`
}
