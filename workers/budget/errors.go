package budget

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// ErrStarted is returned by [Worker.Start] when called twice.
var ErrStarted = workers.ErrStarted

// ErrNoTTLSupport is returned by [Open] when the ledger bucket exists
// without per-key TTLs (LimitMarkerTTL), which reservations need to lapse.
var ErrNoTTLSupport = errors.New("budget: ledger bucket has no per-key TTL support")

// invalid is the invalid_payload error of a request that fails validation.
func invalid(format string, args ...any) *wire.Error {
	return wire.Errorf(wire.CodeInvalidPayload, format, args...)
}

// invalidWrap is invalid_payload carrying cause (an id validation error)
// as its message.
func invalidWrap(cause error) *wire.Error {
	return wire.Wrap(wire.CodeInvalidPayload, cause, "")
}

// storeErr maps an error of a JetStream call onto the catalog: the caller's
// context ending is canceled or timeout, anything else unavailable
// (retryable: the bucket is not reachable right now).
func storeErr(ctx context.Context, err error, format string, args ...any) *wire.Error {
	what := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return wire.Wrap(wire.CodeCanceled, err, "%s", what)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return wire.Wrap(wire.CodeTimeout, err, "%s", what)
	}
	return wire.Wrap(wire.CodeUnavailable, err, "%s", what)
}

// isConflict reports whether err is a lost compare-and-set: a revision
// mismatch on update, or a key that exists on create.
func isConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
