package policy

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Defaults and bounds of the options.
const (
	// DefaultMaxArgsBytes bounds the JSON size of the args of one check: a
	// call whose args are larger is denied ([RuleArgsTooLarge]) because the
	// gate does not allow what it will not inspect.
	DefaultMaxArgsBytes = 256 << 10
	// DefaultMaxArgsDepth bounds the nesting of objects and lists in args
	// ([RuleArgsTooDeep]).
	DefaultMaxArgsDepth = 64
	// DefaultCELCostLimit bounds the runtime cost of one when condition (a
	// CEL cost unit is roughly one operation, or one character of a string
	// a call builds; see the package doc, "When conditions").
	DefaultCELCostLimit = 1_000_000
	// DefaultCELTimeout bounds the time all when conditions of one check
	// may take together (given once more when it runs out: see
	// [WithCELTimeout]).
	DefaultCELTimeout = 100 * time.Millisecond
	// DefaultRegexProgramLimit bounds the program one regex of a policy
	// compiles to, in instructions (see [WithRegexProgramLimit]).
	DefaultRegexProgramLimit = 10_000
	// DefaultRegexMatchBudget bounds the work of one regex match: its
	// program's instructions times the bytes of the text (see
	// [WithRegexMatchBudget]). A regex of 256 instructions matches any
	// string the default args limit lets through; one at the default
	// program limit, texts of up to 6.5 KiB. Worst case, a match at the
	// budget takes up to about a second of CPU.
	DefaultRegexMatchBudget = 1 << 26
	// DefaultPollInterval is how often a [Watcher] reads its file.
	DefaultPollInterval = 500 * time.Millisecond
	// MinPollInterval and MaxPollInterval bound [WithPollInterval].
	MinPollInterval = time.Millisecond
	MaxPollInterval = time.Hour
)

// Option configures [Parse] (the evaluation limits) and a [Watcher] (the
// limits of the policies it loads, and how it watches). Options a use does
// not need are ignored.
type Option func(*options) error

type options struct {
	maxArgsBytes int
	maxArgsDepth int
	celCost      uint64
	celTimeout   time.Duration
	celDeadline  deadlineFunc // context.WithTimeout; tests stand in
	regexLimit   int
	regexMatch   uint64

	poll     time.Duration
	logger   *slog.Logger
	fallback []byte
	now      func() time.Time
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		maxArgsBytes: DefaultMaxArgsBytes,
		maxArgsDepth: DefaultMaxArgsDepth,
		celCost:      DefaultCELCostLimit,
		celTimeout:   DefaultCELTimeout,
		celDeadline:  context.WithTimeout,
		regexLimit:   DefaultRegexProgramLimit,
		regexMatch:   DefaultRegexMatchBudget,
		poll:         DefaultPollInterval,
		logger:       slog.New(slog.DiscardHandler),
		fallback:     defaultYAML,
		now:          time.Now,
	}
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

// WithMaxArgsBytes sets the largest JSON size of a check's args, 1 KiB to
// 64 MiB (default [DefaultMaxArgsBytes]).
func WithMaxArgsBytes(n int) Option {
	return func(o *options) error {
		if n < 1<<10 || n > 64<<20 {
			return fmt.Errorf("%w: policy max args bytes %d must be 1024..%d", engine.ErrInvalidOption, n, 64<<20)
		}
		o.maxArgsBytes = n
		return nil
	}
}

// WithMaxArgsDepth sets the deepest nesting of a check's args, 1 to 1000
// (default [DefaultMaxArgsDepth]).
func WithMaxArgsDepth(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 1000 {
			return fmt.Errorf("%w: policy max args depth %d must be 1..1000", engine.ErrInvalidOption, n)
		}
		o.maxArgsDepth = n
		return nil
	}
}

