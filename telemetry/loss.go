package telemetry

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Reasons a span meant for an exporter never reached it, as the log and
// the iii_telemetry_spans_lost counter name them.
const (
	// LossQueueFull: the exporter's queue held max_queue spans already
	// (the collector is slow or down and spans end faster than it takes
	// them).
	LossQueueFull = "queue_full"
	// LossExportFailed: the exporter was handed the span and failed (the
	// collector refused or did not answer within the export timeout).
	LossExportFailed = "export_failed"
	// LossShutdown: the span was still queued when Shutdown's deadline
	// passed.
	LossShutdown = "shutdown"
)

// lossReportEvery bounds how often the log says that spans were lost.
const lossReportEvery = 10 * time.Second

// queueSizes are the batch processor's bounds, read as OpenTelemetry
// reads them (OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE)
// but through [WithGetenv].
func queueSizes(getenv func(string) string) (queue, batch int) {
	num := func(name string, def int) int {
		n, err := strconv.Atoi(strings.TrimSpace(getenv(name)))
		if err != nil || n <= 0 {
			return def
		}
		return n
	}
	queue = num("OTEL_BSP_MAX_QUEUE_SIZE", sdktrace.DefaultMaxQueueSize)
	batch = min(num("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", sdktrace.DefaultMaxExportBatchSize), queue)
	return queue, batch
}

// lossCounter counts, for one exporter, the spans that never reached it
// and says so in the log (at most once every lossReportEvery, and at
// Shutdown) and in a counter. OpenTelemetry's batch processor drops a span
// when its queue is full and only mentions it at debug level on its own
// global logger: a node whose collector is down lost its spans silently.
type lossCounter struct {
	logger   *slog.Logger
	exporter string
	lost     metric.Int64Counter // nil without a meter provider

	queued atomic.Int64 // ended and handed on, not yet taken by an export
	limit  int64

	// settleMu orders the exports' takes against Shutdown's count of
	// what was left: a span is counted lost once.
	settleMu sync.Mutex
	settled  bool

	mu       sync.Mutex
	total    map[string]int64
	reported map[string]int64
	last     time.Time
}

func newLossCounter(logger *slog.Logger, mp metric.MeterProvider, exporter string, limit int) *lossCounter {
	c := &lossCounter{logger: logger, exporter: exporter, limit: int64(limit), total: map[string]int64{}, reported: map[string]int64{}}
	if mp != nil {
		ctr, err := mp.Meter("github.com/iii-on-nats/iii/telemetry").Int64Counter("iii_telemetry_spans_lost",
			metric.WithDescription("spans that never reached their exporter, by reason (queue_full, export_failed, shutdown)"),
			metric.WithUnit("{span}"))
		if err == nil {
			c.lost = ctr
		}
	}
	return c
}

// add counts n spans lost for reason and reports if it is time to.
func (c *lossCounter) add(ctx context.Context, reason string, n int64, force bool) {
	if n <= 0 {
		return
	}
	if c.lost != nil {
		c.lost.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason), attribute.String("exporter", c.exporter)))
	}
	c.mu.Lock()
	c.total[reason] += n
	c.mu.Unlock()
	c.report(force)
}

// report logs the losses since the last report, if there are any and the
// last one is lossReportEvery old (or force).
func (c *lossCounter) report(force bool) {
	c.mu.Lock()
	now := time.Now()
	if !force && !c.last.IsZero() && now.Sub(c.last) < lossReportEvery {
		c.mu.Unlock()
		return
	}
	attrs := []any{slog.String("exporter", c.exporter)}
	lost := false
	for _, reason := range []string{LossQueueFull, LossExportFailed, LossShutdown} {
		if d := c.total[reason] - c.reported[reason]; d > 0 {
			attrs = append(attrs, slog.Int64(reason, d), slog.Int64(reason+"_total", c.total[reason]))
			c.reported[reason] = c.total[reason]
			lost = true
		}
	}
	if lost {
		c.last = now
	}
	c.mu.Unlock()
	if lost && c.logger != nil {
		c.logger.Warn("tracing: spans lost before their exporter took them", attrs...)
	}
}

// lossProcessor stands in front of a batch processor: it drops a span
// itself, counted, when limit spans are already waiting for the exporter,
// so the batch processor behind it (whose queue is limit plus one batch
// long) never drops one silently.
type lossProcessor struct {
	next    sdktrace.SpanProcessor
	c       *lossCounter
	stopped atomic.Bool
}

func (p *lossProcessor) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	p.next.OnStart(ctx, s)
}

func (p *lossProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() || p.stopped.Load() { // the batch processor skips these
		return
	}
	if p.c.queued.Add(1) > p.c.limit {
		p.c.queued.Add(-1)
		p.c.add(context.Background(), LossQueueFull, 1, false)
		return
	}
	p.next.OnEnd(s)
}

func (p *lossProcessor) ForceFlush(ctx context.Context) error { return p.next.ForceFlush(ctx) }

// Shutdown flushes; what is still queued when it returns is lost, and the
// log says so at once.
func (p *lossProcessor) Shutdown(ctx context.Context) error {
	p.stopped.Store(true)
	err := p.next.Shutdown(ctx)
	// The batch processor may go on exporting in the background after a
	// deadline; those spans are counted here, not again there.
	p.c.settleMu.Lock()
	p.c.settled = true
	n := p.c.queued.Swap(0)
	p.c.settleMu.Unlock()
	p.c.add(context.Background(), LossShutdown, n, true)
	p.c.report(true)
	return err
}

// lossExporter counts what the batch processor hands its exporter.
type lossExporter struct {
	sdktrace.SpanExporter
	c *lossCounter
}

func (x *lossExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	x.c.settleMu.Lock()
	settled := x.c.settled
	if !settled {
		x.c.queued.Add(-int64(len(spans)))
	}
	x.c.settleMu.Unlock()
	err := x.SpanExporter.ExportSpans(ctx, spans)
	if err != nil && !settled {
		x.c.add(ctx, LossExportFailed, int64(len(spans)), false)
	}
	return err
}

// countedBatcher is a batch processor for x whose lost spans are counted
// and reported (see [lossCounter]).
func countedBatcher(x sdktrace.SpanExporter, name string, o options) sdktrace.SpanProcessor {
	queue, batch := queueSizes(o.getenv)
	c := newLossCounter(o.logger, o.meters, name, queue)
	bsp := sdktrace.NewBatchSpanProcessor(&lossExporter{SpanExporter: x, c: c},
		sdktrace.WithMaxQueueSize(queue+batch), sdktrace.WithMaxExportBatchSize(batch))
	return &lossProcessor{next: bsp, c: c}
}
