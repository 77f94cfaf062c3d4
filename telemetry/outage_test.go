package telemetry_test

import (
	"context"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/iii-on-nats/iii/telemetry"
)

// A collector that accepts connections and never answers must not slow
// the traced code: ending a span only queues it (a bounded queue that
// drops when full), and each export gives up after its timeout.
func TestCollectorOutageDoesNotBlock(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	// Read by the exporter and the batch processor themselves; short
	// timeouts so that Shutdown drains the queue and nothing outlives the
	// test.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "100")
	t.Setenv("OTEL_BSP_EXPORT_TIMEOUT", "100")
	var failures atomic.Int64
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) { failures.Add(1) }))
	defer otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Print(err) })) // otel's default
	ctx := context.Background()
	tp, err := telemetry.NewTracerProvider(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const spans = 20_000 // ten times the batch processor's queue
	start := time.Now()
	for range spans {
		_, span := tp.Tracer("t").Start(ctx, "turn")
		span.End()
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("%d spans took %v with the collector hanging", spans, d)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tp.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if failures.Load() == 0 {
		t.Fatal("no export failed: the collector answered")
	}
}
