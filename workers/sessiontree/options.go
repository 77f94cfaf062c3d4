package sessiontree

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Option configures a [Store] (and the [Worker] that opens one).
type Option func(*options) error

type options struct {
	now          func() time.Time
	logger       *slog.Logger // nil: the engine's
	maxEntrySize int
	maxEntrySet  bool // set by WithMaxEntrySize
	timeout      time.Duration
	metaDelay    time.Duration
}

func buildOptions(opts []Option) (options, error) {
	o := options{now: time.Now, maxEntrySize: DefaultMaxEntrySize, timeout: DefaultTimeout, metaDelay: DefaultMetaDelay}
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

// DefaultTimeout bounds a [Store] call whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// WithClock sets the clock that stamps entries and metadata (default
// time.Now), for deterministic tests.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", engine.ErrInvalidOption)
		}
		o.now = now
		return nil
	}
}

// WithLogger sets the logger (default: the engine's, with worker=session).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// WithMaxEntrySize bounds one stored entry, encoded (default
// [DefaultMaxEntrySize], 256 KiB); a larger entry is refused with
// invalid_payload. It must be between 1 KiB and 1 MiB (the server's
// default max payload), and leave 1 KiB of the server's max payload for
// the message's subject and headers: [Open] fails otherwise. The default
// shrinks to fit a server whose max payload is smaller.
func WithMaxEntrySize(n int) Option {
	return func(o *options) error {
		if n < 1<<10 || n > 1<<20 {
			return fmt.Errorf("%w: max entry size %d not in [1 KiB, 1 MiB]", engine.ErrInvalidOption, n)
		}
		o.maxEntrySize, o.maxEntrySet = n, true
		return nil
	}
}

// WithTimeout bounds a [Store] call whose context has no deadline (default
// [DefaultTimeout]).
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %v", engine.ErrInvalidOption, d)
		}
		o.timeout = d
		return nil
	}
}

// WithMetaDelay sets how long an append with defer_meta may leave the
// session's meta unwritten: it is written once the session has had no such
// append for d, and at most 2 s after the first (default
// [DefaultMetaDelay]; 0 writes every meta at once). It must be between 0
// and 2 s.
func WithMetaDelay(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > maxMetaDeferral {
			return fmt.Errorf("%w: meta delay %v not in [0, %v]", engine.ErrInvalidOption, d, maxMetaDeferral)
		}
		o.metaDelay = d
		return nil
	}
}
