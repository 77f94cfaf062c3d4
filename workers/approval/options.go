package approval

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Bounds of [WithDecisionTTL].
const (
	// DefaultDecisionTTL is how long a decision's receipt answers a
	// repeated approval::resolve by default.
	DefaultDecisionTTL = 24 * time.Hour
	// MinDecisionTTL is the shortest receipt life: a client that lost a
	// reply must have time to ask again.
	MinDecisionTTL = time.Minute
	// MaxDecisionTTL is the longest: receipts are one small value per
	// decision, kept that long.
	MaxDecisionTTL = 30 * 24 * time.Hour
)

// Bounds of [WithSettleDelay].
const (
	// DefaultSettleDelay is how long after a receipt is written the
	// worker checks, by default, that its record was decided: far longer
	// than a resolve takes between its two writes.
	DefaultSettleDelay = 10 * time.Second
	// MaxSettleDelay is the longest settle delay.
	MaxSettleDelay = time.Hour
)

// Option configures a [Store] (and the [Worker] that opens one).
type Option func(*options) error

type options struct {
	now         func() time.Time
	logger      *slog.Logger // nil: the engine's logger
	decisionTTL time.Duration
	settleDelay time.Duration
}

func buildOptions(opts []Option) (options, error) {
	o := options{now: time.Now, decisionTTL: DefaultDecisionTTL, settleDelay: DefaultSettleDelay}
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

// WithClock sets the clock that stamps decided_at and updated_at and ages
// decision receipts (default time.Now), for deterministic tests.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", engine.ErrInvalidOption)
		}
		o.now = now
		return nil
	}
}

// WithLogger sets the logger (default: the engine's, with worker=approval).
// Records that do not decode are logged at Warn.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// WithDecisionTTL sets how long a decision's receipt is kept (default
// [DefaultDecisionTTL], within [MinDecisionTTL] and [MaxDecisionTTL]): for
// that long, approval::resolve asked again with the same decision answers
// it, even after the orchestrator consumed and deleted the approval
// record. It is the max age of [DecisionsBucket] when this worker creates
// it; a receipt older than the TTL is ignored whatever the bucket keeps.
func WithDecisionTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < MinDecisionTTL || d > MaxDecisionTTL {
			return fmt.Errorf("%w: decision TTL %v not in [%v, %v]", engine.ErrInvalidOption, d, MinDecisionTTL, MaxDecisionTTL)
		}
		o.decisionTTL = d
		return nil
	}
}

// WithSettleDelay sets how long after a decision's receipt is written the
// [Worker] checks that the approval record carries it, and writes it there
// when its resolver stopped between the two writes (default
// [DefaultSettleDelay], at most [MaxSettleDelay]). 0 turns that sweep off:
// approval::list_pending and approval::resolve still finish such a
// decision when they meet it.
func WithSettleDelay(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > MaxSettleDelay {
			return fmt.Errorf("%w: settle delay %v not in [0, %v]", engine.ErrInvalidOption, d, MaxSettleDelay)
		}
		o.settleDelay = d
		return nil
	}
}
