package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/telemetry"
)

// lostByReason reads iii_telemetry_spans_lost from r, by reason.
func lostByReason(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "iii_telemetry_spans_lost" {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("iii_telemetry_spans_lost is a %T", m.Data)
			}
			for _, dp := range sum.DataPoints {
				reason, _ := dp.Attributes.Value(attribute.Key("reason"))
				out[reason.AsString()] += dp.Value
			}
		}
	}
	return out
}

// Spans an exporter never got (its queue full while the collector hangs,
// an export the collector refused, spans still queued at the shutdown's
// deadline) are counted, by reason, and said in the node's log. They used
// to be dropped with one debug line on OpenTelemetry's own global logger.
// Every span ended is either taken by the collector or counted lost,
// exactly once.
func TestLostSpansCounted(t *testing.T) {
	tests := []struct {
		name     string
		status   int  // the collector's answer
		hang     bool // the collector never answers
		lost     bool
		logsLoss bool
	}{
		{name: "collector answers", status: http.StatusOK},
		{name: "collector refuses", status: http.StatusBadRequest, lost: true, logsLoss: true},
		{name: "collector hangs", hang: true, lost: true, logsLoss: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var posts, taken atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.hang {
					select {
					case <-release:
					case <-r.Context().Done():
					}
					return
				}
				posts.Add(1)
				if tc.status == http.StatusOK {
					b, _ := io.ReadAll(r.Body)
					var req coltracepb.ExportTraceServiceRequest
					if proto.Unmarshal(b, &req) == nil {
						for _, rs := range req.ResourceSpans {
							for _, ss := range rs.ScopeSpans {
								taken.Add(int64(len(ss.Spans)))
							}
						}
					}
				}
				w.WriteHeader(tc.status)
			}))
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(release) })
			// Read by the exporter and the batch processor themselves.
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
			timeout := "5000" // a loaded machine does not fail an answering collector's export
			if tc.hang {
				timeout = "100"
			}
			t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", timeout)
			t.Setenv("OTEL_BSP_EXPORT_TIMEOUT", timeout)
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
			t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "50")
			t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10")
			otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
			var logs enginetest.Buffer
			reader := sdkmetric.NewManualReader()
			ctx := context.Background()
			tp, err := telemetry.NewTracerProvider(ctx,
				telemetry.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
				telemetry.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
			if err != nil {
				t.Fatal(err)
			}
			const spans = 500
			for i := range spans {
				_, span := tp.Tracer("t").Start(ctx, "turn")
				span.End()
				if tc.status == http.StatusOK && i%20 == 19 {
					// Bursts the queue (50) holds: the next one once the
					// collector took this one.
					for deadline := time.Now().Add(5 * time.Second); taken.Load() <= int64(i) && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
				}
			}
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_ = tp.Shutdown(sctx)

			lost := lostByReason(t, reader)
			total := lost[telemetry.LossQueueFull] + lost[telemetry.LossExportFailed] + lost[telemetry.LossShutdown]
			t.Logf("lost %v, %d posts", lost, posts.Load())
			switch {
			case !tc.lost && (total != 0 || taken.Load() != spans):
				t.Fatalf("%d spans counted lost with a collector that answers (%v), %d of %d taken", total, lost, taken.Load(), spans)
			case tc.lost && total != spans:
				t.Fatalf("%d of %d spans counted lost (%v); every span the collector never took must be counted once", total, spans, lost)
			}
			if tc.hang && lost[telemetry.LossQueueFull] == 0 {
				t.Fatalf("no span lost to a full queue while the collector hangs: %v", lost)
			}
			if tc.status == http.StatusBadRequest && lost[telemetry.LossExportFailed] == 0 {
				t.Fatalf("no span counted as a failed export: %v", lost)
			}
			said := strings.Contains(logs.String(), "spans lost")
			if said != tc.logsLoss {
				t.Fatalf("the log says lost spans: %v, want %v:\n%s", said, tc.logsLoss, logs.String())
			}
		})
	}
}
