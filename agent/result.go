package agent

// FunctionResult is what a function call returns to the model (SPEC §5).
// Details is structured data for clients and hooks (the model sees Content);
// a denial's details are a [Denial]. Terminate asks the harness to end the
// run once the current batch of calls is done.
type FunctionResult struct {
	Content   []Content `json:"content"`
	Details   any       `json:"details,omitempty"`
	IsError   bool      `json:"is_error"`
	Terminate bool      `json:"terminate,omitempty"`
}

// TextResult returns a successful result with one text block.
func TextResult(text string) FunctionResult {
	return FunctionResult{Content: []Content{Text(text)}}
}

// InterruptedText begins the result of a function call whose outcome is
// unknown: the call may have run, but its answer was lost (an activation
// killed mid-call, a reply that never came back), so it is not run again
// unless idempotent. Providers send it too for a call whose result the
// transcript lacks.
const InterruptedText = "interrupted: outcome unknown"

// ErrorResult returns an error result with one text block and details.
func ErrorResult(text string, details any) FunctionResult {
	return FunctionResult{Content: []Content{Text(text)}, Details: details, IsError: true}
}

// Message returns the function_result message that carries r back to the
// model for the call callID of functionID.
func (r FunctionResult) Message(callID, functionID string, timestampMs int64) Message {
	return Message{
		Role:           RoleFunctionResult,
		FunctionCallID: callID,
		FunctionID:     functionID,
		Content:        r.Content,
		Details:        r.Details,
		IsError:        r.IsError,
		Timestamp:      timestampMs,
	}
}

// Values of [Denial].Status and [Denial].DeniedBy.
const (
	StatusDenied      = "denied"
	StatusAborted     = "aborted"
	StatusInterrupted = "interrupted"

	DeniedByPermissions     = "permissions"
	DeniedByUser            = "user"
	DeniedByGateUnavailable = "gate_unavailable"
	DeniedByBudget          = "budget"
	// DeniedByHook: a before-hook blocked the call (an extension of SPEC
	// §5's list; docs/PROTOCOL.md says so).
	DeniedByHook = "hook"
)

// Denial is the details of a result the harness made up instead of running
// a function (SPEC §5): a denial (status "denied" with DeniedBy), an
// aborted call, or a call interrupted by a crash with an unknown outcome.
// Secrets must be redacted from ArgsExcerpt.
type Denial struct {
	Status      string `json:"status"`
	DeniedBy    string `json:"denied_by,omitempty"`
	FunctionID  string `json:"function_id"`
	RuleID      string `json:"rule_id,omitempty"`
	Reason      string `json:"reason,omitempty"`
	ArgsExcerpt string `json:"args_excerpt,omitempty"`
}
