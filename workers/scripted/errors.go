package scripted

import (
	"errors"

	"github.com/iii-on-nats/iii/workers"
)

// Sentinel errors. Request errors reach a caller on the wire as
// invalid_payload; reply errors become a permanent error event.
var (
	// ErrInvalidRequest is wrapped by every [StreamRequest.Validate] and
	// [CompleteRequest.Validate] error.
	ErrInvalidRequest = errors.New("scripted: invalid request")
	// ErrUnknownModel is returned for a model that is neither "echo" nor
	// scripted with [WithScript].
	ErrUnknownModel = errors.New("scripted: unknown model")
	// ErrInvalidReply is returned for a [Reply] a script produced that
	// cannot be streamed (an unknown failure kind or stop reason, a call
	// without a valid function id, a negative delay).
	ErrInvalidReply = errors.New("scripted: invalid reply")
	// ErrScriptExhausted is returned by a [Sequence] asked for more replies
	// than it holds.
	ErrScriptExhausted = errors.New("scripted: script exhausted")
	// ErrStarted is returned by [Worker.Start] on a worker that already
	// started.
	ErrStarted = workers.ErrStarted
)
