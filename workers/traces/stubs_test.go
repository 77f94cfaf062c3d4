package traces_test

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine"
)

// stubs returns n ended spans (one trace per 10) as the SDK hands them to
// an exporter.
func stubs(n int) []sdktrace.ReadOnlySpan {
	start := time.Unix(1700000000, 0)
	ss := make(tracetest.SpanStubs, n)
	for i := range ss {
		tid := trace.TraceID{0: 1, 15: byte(i / 10), 14: byte(i / 2560)}
		ss[i] = tracetest.SpanStub{
			Name: "worker::fn",
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: trace.SpanID{0: 1, 7: byte(i), 6: byte(i >> 8)}, TraceFlags: trace.FlagsSampled,
			}),
			Parent:    trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{0: 2}}),
			SpanKind:  trace.SpanKindServer,
			StartTime: start,
			EndTime:   start.Add(time.Millisecond),
			Attributes: []attribute.KeyValue{
				attribute.String(engine.AttrFunctionID, "worker::fn"),
				attribute.String(engine.AttrSessionID, "s-1"),
				attribute.String(engine.AttrMessageID, "m-1"),
			},
		}
	}
	return ss.Snapshots()
}
