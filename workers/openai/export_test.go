package openai

import (
	"context"
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
)

// WithSleep replaces the wait between attempts, so tests record the waits
// instead of sleeping.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(o *options) error {
		if sleep == nil {
			return fmt.Errorf("%w: nil sleep", engine.ErrInvalidOption)
		}
		o.sleep = sleep
		return nil
	}
}

// RetryAfter is retryAfter, for the tests of the hint parser.
var RetryAfter = retryAfter

// WithChannelOptions configures the channel writer of every stream, so
// tests can give it a short idle timeout.
func WithChannelOptions(opts ...channel.Option) Option {
	return func(o *options) error {
		o.channel = append(o.channel, opts...)
		return nil
	}
}
