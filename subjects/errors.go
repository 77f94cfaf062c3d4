package subjects

import "errors"

// Sentinel errors. Every validation error wraps exactly one of them, so
// callers can map it onto the wire catalog with errors.Is.
var (
	// ErrInvalidFunctionID is returned for an empty, oversized, malformed or
	// non-UTF-8 function id, or one with an empty segment or a control or
	// space character.
	ErrInvalidFunctionID = errors.New("subjects: invalid function id")
	// ErrNotFunctionSubject is returned when a subject is not under
	// [FunctionPrefix] or does not decode.
	ErrNotFunctionSubject = errors.New("subjects: not a function subject")
	// ErrInvalidID is returned for a session id, call id, queue, topic or
	// scope name that is not 1–128 characters of [A-Za-z0-9_-].
	ErrInvalidID = errors.New("subjects: invalid id")
	// ErrInvalidKey is returned for a state key that is empty, oversized, has
	// an empty '/' segment or a control character.
	ErrInvalidKey = errors.New("subjects: invalid key")
)
