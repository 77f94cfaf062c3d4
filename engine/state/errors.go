package state

import "errors"

// Sentinel errors. Errors returned by [Store] methods and sent by the state
// functions are *wire.Error values (match them with errors.Is against
// wire.ErrInvalidPayload, wire.ErrNotFound, wire.ErrConflict,
// wire.ErrUnavailable); the sentinels below are wrapped inside them so a Go
// caller can also tell the reasons apart.
var (
	// ErrValueTooLarge: the JSON encoding of a value exceeds the store's
	// maximum value size ([WithMaxValueSize]), or its msgpack encoding
	// exceeds it by more than a few header bytes. Wrapped in
	// invalid_payload.
	ErrValueTooLarge = errors.New("state: value too large")
	// ErrInvalidValue: a value has no JSON encoding (NaN, infinity, a
	// channel, ...). Wrapped in invalid_payload.
	ErrInvalidValue = errors.New("state: value is not JSON")
	// ErrInvalidOp: an update operation is malformed or does not apply to
	// the value it meets (increment of a string, a path through a number,
	// an array index out of range). Wrapped in invalid_payload.
	ErrInvalidOp = errors.New("state: invalid update operation")
	// ErrContention: a compare-and-set write lost to concurrent writers on
	// every attempt ([WithMaxRetries]). Wrapped in conflict.
	ErrContention = errors.New("state: too much contention on key")
)
