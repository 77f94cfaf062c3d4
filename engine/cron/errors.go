package cron

import "errors"

// Sentinel errors. Errors that travel on the wire are *wire.Error values
// (invalid_payload, unavailable) that wrap these, so both errors.Is checks
// work on the Go side.
var (
	// ErrInvalidExpression wraps every error [Parse] returns.
	ErrInvalidExpression = errors.New("cron: invalid expression")
	// ErrInvalidJob is returned for a job with a bad id, function id,
	// timezone or data.
	ErrInvalidJob = errors.New("cron: invalid job")
	// ErrNoKeyTTL is returned by [Start] when the lease bucket exists but was
	// created without per-key TTLs (LimitMarkerTTL), so leases would never
	// expire.
	ErrNoKeyTTL = errors.New("cron: lease bucket has no per-key TTL")
	// ErrClosed is returned by calls on a closed [Scheduler].
	ErrClosed = errors.New("cron: scheduler closed")
)
