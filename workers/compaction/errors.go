package compaction

import (
	"context"
	"errors"
	"fmt"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// ErrStarted is returned by [Worker.Start] when called twice.
var ErrStarted = workers.ErrStarted

// Sentinel errors. On the wire they travel inside coded errors (the codes
// are documented on each).
var (
	// ErrInvalidRequest is wrapped by every [CompactRequest.Validate]
	// error (invalid_payload).
	ErrInvalidRequest = errors.New("compaction: invalid request")
	// ErrUnknownModel is returned when models::get does not know the
	// request's provider and model (invalid_payload).
	ErrUnknownModel = errors.New("compaction: unknown model")
	// ErrWindowTooSmall is returned when the model's usable window cannot
	// hold the summarizer prompt, the running summary and one message
	// (internal).
	ErrWindowTooSmall = errors.New("compaction: model window too small to summarize")
	// ErrEntryTooSmall is returned when the entry limit
	// ([WithMaxEntrySize], or the server's max payload less 1 KiB) cannot
	// hold the entry's other fields and 256 bytes each of the summary and
	// of the quote of the newest user request (internal).
	ErrEntryTooSmall = errors.New("compaction: entry limit too small for a compaction entry")
	// ErrEmptySummary is returned when the model answers without text
	// (internal).
	ErrEmptySummary = errors.New("compaction: the model returned an empty summary")
	// ErrTruncatedSummary is returned when the model's answer did not
	// end normally (its stop reason is length, error, aborted, ...): a
	// summary cut off by the output bound would lose its last sections
	// for good (internal).
	ErrTruncatedSummary = errors.New("compaction: the model's summary did not end normally")
	// ErrPathChanged is returned when the session's active leaf moved to
	// another branch during the compaction, one without the first kept
	// entry: nothing is written; compacting again works on the new path
	// (conflict).
	ErrPathChanged = errors.New("compaction: the session's active path changed during the compaction")
	// ErrLeaseLost is returned when a compaction could not renew its lease
	// in time, so another one may have started; nothing is written
	// (conflict).
	ErrLeaseLost = errors.New("compaction: lease lost")
	// ErrBucketConfig is returned by [Worker.Start] when [LeaseBucket]
	// exists without per-key TTLs (LimitMarkerTTL).
	ErrBucketConfig = errors.New("compaction: lease bucket lacks per-key TTL support")
)

// errShuttingDown ends the calls in flight when the worker closes.
var errShuttingDown = wire.Errorf(wire.CodeUnavailable, "the compaction worker is shutting down")

func invalid(format string, args ...any) *wire.Error {
	return wire.Wrap(wire.CodeInvalidPayload, fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...), "")
}

// busErr maps an error onto the catalog: when ctx ended with a coded
// cause (a lost lease, the worker shutting down), that cause; else a coded
// error stays as it is, the context ending is canceled or timeout, and
// anything else is unavailable.
func busErr(ctx context.Context, err error, format string, args ...any) *wire.Error {
	var we *wire.Error
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &we) {
		return we
	}
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

// callErr prefixes a coded error from another function with what this
// worker was doing, keeping its code, retryable flag and details.
func callErr(err error, format string, args ...any) *wire.Error {
	we := wire.From(err)
	c := *we
	c.Message = fmt.Sprintf(format, args...) + ": " + we.Message
	return &c
}
