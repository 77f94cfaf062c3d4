package state

import (
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/subjects"
)

// Defaults of a [Store].
const (
	// DefaultHistory is how many revisions per key the bucket keeps when
	// [New] creates it; state triggers read old values from them.
	DefaultHistory = 16
	// DefaultMaxRetries bounds the compare-and-set attempts of one write.
	DefaultMaxRetries = 64
	// payloadHeadroom is kept free of the server's max payload for the
	// reply or event envelope around the values.
	payloadHeadroom = 4 << 10
)

// Option configures a [Store].
type Option func(*options) error

type options struct {
	bucket       string
	history      int
	maxRetries   int
	maxValueSize int
	timeout      time.Duration
}

func defaultOptions() options {
	return options{
		bucket:     subjects.StateBucket,
		history:    DefaultHistory,
		maxRetries: DefaultMaxRetries,
		timeout:    engine.DefaultTimeout,
	}
}

// WithBucket sets the KV bucket (default subjects.StateBucket, "iii-state").
// Meant for tests and for running two independent stores on one account.
func WithBucket(name string) Option {
	return func(o *options) error {
		if err := subjects.ValidateID("bucket", name); err != nil {
			return fmt.Errorf("%w: %v", engine.ErrInvalidOption, err)
		}
		o.bucket = name
		return nil
	}
}

// WithHistory sets how many revisions per key a bucket created by [New]
// keeps (1..64, default [DefaultHistory]). An existing bucket is used as it
// is.
func WithHistory(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 64 {
			return fmt.Errorf("%w: history %d must be 1..64", engine.ErrInvalidOption, n)
		}
		o.history = n
		return nil
	}
}

// WithMaxRetries bounds the compare-and-set attempts of one Set, Update or
// Delete before it fails with conflict (default [DefaultMaxRetries]).
func WithMaxRetries(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: max retries %d must be at least 1", engine.ErrInvalidOption, n)
		}
		o.maxRetries = n
		return nil
	}
}

// WithMaxValueSize lowers the largest JSON-encoded value the store accepts.
// The default and the ceiling is half of the server's max payload minus 4
// KiB, so that a reply or a trigger event carrying both the old and the new
// value always fits in one message.
func WithMaxValueSize(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: max value size %d must be positive", engine.ErrInvalidOption, n)
		}
		o.maxValueSize = n
		return nil
	}
}

// WithTimeout bounds store calls whose context has no deadline (default
// engine.DefaultTimeout).
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.timeout = d
		return nil
	}
}
