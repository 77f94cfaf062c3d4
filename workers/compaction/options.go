package compaction

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Defaults and bounds of the options.
const (
	// DefaultReserveTokens is the reserve kept out of a model's context
	// window for its answer: the usable window is context_window − min(
	// reserve, context_window/4).
	DefaultReserveTokens = 16384
	// DefaultKeepFraction is the share of the usable window that the
	// newest messages keep, verbatim, when a request names no keep_tokens.
	DefaultKeepFraction = 0.25
	// DefaultPruneBytes is the size above which a function's output is
	// replaced, in the transcript the summarizer reads, by a marker.
	DefaultPruneBytes = 2048
	// DefaultLeaseTTL is how long a compaction's lease outlives its holder;
	// a running holder renews it every third of that.
	DefaultLeaseTTL = 2 * time.Minute
	// DefaultPollInterval is how often a waiting caller checks a lease (it
	// also watches the key).
	DefaultPollInterval = 50 * time.Millisecond
	// DefaultConcurrency bounds the threshold compactions one replica runs
	// at a time.
	DefaultConcurrency = 4
	// DefaultTimeout bounds one compaction (every summarizer call of it);
	// a caller's shorter budget wins.
	DefaultTimeout = 10 * time.Minute

	// MinLeaseTTL is the server's smallest per-key TTL.
	MinLeaseTTL = time.Second
	// MaxLeaseTTL bounds [WithLeaseTTL].
	MaxLeaseTTL = time.Hour
	// MinPruneBytes bounds [WithPruneBytes].
	MinPruneBytes = 64
	// MaxConcurrency bounds [WithConcurrency].
	MaxConcurrency = 256
)

// Option configures a [Worker].
type Option func(*options) error

type options struct {
	reserve      int
	keepFraction float64
	pruneBytes   int
	leaseTTL     time.Duration
	poll         time.Duration
	auto         bool
	concurrency  int
	timeout      time.Duration
	splitTurns   bool
	maxEntrySize int
	rescan       time.Duration // how often the trigger lists the events stream's copies
	logger       *slog.Logger  // nil: the engine's
}

func defaultOptions() options {
	return options{
		reserve:      DefaultReserveTokens,
		keepFraction: DefaultKeepFraction,
		pruneBytes:   DefaultPruneBytes,
		leaseTTL:     DefaultLeaseTTL,
		poll:         DefaultPollInterval,
		auto:         true,
		concurrency:  DefaultConcurrency,
		timeout:      DefaultTimeout,
		splitTurns:   true,
		maxEntrySize: DefaultMaxEntrySize,
		rescan:       triggerRescan,
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

func optErr(format string, args ...any) error {
	return fmt.Errorf("%w: compaction: "+format, append([]any{engine.ErrInvalidOption}, args...)...)
}

// WithReserveTokens sets the reserve for the model's answer (default
// [DefaultReserveTokens]); the reserve used is at most a quarter of the
// context window. It must be positive.
func WithReserveTokens(n int) Option {
	return func(o *options) error {
		if n <= 0 {
			return optErr("reserve tokens %d must be positive", n)
		}
		o.reserve = n
		return nil
	}
}

// WithKeepFraction sets the share of the usable window kept verbatim when
// a request names no keep_tokens (default [DefaultKeepFraction]); it is in
// (0, 1).
func WithKeepFraction(f float64) Option {
	return func(o *options) error {
		if math.IsNaN(f) || f <= 0 || f >= 1 {
			return optErr("keep fraction %v must be in (0, 1)", f)
		}
		o.keepFraction = f
		return nil
	}
}

// WithPruneBytes sets the size above which a function output is pruned
// from the transcript the summarizer reads (default [DefaultPruneBytes],
// at least [MinPruneBytes]).
func WithPruneBytes(n int) Option {
	return func(o *options) error {
		if n < MinPruneBytes {
			return optErr("prune bytes %d below %d", n, MinPruneBytes)
		}
		o.pruneBytes = n
		return nil
	}
}

// WithLeaseTTL sets how long a lease outlives a crashed holder (default
// [DefaultLeaseTTL]; [MinLeaseTTL] to [MaxLeaseTTL]). A running holder
// renews its lease every third of it.
func WithLeaseTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < MinLeaseTTL || d > MaxLeaseTTL {
			return optErr("lease TTL %v not in [%v, %v]", d, MinLeaseTTL, MaxLeaseTTL)
		}
		o.leaseTTL = d
		return nil
	}
}

// WithPollInterval sets how often a caller with wait:true checks the lease
// it waits for (default [DefaultPollInterval]; at most one second). It
// also watches the key, so this only bounds a missed update.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 || d > time.Second {
			return optErr("poll interval %v not in (0, 1s]", d)
		}
		o.poll = d
		return nil
	}
}

// WithAuto turns the threshold trigger on (the default) or off.
func WithAuto(on bool) Option {
	return func(o *options) error {
		o.auto = on
		return nil
	}
}

// WithConcurrency bounds the threshold compactions one replica runs at a
// time (default [DefaultConcurrency]; 1 to [MaxConcurrency]). A turn_end
// that finds no free slot is redelivered a second later.
func WithConcurrency(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxConcurrency {
			return optErr("concurrency %d not in [1, %d]", n, MaxConcurrency)
		}
		o.concurrency = n
		return nil
	}
}

// WithTimeout bounds one compaction (default [DefaultTimeout]); it is
// also compaction::compact's function timeout, and a caller's shorter
// budget wins.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return optErr("timeout %v must be positive", d)
		}
		o.timeout = d
		return nil
	}
}

// WithSplitTurns allows (the default) or forbids cutting inside the
// newest user turn when that turn alone is more than twice keep_tokens:
// the kept messages then start at an assistant message (never between a
// call and its result) and the summary quotes the newest user message
// verbatim. Forbidden, a session whose newest turn is too big has nothing
// to compact.
func WithSplitTurns(on bool) Option {
	return func(o *options) error {
		o.splitTurns = on
		return nil
	}
}

// WithMaxEntrySize sets the entry limit of the session tree the worker
// writes to (default [DefaultMaxEntrySize], the session tree's default;
// [MinMaxEntrySize] to [MaxMaxEntrySize]): set it to the session tree's
// max_entry_size when that is lowered. The summary and its quote are cut
// to fit it (and the server's max payload less 1 KiB) with room for the
// entry's other fields.
func WithMaxEntrySize(n int) Option {
	return func(o *options) error {
		if n < MinMaxEntrySize || n > MaxMaxEntrySize {
			return optErr("max entry size %d not in [%d, %d]", n, MinMaxEntrySize, MaxMaxEntrySize)
		}
		o.maxEntrySize = n
		return nil
	}
}

// WithLogger sets the logger (default: the engine's, with
// worker=compaction).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return optErr("nil logger")
		}
		o.logger = l
		return nil
	}
}

// usableWindow is a model's usable window: its context window minus the
// reserve for the answer, the reserve being at most a quarter of the
// window.
func (o options) usableWindow(contextWindow int) int {
	return contextWindow - o.reserveFor(contextWindow)
}

// reserveFor is the reserve of a context window.
func (o options) reserveFor(contextWindow int) int {
	return min(o.reserve, contextWindow/4)
}

// keepTokens is the default keep_tokens of a usable window.
func (o options) keepTokens(usable int) int {
	return max(1, int(float64(usable)*o.keepFraction))
}
