package orchestrator

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// TestModelTokensNeverCountDown: a provider's negative token counts (a
// broken server or proxy) count as none; iii.model.tokens is a monotonic
// counter, and they lowered it.
func TestModelTokensNeverCountDown(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	e := enginetest.NewEngine(t, enginetest.RunServer(t), engine.WithMeterProvider(mp))
	ms, err := newMetrics(e)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ms.model(ctx, "p", "m", &agent.Usage{InputTokens: 10, OutputTokens: 5})
	ms.model(ctx, "p", "m", &agent.Usage{InputTokens: -100, CacheReadTokens: -1, OutputTokens: -50})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "iii.model.tokens" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				typ, _ := dp.Attributes.Value("type")
				got[typ.AsString()] += dp.Value
			}
		}
	}
	if got["input"] != 10 || got["output"] != 5 {
		t.Fatalf("tokens %v, want input 10, output 5", got)
	}
}
