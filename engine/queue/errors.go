package queue

import "errors"

// Sentinel errors of the package's Go API. Errors that cross the wire, and
// those of Consume, Redrive, DeadLetters and Stats, are *wire.Error values
// (invalid_payload for a bad queue name, unavailable when JetStream fails,
// not_found for a dead letter that is not there).
var (
	// ErrNotDrained is returned by [Consumer.Close] when its context ended
	// before the calls in flight finished; they were abandoned and their
	// messages come back after AckWait.
	ErrNotDrained = errors.New("queue: consumer stopped before its calls finished")
)
