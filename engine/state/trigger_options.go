package state

import (
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Defaults of a state trigger ([OnChange]).
const (
	DefaultBackoffBase   = 500 * time.Millisecond
	DefaultBackoffMax    = time.Minute
	DefaultCallTimeout   = 30 * time.Second
	DefaultConcurrency   = 16
	DefaultMaxAckPending = 1000
	// ackWaitMargin is added to the call timeout for the default ack wait,
	// so the server never redelivers an event whose call is still running.
	ackWaitMargin = 30 * time.Second
)

// TriggerOption configures a state trigger.
type TriggerOption func(*triggerOptions) error

type triggerOptions struct {
	backoffBase, backoffMax time.Duration
	maxDeliver              int
	ackWait                 time.Duration
	callTimeout             time.Duration
	concurrency             int
	maxAckPending           int
	// checkEvery is how often a running trigger looks at its consumer
	// (defaultCheckEvery; tests shorten it).
	checkEvery time.Duration
}

func defaultTriggerOptions() triggerOptions {
	return triggerOptions{
		backoffBase:   DefaultBackoffBase,
		backoffMax:    DefaultBackoffMax,
		maxDeliver:    -1,
		callTimeout:   DefaultCallTimeout,
		concurrency:   DefaultConcurrency,
		maxAckPending: DefaultMaxAckPending,
		checkEvery:    defaultCheckEvery,
	}
}

// WithBackoff sets the redelivery delay after a failed call: base after the
// first failure, doubling after each further one, capped at max (defaults
// [DefaultBackoffBase], [DefaultBackoffMax]).
func WithBackoff(base, max time.Duration) TriggerOption {
	return func(o *triggerOptions) error {
		if base <= 0 || max < base {
			return fmt.Errorf("%w: backoff base %v must be positive and max %v at least base", engine.ErrInvalidOption, base, max)
		}
		o.backoffBase, o.backoffMax = base, max
		return nil
	}
}

// WithMaxDeliver bounds the deliveries of one event; after the last failed
// one the event is left in the bucket and never delivered again (an error
// is logged). n = -1, the default, retries forever: a state trigger exists
// so that no change is lost, and a handler that is down for a day still
// gets its events when it comes back.
func WithMaxDeliver(n int) TriggerOption {
	return func(o *triggerOptions) error {
		if n == 0 || n < -1 {
			return fmt.Errorf("%w: max deliver %d must be positive or -1 (unlimited)", engine.ErrInvalidOption, n)
		}
		o.maxDeliver = n
		return nil
	}
}

// WithAckWait sets how long the server waits for an event's ack before it
// redelivers it (default: the call timeout plus 30 s). It must exceed the
// call timeout.
func WithAckWait(d time.Duration) TriggerOption {
	return func(o *triggerOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: ack wait %v must be positive", engine.ErrInvalidOption, d)
		}
		o.ackWait = d
		return nil
	}
}

// WithCallTimeout bounds one call of the trigger's function (default
// [DefaultCallTimeout]); a call that times out counts as failed.
func WithCallTimeout(d time.Duration) TriggerOption {
	return func(o *triggerOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: call timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.callTimeout = d
		return nil
	}
}

// WithConcurrency bounds the calls one replica of the trigger runs at once
// (default [DefaultConcurrency]).
func WithConcurrency(n int) TriggerOption {
	return func(o *triggerOptions) error {
		if n < 1 {
			return fmt.Errorf("%w: concurrency %d must be at least 1", engine.ErrInvalidOption, n)
		}
		o.concurrency = n
		return nil
	}
}

// WithMaxAckPending bounds the events delivered but not yet acked across
// all replicas, failed ones waiting for their retry included (default
// [DefaultMaxAckPending]). 1 makes delivery strictly ordered, at the price
// of one failing event holding up every later one.
func WithMaxAckPending(n int) TriggerOption {
	return func(o *triggerOptions) error {
		if n < 1 {
			return fmt.Errorf("%w: max ack pending %d must be at least 1", engine.ErrInvalidOption, n)
		}
		o.maxAckPending = n
		return nil
	}
}

// backoff is the delay before delivery n+1 after delivery n failed.
func (o *triggerOptions) backoff(n uint64) time.Duration {
	d := o.backoffBase
	for i := uint64(1); i < n && d < o.backoffMax; i++ {
		if d > o.backoffMax/2 {
			return o.backoffMax // doubling would pass the cap, or overflow
		}
		d *= 2
	}
	return min(d, o.backoffMax)
}
