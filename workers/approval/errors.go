package approval

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// ErrStarted is returned by [Worker.Start] when called twice.
var ErrStarted = workers.ErrStarted

// invalid is the invalid_payload error of a request that fails validation.
func invalid(format string, args ...any) *wire.Error {
	return wire.Errorf(wire.CodeInvalidPayload, format, args...)
}

// invalidWrap is invalid_payload carrying cause (an agent or subjects
// validation error) as its message.
func invalidWrap(cause error) *wire.Error {
	return wire.Wrap(wire.CodeInvalidPayload, cause, "")
}

// notPending is the not_pending error of a decision nobody is waiting for.
func notPending(format string, args ...any) *wire.Error {
	return wire.Errorf(wire.CodeNotPending, format, args...)
}

// storeErr maps an error of a JetStream call onto the catalog: a value
// larger than the server's max payload is invalid_payload (the same write
// never fits, so a retry cannot help), the caller's context ending is
// canceled or timeout, anything else unavailable (retryable: the bucket is
// not reachable right now).
func storeErr(ctx context.Context, err error, format string, args ...any) *wire.Error {
	what := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return wire.Wrap(wire.CodeInvalidPayload, err, "%s", what)
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return wire.Wrap(wire.CodeCanceled, err, "%s", what)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return wire.Wrap(wire.CodeTimeout, err, "%s", what)
	}
	return wire.Wrap(wire.CodeUnavailable, err, "%s", what)
}
