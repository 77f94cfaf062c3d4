package compaction_test

import (
	"fmt"
	"testing"

	"github.com/iii-on-nats/iii/workers/compaction"
)

// BenchmarkCompact is one compaction::compact over the bus, end to end:
// the model lookup, the lease, two session reads, one summarizer call
// (the scripted provider), the append.
func BenchmarkCompact(b *testing.B) {
	const n = 32
	b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
		f := newFixture(b, compaction.WithAuto(false))
		ctx := ctxT(b)
		b.ReportAllocs()
		calls := 0
		for b.Loop() {
			b.StopTimer()
			sid := f.create(b)
			f.conversation(b, sid, 1, n)
			b.StartTimer()
			r, err := f.compact(ctx, compaction.CompactRequest{SessionID: sid})
			if err != nil || !r.Compacted {
				b.Fatalf("%+v, %v", r, err)
			}
			calls += r.SummaryCalls
		}
		b.ReportMetric(float64(calls)/float64(b.N), "summary-calls/op")
	})
}
