package cron

import (
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Defaults of a [Scheduler].
const (
	// DefaultMisfireGrace is how late a scheduler may still claim a tick.
	DefaultMisfireGrace = 30 * time.Second
	// DefaultFireTimeout bounds one call of a job's function.
	DefaultFireTimeout = 30 * time.Second
)

// Option configures a [Scheduler] (and the "next" times [Serve] reports).
type Option func(*options) error

type options struct {
	clock       Clock
	loc         *time.Location
	grace       time.Duration
	fireTimeout time.Duration
	// bucketCheck is how often the scheduler asks whether the jobs bucket
	// its watch follows is still the same bucket.
	bucketCheck time.Duration
}

func defaultOptions() options {
	return options{
		clock:       SystemClock,
		loc:         time.UTC,
		grace:       DefaultMisfireGrace,
		fireTimeout: DefaultFireTimeout,
		bucketCheck: defaultBucketCheck,
	}
}

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// WithClock sets the clock ticks are computed and waited on with; the
// default is [SystemClock].
func WithClock(c Clock) Option {
	return func(o *options) error {
		if c == nil {
			return fmt.Errorf("%w: nil clock", engine.ErrInvalidOption)
		}
		o.clock = c
		return nil
	}
}

// WithLocation sets the time zone of jobs that name none; the default is
// UTC. Every scheduler on the bus must use the same one, or they compute
// different ticks.
func WithLocation(loc *time.Location) Option {
	return func(o *options) error {
		if loc == nil {
			return fmt.Errorf("%w: nil location", engine.ErrInvalidOption)
		}
		o.loc = loc
		return nil
	}
}

// WithMisfireGrace sets how late (by this node's clock) a scheduler may
// still claim a tick, e.g. after a GC pause; later ticks are skipped. A
// tick's lease lives twice as long plus a second, so nodes whose clocks
// differ by less than the grace never fire one tick twice. At least one
// second.
func WithMisfireGrace(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Second {
			return fmt.Errorf("%w: misfire grace %v must be at least 1s", engine.ErrInvalidOption, d)
		}
		o.grace = d
		return nil
	}
}

// WithFireTimeout bounds one call of a job's function (default
// [DefaultFireTimeout]).
func WithFireTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: fire timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.fireTimeout = d
		return nil
	}
}
