package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// ErrInvalidOption wraps every error an [Option] returns.
var ErrInvalidOption = errors.New("engine: invalid option")

// DefaultTimeout bounds a trigger whose context has no deadline.
const DefaultTimeout = 30 * time.Second

// Option configures an [Engine].
type Option func(*options) error

type options struct {
	logger      *slog.Logger
	tp          trace.TracerProvider
	mp          metric.MeterProvider
	measure     bool // a meter provider was given: record the engine's metrics
	prop        propagation.TextMapPropagator
	timeout     time.Duration
	codec       wire.Codec
	concurrency int
	replicas    int
	region      string
	localCalls  bool
}

func defaultOptions() options {
	return options{
		logger:      slog.New(slog.DiscardHandler),
		tp:          otel.GetTracerProvider(),
		mp:          otel.GetMeterProvider(),
		prop:        propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		timeout:     DefaultTimeout,
		codec:       wire.Msgpack,
		concurrency: 1024,
		replicas:    1,
	}
}

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// WithMeterProvider sets the meter provider of the engine's metrics (and
// of the workers that ask [Engine.Meter]); the default is the global
// provider at New time. The engine records its per-call metric
// (iii.function.duration) only when a provider was given here.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", ErrInvalidOption)
		}
		o.mp, o.measure = mp, true
		return nil
	}
}

// WithTracerProvider sets the tracer provider for handler spans; the default
// is the global provider at New time.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) error {
		if tp == nil {
			return fmt.Errorf("%w: nil tracer provider", ErrInvalidOption)
		}
		o.tp = tp
		return nil
	}
}

// WithPropagator sets the propagator that carries trace context and baggage
// in NATS headers; the default is W3C trace context plus baggage.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(o *options) error {
		if p == nil {
			return fmt.Errorf("%w: nil propagator", ErrInvalidOption)
		}
		o.prop = p
		return nil
	}
}

// WithDefaultTimeout bounds triggers whose context has no deadline, and
// handlers whose function sets no timeout.
func WithDefaultTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %v must be positive", ErrInvalidOption, d)
		}
		o.timeout = d
		return nil
	}
}

// WithCodec sets the codec Go callers send; the default is msgpack.
func WithCodec(c wire.Codec) Option {
	return func(o *options) error {
		if c == nil {
			return fmt.Errorf("%w: nil codec", ErrInvalidOption)
		}
		o.codec = c
		return nil
	}
}

// WithConcurrency bounds the handlers of one worker running at once; further
// requests wait in the subscription's pending buffer.
func WithConcurrency(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: concurrency %d must be at least 1", ErrInvalidOption, n)
		}
		o.concurrency = n
		return nil
	}
}

// WithRegion names the region (the NATS cluster of a supercluster) this
// engine's node belongs to: workers create that region's copies of their
// per-session streams and buckets, placed there, for the sessions homed in
// it ("<region>.<name>", docs/REGIONS.md).
func WithRegion(region string) Option {
	return func(o *options) error {
		if err := subjects.ValidateRegion(region); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		o.region = region
		return nil
	}
}

// WithLocalCalls(true) makes calls between this process's engines that
// have it on skip the bus when caller and function are on the same server:
// the handler runs in the caller's goroutine (see the package doc, "Local
// calls"). Off by default: every call is a NATS request, which any client
// can watch; `iii up` turns it on for its own workers.
func WithLocalCalls(on bool) Option {
	return func(o *options) error {
		o.localCalls = on
		return nil
	}
}

// WithReplicas sets the replica count of the streams and buckets the engine
// creates (1 on a single node, 3 on a cluster of three or more).
func WithReplicas(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: replicas %d must be 1..5", ErrInvalidOption, n)
		}
		o.replicas = n
		return nil
	}
}
