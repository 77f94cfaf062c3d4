package anthropic

import "github.com/iii-on-nats/iii/engine/channel"

// WithChannelOptions configures the channel writer of every stream, so
// tests can give it a short idle timeout.
func WithChannelOptions(opts ...channel.Option) Option {
	return func(o *options) error {
		o.channel = append(o.channel, opts...)
		return nil
	}
}