// WithCELCostLimit sets the runtime cost limit of one when condition
// (default [DefaultCELCostLimit]); a condition that exceeds it errors, and
// an erroring condition fails closed. A call whose own cost would exceed
// it errors before it runs, so the limit bounds the memory a condition
// can take as well as its steps.
func WithCELCostLimit(n uint64) Option {
	return func(o *options) error {
		if n == 0 {
			return fmt.Errorf("%w: policy CEL cost limit must be positive", engine.ErrInvalidOption)
		}
		o.celCost = n
		return nil
	}
}

// WithCELTimeout sets how long the when conditions of one check may run
// together, 1 ms to 10 s (default [DefaultCELTimeout]). The time is wall
// time, so a check that runs out of it (and not out of the caller's ctx)
// is given it once more: on a loaded node a cheap condition may only have
// waited for a core. A condition still running at the second deadline
// errors, and fails closed; what bounds a condition's work is the cost
// limit ([WithCELCostLimit]).
func WithCELTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Millisecond || d > 10*time.Second {
			return fmt.Errorf("%w: policy CEL timeout %v must be 1ms..10s", engine.ErrInvalidOption, d)
		}
		o.celTimeout = d
		return nil
	}
}

// WithRegexProgramLimit sets the largest program a regex may compile to,
// 100 to 1,000,000 instructions (default [DefaultRegexProgramLimit]): an
// args matches regex or the constant pattern of a CEL matches, which
// compile when the policy loads, and a pattern a condition takes from
// args, which compiles when it runs. A policy with a regex over the limit
// does not load; the regexes of one policy together may compile to 10
// times the limit. A pattern from args over it errors, and the condition
// fails closed. A program is about one instruction per character or class
// matched, but a repeat is written out: `.{1000}` is 1000 instructions.
func WithRegexProgramLimit(n int) Option {
	return func(o *options) error {
		if n < 100 || n > 1_000_000 {
			return fmt.Errorf("%w: policy regex program limit %d must be 100..1000000", engine.ErrInvalidOption, n)
		}
		o.regexLimit = n
		return nil
	}
}

// WithRegexMatchBudget sets the most work one regex match may take, as
// its program's instructions times the bytes of the text, 2^16 to 2^36
// (default [DefaultRegexMatchBudget]). Go's regexp cannot be interrupted
// once it runs, so a match over the budget is not run and proves nothing:
// an args constraint is then indeterminate (an allow rule does not match,
// a deny or needs_approval rule does) and a CEL matches errors, which
// fails its condition closed the same way.
func WithRegexMatchBudget(n uint64) Option {
	return func(o *options) error {
		if n < 1<<16 || n > 1<<36 {
			return fmt.Errorf("%w: policy regex match budget %d must be %d..%d", engine.ErrInvalidOption, n, uint64(1<<16), uint64(1<<36))
		}
		o.regexMatch = n
		return nil
	}
}

// WithPollInterval sets how often a [Watcher] reads its file (default
// [DefaultPollInterval]). A new version is applied once two consecutive
// reads agree, so a half-written file is not loaded.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < MinPollInterval || d > MaxPollInterval {
			return fmt.Errorf("%w: policy poll interval %v must be %v..%v", engine.ErrInvalidOption, d, MinPollInterval, MaxPollInterval)
		}
		o.poll = d
		return nil
	}
}

// WithLogger sets the logger of a [Watcher] (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// WithFallback sets the policy a [Watcher] uses while its file does not
// exist (default: the shipped policy, [DefaultYAML]). It must parse.
func WithFallback(yamlDoc []byte) Option {
	return func(o *options) error {
		if yamlDoc == nil {
			return fmt.Errorf("%w: nil fallback policy", engine.ErrInvalidOption)
		}
		o.fallback = append([]byte(nil), yamlDoc...)
		return nil
	}
}

// WithClock sets the clock that stamps loads (default time.Now), for
// deterministic tests.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", engine.ErrInvalidOption)
		}
		o.now = now
		return nil
	}
}
