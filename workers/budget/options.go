package budget

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Defaults of the options.
const (
	// DefaultReservationTTL is how long an unsettled hold lasts.
	DefaultReservationTTL = 15 * time.Minute
	// DefaultRetention is how long a reservation record outlives its hold's
	// expiry or its settlement: the window in which a late settle still
	// counts and a repeated settle is recognised.
	DefaultRetention = time.Hour
	// DefaultMaxAttempts bounds the compare-and-set attempts on one key
	// before a call answers conflict.
	DefaultMaxAttempts = 256
)

// Option configures a [Ledger] (and the [Worker] that opens one).
type Option func(*options) error

type options struct {
	now       func() time.Time
	logger    *slog.Logger // nil: the engine's
	ttl       time.Duration
	retention time.Duration
	attempts  int
	// bucketCheck is how often the definitions watch checks that the
	// bucket was not deleted or created again (engine.FollowBucket); 0:
	// the engine's default. Tests shorten it.
	bucketCheck time.Duration
}

func buildOptions(opts []Option) (options, error) {
	o := options{now: time.Now, ttl: DefaultReservationTTL, retention: DefaultRetention, attempts: DefaultMaxAttempts}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	return o, nil
}

// WithClock sets the clock that places periods, stamps records and expires
// holds (default time.Now), for deterministic tests. KV TTLs still run on
// the server's clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", engine.ErrInvalidOption)
		}
		o.now = now
		return nil
	}
}

// WithLogger sets the logger (default: the engine's, with worker=budget).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// WithReservationTTL sets the hold time of a reservation that names no
// ttl_ms (default [DefaultReservationTTL]; between 1 s and 24 h).
func WithReservationTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < MinReservationTTL*time.Millisecond || d > MaxReservationTTL*time.Millisecond {
			return fmt.Errorf("%w: reservation ttl %v is not between 1s and 24h", engine.ErrInvalidOption, d)
		}
		o.ttl = d
		return nil
	}
}

// WithRetention sets how long reservation records are kept after their
// hold expires or they are settled (default [DefaultRetention]; between
// 1 s and 30 days). Settling later answers not_found.
func WithRetention(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Second || d > 30*24*time.Hour {
			return fmt.Errorf("%w: retention %v is not between 1s and 720h", engine.ErrInvalidOption, d)
		}
		o.retention = d
		return nil
	}
}

// WithMaxAttempts bounds the compare-and-set attempts on one ledger key
// (default [DefaultMaxAttempts]); a call that loses them all answers
// conflict (retryable).
func WithMaxAttempts(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 1<<16 {
			return fmt.Errorf("%w: max attempts %d is not between 1 and 65536", engine.ErrInvalidOption, n)
		}
		o.attempts = n
		return nil
	}
}
