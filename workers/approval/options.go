package approval

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Option configures a [Store] (and the [Worker] that opens one).
type Option func(*options) error

type options struct {
	now    func() time.Time
	logger *slog.Logger // nil: the engine's logger
}

func buildOptions(opts []Option) (options, error) {
	o := options{now: time.Now}
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

// WithClock sets the clock that stamps decided_at and updated_at (default
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
