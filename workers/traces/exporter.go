package traces

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// stallWait is the longest one span may wait for a slot when the window
// filled up between the check and the publish.
const stallWait = time.Millisecond

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// Exporter is an sdktrace.SpanExporter that publishes every ended span, as
// the JSON of a [Span], on [StreamName] under [SpanSubject]. Publishes are
// asynchronous within a bounded window ([WithMaxPending]): ExportSpans
// never waits for the server, and a span that finds the window full is
// dropped and counted ([ExporterStats]), and lost spans are logged at
// Warn at most once a minute with their counts. [Exporter.ForceFlush] and
// [Exporter.Shutdown] wait for the acknowledgements.
//
// A publish that finds no stream (`nats stream rm III_SPANS` under a
// running node) has the exporter create the stream again in the
// background, one attempt at a time with backoff; the spans published
// meanwhile are lost and counted.
//
// Use it behind a batch span processor ([NewSpanProcessor] also flushes the
// acknowledgements on ForceFlush). It publishes on the engine's connection
// and never closes it.
type Exporter struct {
	js         jetstream.JetStream
	maxPending int
	losses     *lossLog
	e          *engine.Engine
	stream     jetstream.StreamConfig
	logger     *slog.Logger

	// life ends with Shutdown; it bounds the stream's re-creation.
	life context.Context
	end  context.CancelFunc

	// recreating is the one re-creation of the stream running, if any;
	// shut says Shutdown began (no more of them).
	recMu      sync.Mutex
	recreating chan struct{}
	shut       bool
	// Backoff of the re-creations, used by one at a time.
	recDelay time.Duration
	recLast  time.Time

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
// and returns an exporter publishing to it on e's connection; it creates
// the stream again if it is deleted later.
func NewExporter(ctx context.Context, e *engine.Engine, opts ...Option) (*Exporter, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if _, err := e.EnsureStream(ctx, o.streamConfig(e)); err != nil {
		return nil, err
	}
	logger := o.loggerFor(e)
	x := &Exporter{
		maxPending: o.maxPending, losses: newLossLog(logger, "spans not exported"),
		e: e, stream: o.streamConfig(e), logger: logger,
	}
	x.life, x.end = context.WithCancel(context.Background())
	// An own JetStream context: its async window is this exporter's alone.
	x.js, err = jetstream.New(e.Conn(),
		jetstream.WithPublishAsyncMaxPending(o.maxPending),
		jetstream.WithPublishAsyncTimeout(o.ackTimeout),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) { x.acked.Add(spanCount(m)) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			n := spanCount(m)
			x.failed.Add(n)
			x.losses.note(0, n, 0, err)
			x.streamLost(err)
		}),
	)
	if err != nil {
		x.end()
		return nil, fmt.Errorf("%w: %w", engine.ErrInvalidOption, err)
	}
	return x, nil
}

// Bounds of the stream's re-creation ([Exporter.streamLost]).
const (
	// recreateBase and recreateMax bound the wait before an attempt: none
	// before the first of a while, recreateBase after a failure or for a
	// loss soon after the last re-creation, doubling up to recreateMax.
	recreateBase = 250 * time.Millisecond
	recreateMax  = 30 * time.Second
	// recreateAttempt bounds one attempt.
	recreateAttempt = 10 * time.Second
)

// streamLost starts re-creating the stream when err says a publish found
// none (`nats stream rm III_SPANS` under a running node): the stream was
// ensured once, at NewExporter, and every later span failed until a
// restart. It runs on nats.go's goroutine (the ack-timeout path holds the
// publisher's lock), so it only starts the work: in the background, one
// at a time, never in the way of ExportSpans.
func (x *Exporter) streamLost(err error) {
	if !engine.StreamMissing(err) {
		return
	}
	x.recMu.Lock()
	defer x.recMu.Unlock()
	if x.shut || x.recreating != nil {
		return
	}
	done := make(chan struct{})
	x.recreating = done
	go x.recreate(err, done)
}

// recreate creates the stream again, with backoff, until it is there or
// Shutdown. The spans whose publish found no stream are lost (counted as
// failed).
func (x *Exporter) recreate(cause error, done chan struct{}) {
	defer func() {
		x.recMu.Lock()
		x.recreating = nil
		x.recMu.Unlock()
		close(done)
	}()
	for said := false; ; {
		// At once, unless the last attempt ended less than recreateMax
		// ago: it failed, or something keeps deleting the stream, or
		// cause is a publish that found no stream before the last
		// re-creation.
		if time.Since(x.recLast) < recreateMax {
			x.recDelay = min(max(2*x.recDelay, recreateBase), recreateMax)
			select {
			case <-x.life.Done():
				return
			case <-time.After(x.recDelay):
			}
		} else {
			x.recDelay = 0
		}
		ctx, cancel := context.WithTimeout(x.life, recreateAttempt)
		gone, err := x.ensure(ctx, cause, !said)
		cancel()
		x.recLast = time.Now()
		said = said || gone
		if err == nil || x.life.Err() != nil || x.e.Conn().IsClosed() {
			return
		}
		x.logger.Warn("span stream not created again; will retry", "stream", StreamName, "error", err)
	}
}

