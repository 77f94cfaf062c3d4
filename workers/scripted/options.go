package scripted

import (
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Defaults and bounds of the options.
const (
	// DefaultDeltaSize is the largest delta of a text, thinking or
	// arguments stream, in bytes.
	DefaultDeltaSize = 8
	// MaxDeltaSize bounds [WithDeltaSize].
	MaxDeltaSize = 64 << 10
	// MaxDeltaInterval bounds [WithDeltaInterval].
	MaxDeltaInterval = 10 * time.Second
)

// Option configures a [Provider].
type Option func(*options) error

type options struct {
	scripts   map[string]ScriptFunc
	deltaSize int
	pace      time.Duration
	now       func() time.Time
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		scripts:   map[string]ScriptFunc{},
		deltaSize: DefaultDeltaSize,
		now:       time.Now,
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	if _, ok := o.scripts[EchoModel]; !ok {
		o.scripts[EchoModel] = Echo
	}
	return o, nil
}

// WithScript serves model with fn. A model may be scripted once; scripting
// [EchoModel] replaces [Echo].
func WithScript(model string, fn ScriptFunc) Option {
	return func(o *options) error {
		if model == "" || len(model) > maxModelLen {
			return fmt.Errorf("%w: scripted model name must be 1..%d bytes", engine.ErrInvalidOption, maxModelLen)
		}
		if fn == nil {
			return fmt.Errorf("%w: nil script for model %q", engine.ErrInvalidOption, model)
		}
		if _, ok := o.scripts[model]; ok {
			return fmt.Errorf("%w: model %q scripted twice", engine.ErrInvalidOption, model)
		}
		o.scripts[model] = fn
		return nil
	}
}

// WithDeltaSize sets the largest delta in bytes (1 to [MaxDeltaSize];
// default [DefaultDeltaSize]). Deltas never split a UTF-8 character, so a
// delta holds at least one character.
func WithDeltaSize(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxDeltaSize {
			return fmt.Errorf("%w: delta size %d must be 1..%d", engine.ErrInvalidOption, n, MaxDeltaSize)
		}
		o.deltaSize = n
		return nil
	}
}

// WithDeltaInterval sets the pause between two deltas of a stream (0 to
// [MaxDeltaInterval]; default 0, as fast as the reader reads), so a demo
// looks like a model typing. A [Reply] with its own Pace overrides it.
func WithDeltaInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > MaxDeltaInterval {
			return fmt.Errorf("%w: delta interval %v must be 0..%v", engine.ErrInvalidOption, d, MaxDeltaInterval)
		}
		o.pace = d
		return nil
	}
}

// WithClock sets the clock that stamps assistant messages (default
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
