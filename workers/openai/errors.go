package openai

import (
	"errors"

	"github.com/iii-on-nats/iii/workers"
)

// Sentinel errors. Request errors reach a caller on the wire as
// invalid_payload; the others become an error event of a stream (or a coded
// error of complete and models).
var (
	// ErrInvalidRequest is wrapped by every validation error of a stream,
	// complete or models request.
	ErrInvalidRequest = errors.New("openai: invalid request")
	// ErrNoCredential is returned when a provider that requires a key has
	// none: auth::get_token answered null (or is not deployed) and the
	// environment variable is not set. Streams report it as an
	// auth_expired error event.
	ErrNoCredential = errors.New("openai: no credential")
	// ErrStarted is returned by [Worker.Start] on a worker that already
	// started.
	ErrStarted = workers.ErrStarted
)
