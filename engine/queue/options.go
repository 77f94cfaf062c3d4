package queue

import (
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Defaults of a [Consumer]; each has an option.
const (
	// DefaultMaxDeliver is how many times a message is tried before it is
	// dead-lettered.
	DefaultMaxDeliver = 5
	// DefaultBackoffBase is the delay before the second delivery; each
	// further retry doubles it.
	DefaultBackoffBase = time.Second
	// DefaultBackoffMax caps the retry delay.
	DefaultBackoffMax = time.Minute
	// DefaultConcurrency bounds the calls one Consumer runs at once; it is
	// also the number of messages the consumer pulls ahead.
	DefaultConcurrency = 8
	// AckMargin is added to the call timeout to size the consumer's
	// AckWait, so that a call that runs to its timeout is still answered
	// (acked or nak'ed) before JetStream gives the message to someone else.
	AckMargin = 5 * time.Second
)

// Option configures a [Consumer] (see [Consume] and [Attach]).
type Option func(*options) error

type options struct {
	maxDeliver   int
	backoffBase  time.Duration
	backoffMax   time.Duration
	jitter       bool
	ackWait      time.Duration // 0: callTimeout + AckMargin
	callTimeout  time.Duration
	concurrency  int
	nonRetryable map[wire.Code]bool
	function     string
	checkEvery   time.Duration // how often a Consumer looks at its JetStream consumer
}

func defaultOptions() options {
	return options{
		maxDeliver:   DefaultMaxDeliver,
		backoffBase:  DefaultBackoffBase,
		backoffMax:   DefaultBackoffMax,
		jitter:       true,
		callTimeout:  engine.DefaultTimeout,
		concurrency:  DefaultConcurrency,
		nonRetryable: defaultNonRetryable(),
		checkEvery:   defaultCheckEvery,
	}
}

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
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

// consumerAckWait is the AckWait these options ask for.
func (o options) consumerAckWait() time.Duration {
	if o.ackWait > 0 {
		return o.ackWait
	}
	return o.callTimeout + AckMargin
}

// WithMaxDeliver sets how many deliveries a message gets before it is
// dead-lettered (default [DefaultMaxDeliver]). 1 means no retries.
func WithMaxDeliver(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: max deliver %d must be at least 1", engine.ErrInvalidOption, n)
		}
		o.maxDeliver = n
		return nil
	}
}

// WithBackoff sets the retry delays: base before the second delivery,
// doubling per retry, capped at max.
func WithBackoff(base, max time.Duration) Option {
	return func(o *options) error {
		if base <= 0 || max < base {
			return fmt.Errorf("%w: backoff base %v and max %v must satisfy 0 < base <= max", engine.ErrInvalidOption, base, max)
		}
		o.backoffBase, o.backoffMax = base, max
		return nil
	}
}

// WithJitter turns the retry jitter on (the default) or off. With jitter a
// delay d is drawn from [d/2, d], so that many messages failing together do
// not come back together; tests turn it off for exact timings.
func WithJitter(on bool) Option {
	return func(o *options) error {
		o.jitter = on
		return nil
	}
}

// WithCallTimeout bounds one call of the target function (default
// [engine.DefaultTimeout]). A call that times out is retried.
func WithCallTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: call timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.callTimeout = d
		return nil
	}
}

// WithAckWait sets the AckWait of the consumer this package creates
// (default: call timeout + [AckMargin]). It is how long a message stays
// with a consumer that stopped answering — a crashed process — before
// JetStream redelivers it. While a call runs, the consumer sends
// in-progress heartbeats every AckWait/3, so an AckWait shorter than the
// call timeout is safe and makes crash recovery faster. [Attach] uses the
// AckWait of the consumer it is given.
func WithAckWait(d time.Duration) Option {
	return func(o *options) error {
		if d < 30*time.Millisecond {
			return fmt.Errorf("%w: ack wait %v must be at least 30ms", engine.ErrInvalidOption, d)
		}
		o.ackWait = d
		return nil
	}
}

// WithConcurrency bounds the calls one Consumer runs at once (default
// [DefaultConcurrency]); the consumer pulls as many messages ahead.
func WithConcurrency(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("%w: concurrency %d must be 1..1024", engine.ErrInvalidOption, n)
		}
		o.concurrency = n
		return nil
	}
}

// WithNonRetryable replaces the set of error codes that dead-letter a
// message at once instead of retrying it (default: invalid_payload and
// forbidden, see [Retryable]).
func WithNonRetryable(codes ...wire.Code) Option {
	return func(o *options) error {
		set := make(map[wire.Code]bool, len(codes))
		for _, c := range codes {
			if _, ok := wire.Lookup(c); !ok {
				return fmt.Errorf("%w: unknown error code %q", engine.ErrInvalidOption, c)
			}
			set[c] = true
		}
		o.nonRetryable = set
		return nil
	}
}

// WithFunction makes the consumer call function id for every message
// instead of the function named by the message's Iii-Function-Id header.
// Durable topic subscriptions use it.
func WithFunction(id string) Option {
	return func(o *options) error {
		if err := subjects.ValidateFunctionID(id); err != nil {
			return fmt.Errorf("%w: %v", engine.ErrInvalidOption, err)
		}
		o.function = id
		return nil
	}
}

// RedriveOption configures one [Redrive].
type RedriveOption func(*redriveOptions) error

type redriveOptions struct {
	limit    int
	sequence uint64
}

// WithRedriveLimit moves at most n dead letters (oldest first).
func WithRedriveLimit(n int) RedriveOption {
	return func(o *redriveOptions) error {
		if n < 1 {
			return fmt.Errorf("%w: redrive limit %d must be at least 1", engine.ErrInvalidOption, n)
		}
		o.limit = n
		return nil
	}
}

// WithRedriveSequence moves only the dead letter at DLQ stream sequence
// seq (the [DeadLetter.Sequence]).
func WithRedriveSequence(seq uint64) RedriveOption {
	return func(o *redriveOptions) error {
		if seq == 0 {
			return fmt.Errorf("%w: redrive sequence must be positive", engine.ErrInvalidOption)
		}
		o.sequence = seq
		return nil
	}
}

// ValidateOptions reports the first invalid option without starting
// anything, so that a package building on [Attach] can refuse bad options
// before it creates a JetStream consumer.
func ValidateOptions(opts ...Option) error {
	_, err := buildOptions(opts)
	return err
}
