package turn

import "github.com/iii-on-nats/iii/agent"

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
