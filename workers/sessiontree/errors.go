package sessiontree

import (
	"context"
	"errors"
	"fmt"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// ErrStarted is returned by [Worker.Start] when called twice.
var ErrStarted = workers.ErrStarted

// Sentinel errors of the stored formats. A stored entry or meta that does
// not decode is a corrupt store: the functions answer internal.
var (
	// ErrInvalidEntryID is returned by [ParseEntryID] for a string that is
	// not an entry id.
	ErrInvalidEntryID = errors.New("sessiontree: invalid entry id")
	// ErrCorruptRecord is returned when a stored entry does not decode or
	// breaks the tree's invariants.
	ErrCorruptRecord = errors.New("sessiontree: corrupt entry record")
)

// errNotEntry marks a message on a session's entry subject that is not an
// entry of the tree: it does not decode, or breaks an entry's own rules
// (another client published it). Reads and appends pass over such a
// message (see the package doc's "Foreign messages"); a stored id that
// names one is a corrupt store.
var errNotEntry = errors.New("sessiontree: not an entry")

// notEntry is the cause of a message that is not an entry: err, which
// also matches errNotEntry.
type notEntry struct{ err error }

func (e notEntry) Error() string        { return e.err.Error() }
func (e notEntry) Unwrap() error        { return e.err }
func (e notEntry) Is(target error) bool { return target == errNotEntry }

// invalid is the invalid_payload error of a request that fails validation.
func invalid(format string, args ...any) *wire.Error {
	return wire.Errorf(wire.CodeInvalidPayload, format, args...)
}

// notFound is the not_found error of an unknown session or entry.
func notFound(format string, args ...any) *wire.Error {
	return wire.Errorf(wire.CodeNotFound, format, args...)
}

// corrupt is the internal error of a stored record that breaks the tree.
func corrupt(format string, args ...any) *wire.Error {
	return wire.Wrap(wire.CodeInternal, ErrCorruptRecord, format, args...)
}

// storeErr maps an error of a JetStream call onto the catalog: the
// context ending is canceled or timeout, a coded error stays as it is,
// anything else is unavailable (retryable).
func storeErr(ctx context.Context, err error, format string, args ...any) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	what := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return wire.Wrap(wire.CodeCanceled, err, "%s", what)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return wire.Wrap(wire.CodeTimeout, err, "%s", what)
	}
	return wire.Wrap(wire.CodeUnavailable, err, "%s", what)
}
