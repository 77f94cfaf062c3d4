package turn

import (
	"iter"
	"strconv"

	"github.com/iii-on-nats/iii/agent"
)

// EffectKind names what an [Effect] asks the grain to do.
type EffectKind string

// Effect kinds.
const (
	// EffectEmit: publish Event on iii.events.<session_id> (the publisher
	// assigns seq).
	EffectEmit EffectKind = "emit"
	// EffectAppendHistory: append Messages, in order, to the session's
	// transcript (session::append_batch).
	EffectAppendHistory EffectKind = "append_history"
	// EffectFinish: the run ended; release what it holds (see [Finish]).
	EffectFinish EffectKind = "finish"
	// EffectEndCalls: publish a function_execution_end for each call of
	// Ends ([Effect.EndEvents]): a lean failure's ends, built at delivery
	// so that the record holds only the calls' ids.
	EffectEndCalls EffectKind = "end_calls"
)

// Effect is one thing the grain must do after writing the record that
// produced it. Effects are plain data so the record can carry the ones not
// yet delivered (its outbox).
//
// ID is "<run_id>:<step>:<index>", unique per session and the same every
// time the effect is delivered again after a crash: use it as the
// Nats-Msg-Id of an event and as the idempotency key of a transcript
// append, so a redelivery is a no-op.
type Effect struct {
	Kind     EffectKind      `json:"kind"`
	ID       string          `json:"id"`
	Event    *agent.Event    `json:"event,omitempty"`
	Messages []agent.Message `json:"messages,omitempty"`
	Finish   *Finish         `json:"finish,omitempty"`
	Ends     *CallEnds       `json:"ends,omitempty"`
}

// CallEnds is what an [EffectEndCalls] ends: calls that were announced
// (function_execution_start went out), each with the error result Text.
type CallEnds struct {
	SessionID string   `json:"session_id"`
	Calls     []string `json:"calls"`
	Text      string   `json:"text"`
	TS        int64    `json:"ts"`
}

// EndEvents yields the events an [EffectEndCalls] publishes, each with
// its message id: the effect's ID, ":", the call's index in Ends.Calls.
// Any other effect yields none.
func (e Effect) EndEvents() iter.Seq2[string, agent.Event] {
	return func(yield func(string, agent.Event) bool) {
		if e.Kind != EffectEndCalls || e.Ends == nil {
			return
		}
		for i, id := range e.Ends.Calls {
			r := agent.ErrorResult(e.Ends.Text, nil)
			ev := agent.Event{Type: agent.EventFunctionExecutionEnd, SessionID: e.Ends.SessionID, TS: e.Ends.TS,
				FunctionCallID: id, Result: &r, IsError: true}
			if !yield(e.ID+":"+strconv.Itoa(i), ev) {
				return
			}
		}
	}
}

// Finish tells the grain that the run ended and what to clean up: cancel
// the calls still in flight (their results were already recorded as
// aborted), withdraw the approvals still pending, push Requeue back to the
// session's follow-up inbox, destroy the run's sandbox, settle the budget
// reservation, and ack the step that woke the session.
type Finish struct {
	StopReason agent.StopReason `json:"stop_reason"`
	// Reason is the human text of an abort, a budget stop or a failure.
	Reason   string          `json:"reason,omitempty"`
	Cancel   []string        `json:"cancel,omitempty"`
	Withdraw []string        `json:"withdraw,omitempty"`
	Requeue  []agent.Message `json:"requeue,omitempty"`
	// Sandbox: the run asked for a sandbox; destroy the session's.
	Sandbox bool `json:"sandbox,omitempty"`
}
