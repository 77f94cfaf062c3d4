package topic

import (
	"time"

	"github.com/iii-on-nats/iii/engine/queue"
)

// Option configures a durable [Subscribe].
type Option func(*options) error

type options struct {
	deliverAll  bool
	ackWait     time.Duration
	callTimeout time.Duration
	q           []queue.Option
}

func buildOptions(opts []Option) (options, error) {
	var o options
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

// forward records a queue option (checked by Subscribe before it creates
// anything) and, with also, the values topic needs itself.
func forward(qo queue.Option, also func(*options)) Option {
	return func(o *options) error {
		if err := queue.ValidateOptions(qo); err != nil {
			return err
		}
		if also != nil {
			also(o)
		}
		o.q = append(o.q, qo)
		return nil
	}
}

// WithDeliverAll makes a new subscription start at the oldest message the
// topic stream still holds, instead of at the next message published (the
// default). It matters only when the subscription's durable consumer is
// created; an existing one keeps its position.
func WithDeliverAll() Option {
	return func(o *options) error {
		o.deliverAll = true
		return nil
	}
}

// WithMaxDeliver sets how many deliveries a message gets before it is
// terminated (default queue.DefaultMaxDeliver); see [queue.WithMaxDeliver].
func WithMaxDeliver(n int) Option { return forward(queue.WithMaxDeliver(n), nil) }

// WithBackoff sets the retry delays; see [queue.WithBackoff].
func WithBackoff(base, max time.Duration) Option { return forward(queue.WithBackoff(base, max), nil) }

// WithJitter turns retry jitter on (default) or off; see [queue.WithJitter].
func WithJitter(on bool) Option { return forward(queue.WithJitter(on), nil) }

// WithCallTimeout bounds one call of the subscribing function; see
// [queue.WithCallTimeout].
func WithCallTimeout(d time.Duration) Option {
	return forward(queue.WithCallTimeout(d), func(o *options) { o.callTimeout = d })
}

// WithAckWait sets the AckWait of the subscription's durable consumer
// (default: call timeout + queue.AckMargin); see [queue.WithAckWait].
func WithAckWait(d time.Duration) Option {
	return forward(queue.WithAckWait(d), func(o *options) { o.ackWait = d })
}

// WithConcurrency bounds the calls one Subscription runs at once; see
// [queue.WithConcurrency].
func WithConcurrency(n int) Option { return forward(queue.WithConcurrency(n), nil) }
