package traces

import (
	"fmt"
	"github.com/iii-on-nats/iii/subjects"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
)

// Names of the span stream. The lead is expected to move them to package
// subjects.
const (
	// StreamName is the JetStream stream every exported span is published to.
	StreamName = subjects.SpanStream
	// SubjectPrefix prefixes the subject of every span ([SpanSubject]).
	SubjectPrefix = subjects.SpanSubjectPrefix
)

// Defaults and bounds of the options.
const (
	// DefaultStreamMaxAge is how long the stream keeps a span.
	DefaultStreamMaxAge = 24 * time.Hour
	// DefaultStreamMaxBytes bounds the stream's size (256 MiB).
	DefaultStreamMaxBytes = 256 << 20
	// DefaultMaxSpans bounds the spans a [Store] holds in memory.
	DefaultMaxSpans = 200_000
	// DefaultMaxBytes bounds the bytes of spans a [Store] holds (256 MiB).
	DefaultMaxBytes = 256 << 20
	// MinMaxBytes is the least [WithMaxBytes] takes.
	MinMaxBytes = 1 << 20
	// MaxMaxSpans bounds [WithMaxSpans].
	MaxMaxSpans = 10_000_000
	// DefaultMaxPending is the exporter's window of unacknowledged
	// publishes; spans beyond it are dropped and counted.
	DefaultMaxPending = 4096
	// MaxMaxPending bounds [WithMaxPending].
	MaxMaxPending = 1 << 20
	// DefaultAckTimeout bounds the wait for one publish's acknowledgement.
	DefaultAckTimeout = 5 * time.Second
)

// Option configures an [Exporter] (stream limits, window, ack timeout,
// logger) or a [Store] and its [Worker] (stream limits, max spans and
// bytes, logger); each ignores the options that are not its own.
type Option func(*options) error

type options struct {
	maxAge     time.Duration
	maxBytes   int64
	maxSpans   int
	maxStore   int64
	maxPending int
	ackTimeout time.Duration
	checkEvery time.Duration // how often a store checks its stream
	logger     *slog.Logger  // nil: the engine's
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		maxAge:     DefaultStreamMaxAge,
		maxBytes:   DefaultStreamMaxBytes,
		maxSpans:   DefaultMaxSpans,
		maxStore:   DefaultMaxBytes,
		maxPending: DefaultMaxPending,
		ackTimeout: DefaultAckTimeout,
		checkEvery: streamCheckEvery,
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

// WithStreamMaxAge sets how long [StreamName] keeps spans (default
// [DefaultStreamMaxAge]) when this process creates it; an existing stream
// is used as it is (`iii up` and `iii worker run` update an existing
// stream's limits themselves when traces.stream_max_age or
// traces.stream_max_bytes is set).
func WithStreamMaxAge(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: traces stream max age %v must be positive", engine.ErrInvalidOption, d)
		}
		o.maxAge = d
		return nil
	}
}

// WithStreamMaxBytes bounds the size of [StreamName] (default
// [DefaultStreamMaxBytes]) when this process creates it; the oldest spans
// go first.
func WithStreamMaxBytes(n int64) Option {
	return func(o *options) error {
		if n < 1<<20 {
			return fmt.Errorf("%w: traces stream max bytes %d must be at least 1 MiB", engine.ErrInvalidOption, n)
		}
		o.maxBytes = n
		return nil
	}
}

// WithMaxSpans bounds the spans a [Store] holds (default
// [DefaultMaxSpans], at most [MaxMaxSpans]); beyond it, whole traces are
// evicted, oldest first.
func WithMaxSpans(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxMaxSpans {
			return fmt.Errorf("%w: traces max spans %d must be in [1, %d]", engine.ErrInvalidOption, n, MaxMaxSpans)
		}
		o.maxSpans = n
		return nil
	}
}

// WithMaxBytes bounds the bytes of spans a [Store] holds (default
// [DefaultMaxBytes], at least [MinMaxBytes]): each span counts as its JSON
// encoding, which is how the store holds it, plus its index: its values
// of [GroupAttributes] and a fixed overhead. Beyond it, whole traces are evicted, oldest first, as for
// [WithMaxSpans].
func WithMaxBytes(n int64) Option {
	return func(o *options) error {
		if n < MinMaxBytes {
			return fmt.Errorf("%w: traces max bytes %d must be at least %d", engine.ErrInvalidOption, n, MinMaxBytes)
		}
		o.maxStore = n
		return nil
	}
}

// WithMaxPending sets the [Exporter]'s window of publishes waiting for
// their acknowledgement (default [DefaultMaxPending]). A span that finds
// the window full is dropped and counted, never waited for.
func WithMaxPending(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxMaxPending {
			return fmt.Errorf("%w: traces max pending %d must be in [1, %d]", engine.ErrInvalidOption, n, MaxMaxPending)
		}
		o.maxPending = n
		return nil
	}
}

// WithAckTimeout bounds the wait for one publish's acknowledgement
// (default [DefaultAckTimeout]); a publish not acknowledged in time counts
// as failed and frees its slot in the window.
func WithAckTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: traces ack timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.ackTimeout = d
		return nil
	}
}

// WithLogger sets the logger (default: the engine's, with
// worker=traces). Spans the store could not decode and spans the exporter
// dropped or failed to publish are counted in the stats and logged at
// Warn, the first at once, then at most one record a minute with the
// counts since: an outage loses spans by the thousand.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// StreamConfig is the configuration of [StreamName]: limits retention,
// file storage, subjects iii.spans.>, oldest spans discarded first.
func StreamConfig(replicas int, maxAge time.Duration, maxBytes int64) jetstream.StreamConfig {
	if replicas < 1 {
		replicas = 1
	}
	return jetstream.StreamConfig{
		Name:        StreamName,
		Description: "iii spans: a JSON array of one trace's ended spans per message, subject iii.spans.<trace id>",
		Subjects:    []string{SubjectPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		MaxAge:      maxAge,
		MaxBytes:    maxBytes,
		MaxMsgSize:  MaxSpanBytes,
	}
}

func (o options) streamConfig(e *engine.Engine) jetstream.StreamConfig {
	return StreamConfig(e.Replicas(), o.maxAge, o.maxBytes)
}

func (o options) loggerFor(e *engine.Engine) *slog.Logger {
	if o.logger != nil {
		return o.logger
	}
	return e.Logger().With("worker", WorkerName)
}
