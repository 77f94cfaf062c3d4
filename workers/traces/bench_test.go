package traces_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/traces"
)

// BenchmarkExporter measures what ExportSpans costs the caller per span
// (conversion, JSON, async publish) against a real server; acks are
// waited for outside the timer.
func BenchmarkExporter(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			e := enginetest.Engine(b)
			ctx := context.Background()
			x, err := traces.NewExporter(ctx, e, traces.WithMaxPending(1<<16))
			if err != nil {
				b.Fatal(err)
			}
			spans := stubs(batch)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				_ = x.ExportSpans(ctx, spans)
			}
			b.StopTimer()
			_ = x.ForceFlush(ctx)
			st := x.Stats()
			b.ReportMetric(float64(st.Dropped)/float64(max(1, st.Published+st.Dropped)), "dropped/span")
		})
	}
}

// BenchmarkEncode is the conversion and JSON encoding of one span alone.
func BenchmarkEncode(b *testing.B) {
	ro := stubs(1)[0]
	b.ReportAllocs()
	for b.Loop() {
		sp := traces.FromReadOnlySpan(ro)
		if _, err := jsonMarshal(&sp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGroupBy groups a full store: spans=100000 in traces of 10,
// sessions of 10 traces.
func BenchmarkGroupBy(b *testing.B) {
	const spans = 100_000
	s := newStore(b)
	for i := range spans {
		tr := i / 10
		s.Add(span(tr, i, -1, int64(i), int64(i)+5,
			engine.AttrSessionID, fmt.Sprint("s", tr/10), engine.AttrFunctionID, fmt.Sprint("fn::", i%20)))
	}
	for _, attr := range []string{engine.AttrSessionID, engine.AttrFunctionID} {
		b.Run(fmt.Sprintf("spans=%d,attribute=%s", spans, attr), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := s.GroupBy(traces.GroupByRequest{Attribute: attr})
				if err != nil || len(res.Groups) == 0 {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTree builds the tree of a trace of 1000 spans (a chain of
// fan-outs).
func BenchmarkTree(b *testing.B) {
	s := newStore(b)
	for i := range 1000 {
		s.Add(span(1, i, i/4-1, int64(i), int64(i)+1))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Tree(tid(1)); err != nil {
			b.Fatal(err)
		}
	}
}
