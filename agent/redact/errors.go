package redact

import "errors"

// ErrInvalidOption wraps every error an [Option] returns (see [New]).
//
// It is this package's own sentinel rather than engine.ErrInvalidOption so
// that redact stays a pure leaf package (no NATS, no OTel) that the pure
// state machines can import.
var ErrInvalidOption = errors.New("redact: invalid option")
