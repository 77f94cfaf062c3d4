package traces

import (
	"errors"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// Sentinel errors of the Go API. Errors that cross the wire are *wire.Error
// values from the catalog: invalid_payload for a bad request, not_found for
// a trace the store does not hold.
var (
	// ErrStarted is returned by [Worker.Start] when called twice.
	ErrStarted = workers.ErrStarted
	// ErrInvalidSpan is wrapped by every error of a span that does not
	// decode or validate ([DecodeSpan], [Span.Validate]).
	ErrInvalidSpan = errors.New("traces: invalid span")
)

// invalid is the invalid_payload error of a request that fails validation.
func invalid(format string, args ...any) *wire.Error {
	return wire.Errorf(wire.CodeInvalidPayload, format, args...)
}
