package region

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Option configures [Mirror] and [Takeover].
type Option func(*options) error

type options struct {
	logger   *slog.Logger
	filter   func(stream string) bool
	replicas int
	probe    time.Duration
	// afterDelete, when set, runs after a takeover deleted a lost origin
	// (tests: a live client re-creating it at that moment).
	afterDelete func(stream string)
}

// DefaultProbeTimeout bounds each stream info request a [Takeover] sends to
// tell live origins from lost ones.
const DefaultProbeTimeout = time.Second

func newOptions(opts []Option) (*options, error) {
	o := &options{
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		filter: DefaultFilter,
		probe:  DefaultProbeTimeout,
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil option", engine.ErrInvalidOption)
		}
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// WithLogger logs every action taken on a stream; the default discards.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// WithFilter selects the origin streams by name; the default is
// [DefaultFilter]. Whatever the filter says, work-queue streams are never
// mirrored (a mirror consumes from a work queue like a worker would) and
// counter streams cannot be (the server forbids counters on mirrors): for
// those [Mirror] keeps an empty placeholder holding the config, and a
// [Takeover] re-creates them empty in the new home.
func WithFilter(f func(stream string) bool) Option {
	return func(o *options) error {
		if f == nil {
			return fmt.Errorf("%w: nil filter", engine.ErrInvalidOption)
		}
		o.filter = f
		return nil
	}
}

// WithReplicas sets the replica count of the mirrors [Mirror] creates and
// of the streams [Takeover] creates. The default is the origin's count for
// mirrors and the mirror's count for a takeover, so a region smaller than
// the home needs this option.
func WithReplicas(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: replicas %d must be 1..5", engine.ErrInvalidOption, n)
		}
		o.replicas = n
		return nil
	}
}

// WithProbeTimeout sets how long a [Takeover] waits for an origin to answer
// before it counts as lost (default [DefaultProbeTimeout]). An origin in a
// region that is cut off (or crashed) does not answer at all: nats-server
// marks a silent server offline only after about 150 s, while one that
// shut down cleanly is reported offline at once.
func WithProbeTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 10*time.Millisecond || d > time.Minute {
			return fmt.Errorf("%w: probe timeout %v must be 10ms..1m", engine.ErrInvalidOption, d)
		}
		o.probe = d
		return nil
	}
}

// DefaultFilter selects iii's own streams: the KV buckets "iii-*" (streams
// "KV_iii-*") and the streams "III_*".
func DefaultFilter(stream string) bool {
	return strings.HasPrefix(stream, "KV_iii-") || strings.HasPrefix(stream, "III_")
}