// ensure creates the stream if it is not there; gone says it was not.
func (x *Exporter) ensure(ctx context.Context, cause error, say bool) (gone bool, err error) {
	_, err = x.js.Stream(ctx, StreamName)
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, err
	}
	if say {
		x.logger.Warn("span stream missing; creating it again", "stream", StreamName, "error", cause)
	}
	// EnsureStream would answer with the handle it cached.
	x.e.ForgetStream(StreamName, err)
	_, err = x.e.EnsureStream(ctx, x.stream)
	return true, err
}

// ExportSpans publishes spans without waiting for their acknowledgement.
// It returns nil even when spans were dropped (they are counted): tracing
// must not fail the traced code.
func (x *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	// One stream message per trace of the batch (a JSON array of its
	// spans), not one per span: a turn's ~40 spans cost a message or two.
	limit := x.messageLimit()
	var order []string
	byTrace := map[string][]json.RawMessage{}
	for _, ro := range spans {
		sp := fromReadOnly(ro, x.resource(ro.Resource()))
		data, err := wire.MarshalJSON(&sp)
		if err == nil && len(data)+2 > limit {
			// Alone over a message: sent as the store would hold it
			// anyway (trimmed), rather than failing.
			sp = sp.Trim(len(data))
			data, err = wire.MarshalJSON(&sp)
		}
		if err != nil {
			x.failed.Add(1)
			x.losses.note(0, 1, 0, err)
			continue
		}
		if _, ok := byTrace[sp.TraceID]; !ok {
			order = append(order, sp.TraceID)
		}
		byTrace[sp.TraceID] = append(byTrace[sp.TraceID], data)
	}
	for i, id := range order {
		if x.stopped.Load() || ctx.Err() != nil {
			var n uint64
			for _, rest := range order[i:] {
				n += uint64(len(byTrace[rest]))
			}
			x.dropped.Add(n)
			if !x.stopped.Load() {
				x.losses.note(n, 0, 0, ctx.Err())
			}
			return nil
		}
		for _, chunk := range chunks(byTrace[id], limit) {
			x.publish(id, chunk)
		}
	}
	return nil
}

// publish sends the spans of one trace as one message (a JSON array).
func (x *Exporter) publish(traceID string, spans []json.RawMessage) {
	n := uint64(len(spans))
	if x.js.PublishAsyncPending() >= x.maxPending {
		x.dropped.Add(n)
		x.losses.note(n, 0, 0, nil)
		return
	}
	data, err := wire.MarshalJSON(spans)
	if err != nil {
		x.failed.Add(n)
		x.losses.note(0, n, 0, err)
		return
	}
	msg := &nats.Msg{Subject: SpanSubject(traceID), Data: data, Header: nats.Header{}}
	msg.Header.Set(headerSpanCount, strconv.FormatUint(n, 10))
	_, err = x.js.PublishMsgAsync(msg, jetstream.WithStallWait(stallWait))
	switch {
	case err == nil:
		x.published.Add(n)
	case errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		x.dropped.Add(n)
		x.losses.note(n, 0, 0, nil)
	default:
		x.failed.Add(n)
		x.losses.note(0, n, 0, err)
	}
}

// publishHeadroom is what a message's headers (Iii-Span-Count and any
// the client adds) may take of the server's max payload, which counts
// them with the data, as does the stream's MaxMsgSize.
const publishHeadroom = 1 << 10

// messageLimit is how many bytes the JSON array of one message may take:
// within [MaxSpanBytes] (the stream's MaxMsgSize) and the connection's
// max payload, less the headers.
func (x *Exporter) messageLimit() int {
	return max(int(min(int64(MaxSpanBytes), x.js.Conn().MaxPayload()))-publishHeadroom, 4<<10)
}

// chunks splits encoded spans into groups whose JSON array fits max
// bytes; a span alone over max is its own (failing) group.
func chunks(spans []json.RawMessage, max int) [][]json.RawMessage {
	var out [][]json.RawMessage
	start, size := 0, 2
	for i, sp := range spans {
		if i > start && size+len(sp)+1 > max {
			out = append(out, spans[start:i])
			start, size = i, 2
		}
		size += len(sp) + 1
	}
	return append(out, spans[start:])
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

// Shutdown stops publishing (later spans are dropped) and re-creating
// the stream, and waits for the acknowledgements like
// [Exporter.ForceFlush]. It is idempotent.
func (x *Exporter) Shutdown(ctx context.Context) error {
	x.stopped.Store(true)
	x.recMu.Lock()
	x.shut = true
	done := x.recreating
	x.recMu.Unlock()
	x.end()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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

// headerSpanCount says how many spans a message carries, so the ack and
// error handlers count spans, not messages.
const headerSpanCount = "Iii-Span-Count"

func spanCount(m *nats.Msg) uint64 {
	if m == nil {
		return 1
	}
	if n, err := strconv.ParseUint(m.Header.Get(headerSpanCount), 10, 32); err == nil && n > 0 {
		return n
	}
	return 1
}
