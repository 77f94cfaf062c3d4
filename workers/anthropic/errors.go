package anthropic

import (
	"errors"

	"github.com/iii-on-nats/iii/workers"
)

// Sentinel errors. Request errors reach a caller on the wire as
// invalid_payload; provider failures travel as error events (a stream) or
// coded wire errors (complete, models) whose details carry the
// agent.ErrorKind.
var (
	// ErrInvalidRequest is wrapped by every [StreamRequest.Validate] and
	// [CompleteRequest.Validate] error, and by a transcript that maps onto
	// no message at all.
	ErrInvalidRequest = errors.New("anthropic: invalid request")
	// ErrNoCredential is the cause of an auth_expired failure when neither
	// auth::get_token nor the environment has a credential for Anthropic.
	ErrNoCredential = errors.New("anthropic: no credential")
	// ErrMalformedStream is the cause of a permanent failure when the
	// Messages API streams something that cannot be read (a tool_use block
	// whose input is not a JSON object, a block without an id).
	ErrMalformedStream = errors.New("anthropic: malformed stream")
	// ErrStarted is returned by [Worker.Start] on a worker that already
	// started.
	ErrStarted = workers.ErrStarted
)
