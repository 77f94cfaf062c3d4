package models

import (
	"context"
	"errors"
	"fmt"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// Sentinel errors of the Go API. Errors that cross the wire are *wire.Error
// values from the catalog (invalid_payload, unavailable, canceled, timeout,
// internal).
var (
	// ErrStarted is returned by [Worker.Start] when called twice.
	ErrStarted = workers.ErrStarted
	// ErrInvalidCatalog is wrapped by every error of a catalog that does not
	// parse or holds an invalid entry ([ParseCatalog], [ApplyOverrides],
	// [WithCatalog], [WithCatalogFile]).
	ErrInvalidCatalog = errors.New("models: invalid catalog")
	// ErrInvalidModelID is wrapped by every [ValidateModelID] error.
	ErrInvalidModelID = errors.New("models: invalid model id")
)

// invalid is the invalid_payload error of a request that fails validation.
func invalid(format string, args ...any) *wire.Error {
	return wire.Errorf(wire.CodeInvalidPayload, format, args...)
}

// invalidWrap is invalid_payload carrying cause (an agent, subjects or model
// id validation error) as its message.
func invalidWrap(cause error) *wire.Error {
	return wire.Wrap(wire.CodeInvalidPayload, cause, "")
}

// ctxErr is the wire error of a call whose own context ended: canceled or
// timeout. It returns nil while ctx is live.
func ctxErr(ctx context.Context, what string) *wire.Error {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return wire.Wrap(wire.CodeCanceled, ctx.Err(), "%s", what)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return wire.Wrap(wire.CodeTimeout, ctx.Err(), "%s", what)
	}
	return nil
}

// storeErr maps an error of a JetStream call onto the catalog: the caller's
// context ending is canceled or timeout, anything else unavailable
// (retryable: the bucket is not reachable right now).
func storeErr(ctx context.Context, err error, format string, args ...any) *wire.Error {
	what := fmt.Sprintf(format, args...)
	if we := ctxErr(ctx, what); we != nil {
		return we
	}
	switch {
	case errors.Is(err, context.Canceled):
		return wire.Wrap(wire.CodeCanceled, err, "%s", what)
	case errors.Is(err, context.DeadlineExceeded):
		return wire.Wrap(wire.CodeTimeout, err, "%s", what)
	}
	return wire.Wrap(wire.CodeUnavailable, err, "%s", what)
}

// catalogErr wraps a catalog problem in [ErrInvalidCatalog].
func catalogErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidCatalog, fmt.Sprintf(format, args...))
}
