package agent

// EventType names an event of a session's event stream (SPEC §6).
type EventType string

// Event types of SPEC §6.
const (
	EventTurnStateChanged       EventType = "turn_state_changed"
	EventMessageUpdate          EventType = "message_update"
	EventMessageComplete        EventType = "message_complete"
	EventFunctionExecutionStart EventType = "function_execution_start"
	EventFunctionExecutionEnd   EventType = "function_execution_end"
	EventApprovalRequested      EventType = "approval_requested"
	EventTurnEnd                EventType = "turn_end"
	EventCompactionDone         EventType = "compaction_done"
	EventAgentEnd               EventType = "agent_end"
)

// Valid reports whether t is one of the known event types.
func (t EventType) Valid() bool {
	switch t {
	case EventTurnStateChanged, EventMessageUpdate, EventMessageComplete,
		EventFunctionExecutionStart, EventFunctionExecutionEnd, EventApprovalRequested,
		EventTurnEnd, EventCompactionDone, EventAgentEnd:
		return true
	}
	return false
}

// Event is one event on iii.events.<session_id>: the envelope {type,
// session_id, seq, ts} and the fields of its type:
//
//   - turn_state_changed: State, View.
//   - message_update: Delta, Partial (optional).
//   - message_complete: Message.
//   - function_execution_start: FunctionCallID, FunctionID, Args.
//   - function_execution_end: FunctionCallID, Result, IsError, DurationMs.
//   - approval_requested: FunctionCallID, FunctionID, Args.
//   - turn_end: Message (the assistant message), FunctionResults.
//   - compaction_done: Compaction (the orchestrator compacted the
//     transcript before a model call that would have overflowed).
//   - agent_end: StopReason.
//
// Seq orders a session's events; the publisher assigns it (it is 0 in
// events the turn machine builds). TS is Unix milliseconds.
type Event struct {
	Type      EventType `json:"type"`
	SessionID string    `json:"session_id"`
	Seq       uint64    `json:"seq"`
	TS        int64     `json:"ts"`

	State TurnState `json:"state,omitempty"`
	View  *TurnView `json:"view,omitempty"`

	Delta   string   `json:"delta,omitempty"`
	Partial *Message `json:"partial,omitempty"`

	Message *Message `json:"message,omitempty"`

	FunctionCallID string          `json:"function_call_id,omitempty"`
	FunctionID     string          `json:"function_id,omitempty"`
	Args           map[string]any  `json:"args,omitempty"`
	Result         *FunctionResult `json:"result,omitempty"`
	IsError        bool            `json:"is_error,omitempty"`
	DurationMs     int64           `json:"duration_ms,omitempty"`

	FunctionResults []Message `json:"function_results,omitempty"`

	StopReason StopReason `json:"stop_reason,omitempty"`

	Compaction *Compaction `json:"compaction,omitempty"`
}

// Compaction describes a compaction of the session's transcript: the
// compaction entry written to the session tree and the estimated tokens
// (EstimateTokens) of the transcript before and after.
type Compaction struct {
	EntryID      string `json:"entry_id,omitempty"`
	Reason       string `json:"reason"`
	TokensBefore int    `json:"tokens_before"`
	TokensAfter  int    `json:"tokens_after"`
}
