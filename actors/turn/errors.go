package turn

import "errors"

// Sentinel errors of [Apply] and [New]. An error from Apply never comes with
// a changed record: the caller keeps the record it passed in.
var (
	// ErrUnexpectedInput is returned for an input that does not fit the
	// record: the wrong state (every input, once the run is stopped or
	// failed), or a call id that is not prepared, already started, already
	// done, not parked. Re-delivered inputs get it, which makes at-least-once
	// delivery safe.
	ErrUnexpectedInput = errors.New("turn: unexpected input")
	// ErrInvalidInput is returned for an input that is malformed whatever
	// the state: a nil input, an empty or duplicated id list, an unknown
	// decision or error kind, an invalid steering message.
	ErrInvalidInput = errors.New("turn: invalid input")
	// ErrInvalidRecord is returned for a record that breaks the machine's
	// invariants (an unknown state, a batch state without a batch, results
	// for calls that were never prepared): one that was not written by this
	// package, or was corrupted in storage.
	ErrInvalidRecord = errors.New("turn: invalid record")
)
