package scripted

import (
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/agent"
)

// Reply is what a scripted model answers to one model call. The blocks
// stream in order: thinking, text, then the calls. A reply with Fail set
// streams its blocks (the partial answer) and then fails with that kind.
type Reply struct {
	// Thinking, when set, is streamed as a thinking block.
	Thinking string
	// Text, when set, is streamed as a text block.
	Text string
	// Calls are the function calls of the answer, in order. A call without
	// an ID gets a deterministic one.
	Calls []Call
	// Fail, when set, ends the stream with an error event of this kind
	// after the blocks above.
	Fail agent.ErrorKind
	// FailMessage is the error text (default "scripted failure: <kind>").
	FailMessage string
	// RetryAfter is the hint of a rate_limited failure.
	RetryAfter time.Duration
	// StopReason overrides the stop reason: by default "function_call"
	// when there are calls, "end" otherwise ("length" when max_tokens cut
	// the answer).
	StopReason agent.StopReason
	// Delay is waited before the first token (after the start event).
	Delay time.Duration
	// Pace is waited between two deltas; zero means the provider's
	// [WithDeltaInterval].
	Pace time.Duration
}

// Call is one function call of a [Reply].
type Call struct {
	// ID is the call id; empty means derived from the transcript, so that
	// the same request always yields the same ids.
	ID         string
	FunctionID string
	Arguments  map[string]any
}

// ScriptFunc answers one model call. It must be deterministic and safe for
// concurrent use: the same request gives the same reply, whichever replica
// answers it. An error that is a *wire.Error with code invalid_payload is
// the caller's fault and is returned to it (nothing is streamed); any other
// error becomes a permanent error event.
type ScriptFunc func(req StreamRequest) (Reply, error)

// Sequence returns a script that plays replies in order, one per model
// call: it answers with replies[n], where n is the number of assistant
// messages already in the transcript. It keeps no state, so any replica
// answers a conversation the same way. Past the last reply it fails with
// [ErrScriptExhausted].
func Sequence(replies ...Reply) ScriptFunc {
	replies = append([]Reply(nil), replies...)
	return func(req StreamRequest) (Reply, error) {
		n := 0
		for _, m := range req.Messages {
			if m.Role == agent.RoleAssistant {
				n++
			}
		}
		if n >= len(replies) {
			return Reply{}, fmt.Errorf("%w: model call %d of a script of %d replies", ErrScriptExhausted, n+1, len(replies))
		}
		return replies[n], nil
	}
}

// check reports what makes r impossible to stream.
func (r Reply) check() error {
	if r.Fail != "" && !r.Fail.Valid() {
		return fmt.Errorf("%w: unknown failure kind %q", ErrInvalidReply, r.Fail)
	}
	if r.StopReason != "" && !r.StopReason.Valid() {
		return fmt.Errorf("%w: unknown stop reason %q", ErrInvalidReply, r.StopReason)
	}
	if r.Delay < 0 || r.Pace < 0 || r.RetryAfter < 0 {
		return fmt.Errorf("%w: negative delay, pace or retry-after", ErrInvalidReply)
	}
	return nil
}
