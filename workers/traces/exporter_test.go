package traces_test

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/traces"
)

// paddedStub is span s of one trace with an attribute of pad bytes.
func paddedStub(s byte, pad int) tracetest.SpanStub {
	start := time.Now().Add(-time.Second)
	return tracetest.SpanStub{
		Name: "big",
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{0: 7, 15: 7}, SpanID: trace.SpanID{0: 1, 7: s}, TraceFlags: trace.FlagsSampled,
		}),
		SpanKind:   trace.SpanKindInternal,
		StartTime:  start,
		EndTime:    start.Add(time.Millisecond),
		Attributes: []attribute.KeyValue{attribute.String("pad", strings.Repeat("x", pad))},
	}
}

// encodedSize is the size of the JSON the exporter publishes for ro.
func encodedSize(t *testing.T, ro sdktrace.ReadOnlySpan) int {
	t.Helper()
	b, err := json.Marshal(traces.FromReadOnlySpan(ro))
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// Spans of one trace whose JSON array fits MaxSpanBytes but not with the
// message's headers, and a span larger than a message on its own, reach
// the stream: the batch is split to fit the connection's max payload with
// the headers, and the lone span is sent trimmed. Both used to fail whole
// (nats: maximum payload exceeded), losing every span of the message.
func TestExporterFitsMessages(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := ctxT(t)
	x, err := traces.NewExporter(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	base := encodedSize(t, tracetest.SpanStubs{paddedStub(1, 0)}.Snapshots()[0])
	// "[a,b]" is about 10 bytes short of MaxSpanBytes: the headers do not fit.
	pad := (traces.MaxSpanBytes-3-10)/2 - base
	pair := tracetest.SpanStubs{paddedStub(1, pad), paddedStub(2, pad)}.Snapshots()
	if n := encodedSize(t, pair[0]) + encodedSize(t, pair[1]) + 3; n < traces.MaxSpanBytes-20 || n >= traces.MaxSpanBytes {
		t.Fatalf("pair encodes as %d bytes", n)
	}
	huge := tracetest.SpanStubs{paddedStub(3, 2*traces.MaxSpanBytes)}.Snapshots()
	for _, spans := range [][]sdktrace.ReadOnlySpan{pair, huge} {
		if err := x.ExportSpans(ctx, spans); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := x.Stats(); st.Published != 3 || st.Acked != 3 || st.Failed != 0 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}

	s := startWorker(t, e).Store()
	enginetest.Eventually(t, 5*time.Second, func() error {
		if st := s.Stats(); st.Spans != 3 {
			return fmt.Errorf("store holds %+v", st)
		}
		return nil
	})
	tree, err := s.Tree(pair[0].SpanContext().TraceID().String())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range tree.Spans {
		if n.SpanID == huge[0].SpanContext().SpanID().String() && n.Attributes[traces.AttrTrimmedBytes] == nil {
			t.Fatalf("huge span not marked trimmed: %+v", n.Attributes)
		}
	}
}

// A span with a float attribute that is not finite (NaN, ±Inf: a ratio
// over zero) reaches the store with the value as OTLP's JSON writes it, a
// string; JSON has no number for it, and the span failed to encode and
// was lost whole, its children left without their parent.
func TestExporterNonFiniteFloats(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := ctxT(t)
	x, err := traces.NewExporter(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		kv   attribute.KeyValue
		want any
	}{
		{"NaN", attribute.Float64("v", math.NaN()), "NaN"},
		{"+Inf", attribute.Float64("v", math.Inf(1)), "Infinity"},
		{"-Inf", attribute.Float64("v", math.Inf(-1)), "-Infinity"},
		{"slice", attribute.Float64Slice("v", []float64{1.5, math.NaN()}), []any{1.5, "NaN"}},
		{"finite", attribute.Float64("v", 2.5), 2.5},
	}
	ss := make(tracetest.SpanStubs, len(tests))
	for i, tt := range tests {
		ss[i] = paddedStub(byte(i+1), 0)
		ss[i].Attributes = []attribute.KeyValue{tt.kv}
		ss[i].Events = []sdktrace.Event{{Name: "e", Time: ss[i].StartTime, Attributes: []attribute.KeyValue{tt.kv}}}
		ss[i].Links = []sdktrace.Link{{SpanContext: ss[i].SpanContext, Attributes: []attribute.KeyValue{tt.kv}}}
	}
	spans := ss.Snapshots()
	if err := x.ExportSpans(ctx, spans); err != nil {
		t.Fatal(err)
	}
	if err := x.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := x.Stats(); st.Acked != uint64(len(tests)) || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	s := startWorker(t, e).Store()
	enginetest.Eventually(t, 5*time.Second, func() error {
		if st := s.Stats(); st.Spans != len(tests) {
			return fmt.Errorf("store holds %+v", st)
		}
		return nil
	})
	tree, err := s.Tree(spans[0].SpanContext().TraceID().String())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*traces.TreeNode{}
	for _, n := range tree.Spans {
		got[n.SpanID] = n
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := got[spans[i].SpanContext().SpanID().String()]
			if n == nil {
				t.Fatal("span not stored")
			}
			for where, v := range map[string]any{
				"attributes": n.Attributes["v"], "event": n.Events[0].Attributes["v"], "link": n.Links[0].Attributes["v"],
			} {
				if !reflect.DeepEqual(v, tt.want) {
					t.Errorf("%s: %#v, want %#v", where, v, tt.want)
				}
			}
		})
	}
}
