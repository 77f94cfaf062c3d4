package traces

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/iii-on-nats/iii/engine"
)

// stallWait is the longest one span may wait for a slot when the window
// filled up between the check and the publish.
const stallWait = time.Millisecond

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// Exporter is an sdktrace.SpanExporter that publishes every ended span, as
// the JSON of a [Span], on [StreamName] under [SpanSubject]. Publishes are
// asynchronous within a bounded window ([WithMaxPending]): ExportSpans
// never waits for the server, and a span that finds the window full is
// dropped and counted ([ExporterStats]). [Exporter.ForceFlush] and
// [Exporter.Shutdown] wait for the acknowledgements.
//
// Use it behind a batch span processor ([NewSpanProcessor] also flushes the
// acknowledgements on ForceFlush). It publishes on the engine's connection
// and never closes it.
type Exporter struct {
	js         jetstream.JetStream
	maxPending int
	logger     *slog.Logger

	stopped   atomic.Bool
	published atomic.Uint64
	acked     atomic.Uint64
	dropped   atomic.Uint64
	failed    atomic.Uint64

	resMu  sync.Mutex
	resKey *sdkresource.Resource
	resMap map[string]any
}

// ExporterStats counts what an [Exporter] did with the spans it was given.
type ExporterStats struct {
	// Published spans were handed to the connection.
	Published uint64 `json:"published"`
	// Acked spans are stored in the stream.
	Acked uint64 `json:"acked"`
	// Dropped spans found the window full (or came after Shutdown).
	Dropped uint64 `json:"dropped"`
	// Failed spans did not encode, or their publish was refused or not
	// acknowledged in time.
	Failed uint64 `json:"failed"`
	// Pending publishes wait for their acknowledgement.
	Pending int `json:"pending"`
}

// NewExporter creates [StreamName] on e's JetStream when it is missing
// (limits from [WithStreamMaxAge] and [WithStreamMaxBytes], e's replicas)
// and returns an exporter publishing to it on e's connection.
func NewExporter(ctx context.Context, e *engine.Engine, opts ...Option) (*Exporter, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if _, err := e.EnsureStream(ctx, o.streamConfig(e)); err != nil {
		return nil, err
	}
	x := &Exporter{maxPending: o.maxPending, logger: o.loggerFor(e)}
	// An own JetStream context: its async window is this exporter's alone.
	x.js, err = jetstream.New(e.Conn(),
		jetstream.WithPublishAsyncMaxPending(o.maxPending),
		jetstream.WithPublishAsyncTimeout(o.ackTimeout),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) { x.acked.Add(1) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			x.failed.Add(1)
			x.logger.Debug("span publish failed", slog.String("subject", m.Subject), slog.Any("error", err))
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrInvalidOption, err)
	}
	return x, nil
}

// ExportSpans publishes spans without waiting for their acknowledgement.
// It returns nil even when spans were dropped (they are counted): tracing
// must not fail the traced code.
func (x *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	for i, ro := range spans {
		if x.stopped.Load() || ctx.Err() != nil {
			x.dropped.Add(uint64(len(spans) - i))
			return nil
		}
		if x.js.PublishAsyncPending() >= x.maxPending {
			x.dropped.Add(1)
			continue
		}
		sp := fromReadOnly(ro, x.resource(ro.Resource()))
		data, err := json.Marshal(&sp)
		if err != nil {
			x.failed.Add(1)
			continue
		}
		_, err = x.js.PublishAsync(SpanSubject(sp.TraceID), data, jetstream.WithStallWait(stallWait))
		switch {
		case err == nil:
			x.published.Add(1)
		case errors.Is(err, jetstream.ErrTooManyStalledMsgs):
			x.dropped.Add(1)
		default:
			x.failed.Add(1)
			x.logger.Debug("span publish failed", slog.String("trace_id", sp.TraceID), slog.Any("error", err))
		}
	}
	return nil
}

// resource returns the map of r, converted once per resource.
func (x *Exporter) resource(r *sdkresource.Resource) map[string]any {
	x.resMu.Lock()
	defer x.resMu.Unlock()
	if r != x.resKey || x.resMap == nil {
		x.resKey, x.resMap = r, resourceMap(r)
	}
	return x.resMap
}

// ForceFlush waits until every publish made so far is acknowledged (or
// failed), or ctx ends.
func (x *Exporter) ForceFlush(ctx context.Context) error {
	select {
	case <-x.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown stops publishing (later spans are dropped) and waits for the
// acknowledgements like [Exporter.ForceFlush]. It is idempotent.
func (x *Exporter) Shutdown(ctx context.Context) error {
	x.stopped.Store(true)
	return x.ForceFlush(ctx)
}

// Stats returns the exporter's counters.
func (x *Exporter) Stats() ExporterStats {
	return ExporterStats{
		Published: x.published.Load(),
		Acked:     x.acked.Load(),
		Dropped:   x.dropped.Load(),
		Failed:    x.failed.Load(),
		Pending:   x.js.PublishAsyncPending(),
	}
}

// NewSpanProcessor returns a batch span processor over x whose ForceFlush
// also waits for x's acknowledgements, so that tp.ForceFlush(ctx) returns
// once the spans ended so far are in the stream:
//
//	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(traces.NewSpanProcessor(x)))
func NewSpanProcessor(x *Exporter, opts ...sdktrace.BatchSpanProcessorOption) sdktrace.SpanProcessor {
	return &flushingProcessor{SpanProcessor: sdktrace.NewBatchSpanProcessor(x, opts...), x: x}
}

type flushingProcessor struct {
	sdktrace.SpanProcessor
	x *Exporter
}

func (p *flushingProcessor) ForceFlush(ctx context.Context) error {
	if err := p.SpanProcessor.ForceFlush(ctx); err != nil {
		return err
	}
	return p.x.ForceFlush(ctx)
}
