package agent

// TurnState is a state of the per-session turn state machine (SPEC §6).
type TurnState string

// Turn states. [StateStopped] and [StateFailed] are terminal.
const (
	StateProvisioning             TurnState = "provisioning"
	StateAssistantStreaming       TurnState = "assistant_streaming"
	StateFunctionExecute          TurnState = "function_execute"
	StateFunctionAwaitingApproval TurnState = "function_awaiting_approval"
	StateSteeringCheck            TurnState = "steering_check"
	StateStopped                  TurnState = "stopped"
	StateFailed                   TurnState = "failed"
)

// Valid reports whether s is one of the known states.
func (s TurnState) Valid() bool {
	switch s {
	case StateProvisioning, StateAssistantStreaming, StateFunctionExecute,
		StateFunctionAwaitingApproval, StateSteeringCheck, StateStopped, StateFailed:
		return true
	}
	return false
}

// Terminal reports whether s ends a run.
func (s TurnState) Terminal() bool { return s == StateStopped || s == StateFailed }

// PendingApproval is a function call parked until a human decides
// (approval::list_pending). ArgsHash binds the decision to the exact
// arguments shown; RequestedAt is Unix milliseconds.
type PendingApproval struct {
	FunctionCallID string         `json:"function_call_id"`
	FunctionID     string         `json:"function_id"`
	Args           map[string]any `json:"args,omitempty"`
	ArgsHash       string         `json:"args_hash,omitempty"`
	RequestedAt    int64          `json:"requested_at"`
}

// Failure is why a run failed: the provider's error kind and its text.
type Failure struct {
	Kind    ErrorKind `json:"kind"`
	Message string    `json:"message"`
}

// TurnView is the client's view of a session's current run: the answer of
// turn::get_state and the view of a turn_state_changed event. It is the
// turn record without the machine's working data.
type TurnView struct {
	SessionID        string            `json:"session_id"`
	RunID            string            `json:"run_id"`
	State            TurnState         `json:"state"`
	Step             uint64            `json:"step"`
	TurnCount        int               `json:"turn_count"`
	MaxTurns         int               `json:"max_turns,omitempty"`
	AwaitingApproval []PendingApproval `json:"awaiting_approval,omitempty"`
	StopReason       StopReason        `json:"stop_reason,omitempty"`
	Error            *Failure          `json:"error,omitempty"`
	StartedAtMs      int64             `json:"started_at_ms"`
	UpdatedAtMs      int64             `json:"updated_at_ms"`
}
