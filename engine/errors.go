package engine

import "errors"

// Sentinel errors of the engine's Go API. Errors that travel on the wire are
// *wire.Error values (see package wire); these are local misuse.
var (
	// ErrClosed is returned by calls on a closed [Engine] or [Worker].
	ErrClosed = errors.New("engine: closed")
	// ErrDuplicateFunction is returned when a worker registers one id twice.
	ErrDuplicateFunction = errors.New("engine: function already registered")
	// ErrUnknownFunction is returned by [Worker.Unregister] for an id the
	// worker does not serve.
	ErrUnknownFunction = errors.New("engine: function not registered by this worker")
	// ErrInvalidWorker is returned for a worker name or version micro refuses.
	ErrInvalidWorker = errors.New("engine: invalid worker")
)
