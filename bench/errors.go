package bench

import "errors"

// Sentinel errors of the bench.
var (
	// ErrInvalidConfig wraps every error of [Config.Validate].
	ErrInvalidConfig = errors.New("bench: invalid config")
	// ErrTurnFailed is returned (with the Result so far) when a turn did not
	// end with stop_reason "end", was refused, or timed out.
	ErrTurnFailed = errors.New("bench: turn failed")
	// ErrNoProcStatus is returned by the /proc readers on systems without
	// them (not Linux).
	ErrNoProcStatus = errors.New("bench: /proc status unavailable")
)
