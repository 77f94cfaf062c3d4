package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine/gopool"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Engine is one process's handle on the bus: it registers workers and their
// functions, triggers functions, and owns the JetStream context every
// primitive shares. One Engine per process and connection; it is safe for
// concurrent use.
type Engine struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	opts   options
	tracer trace.Tracer
	meter  metric.Meter
	// fnDuration records every function call a worker of this engine
	// serves (iii.function.duration, seconds, by function id and outcome).
	fnDuration metric.Float64Histogram

	// pool runs the handlers of this engine's workers on reused
	// goroutines (see package gopool).
	pool *gopool.Pool

	// base is cancelled by Close; handler contexts derive from it.
	base   context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	workers map[*Worker]struct{}
	streams map[string]jetstream.Stream
	kvs     map[string]jetstream.KeyValue // session buckets by name (SessionKV)
	skills  jetstream.KeyValue            // the skills bucket, once opened
	closed  bool
}

// New returns an engine over nc. The connection stays the caller's: Close
// stops the engine's workers but does not close nc.
func New(nc *nats.Conn, opts ...Option) (*Engine, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	// An asynchronous publish whose ack never comes (the stream's leader
	// died with the message) fails after publishAsyncTimeout instead of
	// waiting forever; callers publish it again under the same message id.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(publishAsyncTimeout))
	if err != nil {
		return nil, fmt.Errorf("engine: jetstream: %w", err)
	}
	meter := o.mp.Meter("github.com/iii-on-nats/iii/engine")
	fnDuration, err := meter.Float64Histogram("iii.function.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a worker of this engine took to serve one function call, by function id and outcome (ok or an error code)."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
	if err != nil {
		return nil, fmt.Errorf("engine: metrics: %w", err)
	}
	base, cancel := context.WithCancel(context.Background())
	e := &Engine{
		fnDuration: fnDuration,
		nc:         nc,
		js:         js,
		opts:       o,
		tracer:     o.tp.Tracer("github.com/iii-on-nats/iii/engine"),
		meter:      meter,
		pool:       gopool.New(),
		base:       base,
		cancel:     cancel,
		workers:    map[*Worker]struct{}{},
		streams:    map[string]jetstream.Stream{},
		kvs:        map[string]jetstream.KeyValue{},
	}
	e.watchConn()
	return e, nil
}

// Go runs fn on a goroutine of the engine's pool: one that finished an
// earlier function and kept its grown stack, or a new one (package
// gopool). Use it for short-lived goroutines started per message.
func (e *Engine) Go(fn func()) { e.pool.Go(fn) }

// Conn is the engine's NATS connection.
func (e *Engine) Conn() *nats.Conn { return e.nc }

// JetStream is the engine's JetStream context.
func (e *Engine) JetStream() jetstream.JetStream { return e.js }

// Logger is the engine's logger, for packages built on the engine.
func (e *Engine) Logger() *slog.Logger { return e.opts.logger }

// Codec is the codec Go callers send with.
func (e *Engine) Codec() wire.Codec { return e.opts.codec }

// publishAsyncTimeout bounds the wait for one asynchronous publish's ack.
const publishAsyncTimeout = 5 * time.Second

// Replicas is the replica count for streams and buckets the engine's
// primitives create.
func (e *Engine) Replicas() int { return e.opts.replicas }

// Tracer is the engine's tracer, for packages built on the engine.
func (e *Engine) Tracer() trace.Tracer { return e.tracer }

// Meter is the engine's meter: workers make their instruments with it, so
// one meter provider (WithMeterProvider) collects a node's metrics.
func (e *Engine) Meter() metric.Meter { return e.meter }

// Close stops every worker (draining in-flight handlers until ctx ends) and
// cancels the contexts of handlers still running. It does not close the
// connection.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	ws := make([]*Worker, 0, len(e.workers))
	for w := range e.workers {
		ws = append(ws, w)
	}
	e.mu.Unlock()
	var first error
	for _, w := range ws {
		if err := w.Close(ctx); err != nil && first == nil {
			first = err
		}
	}
	e.cancel()
	return first
}
