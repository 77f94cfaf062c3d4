package sessiontree_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// latencies records one duration per operation and reports p50 and p99.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	at := func(q float64) float64 {
		return float64(l[min(len(l)-1, int(q*float64(len(l))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// seed appends n messages to sid as one chain, in batches.
func seed(b *testing.B, s *sessiontree.Store, sid string, n int) {
	b.Helper()
	ctx := context.Background()
	for done := 0; done < n; {
		k := min(sessiontree.MaxBatchEntries, n-done)
		msgs := make([]agent.Message, k)
		for i := range msgs {
			msgs[i] = agent.UserText(fmt.Sprintf("message %d: some text of a typical length for a chat turn", done+i), 1)
		}
		if _, err := s.AppendBatch(ctx, sessiontree.AppendBatchRequest{SessionID: sid, Messages: msgs}); err != nil {
			b.Fatal(err)
		}
		done += k
	}
}

// BenchmarkAppend appends one message to the active leaf of a session
// that already holds 10,000 entries.
func BenchmarkAppend(b *testing.B) {
	f := newFixture(b)
	sid := f.create(b)
	seed(b, f.s, sid, 10_000)
	msg := agent.UserText("one more message", 1)
	run := func(b *testing.B, appendOne func(ctx context.Context) error) {
		b.ReportAllocs()
		ctx := context.Background()
		lat := make(latencies, 0, b.N)
		b.ResetTimer()
		for b.Loop() {
			t := time.Now()
			if err := appendOne(ctx); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
		}
		b.StopTimer()
		lat.report(b)
	}
	b.Run("entries=10000,via=store", func(b *testing.B) {
		run(b, func(ctx context.Context) error {
			_, err := f.s.Append(ctx, sessiontree.AppendRequest{SessionID: sid, Message: &msg})
			return err
		})
	})
	b.Run("entries=10000,via=bus", func(b *testing.B) {
		run(b, func(ctx context.Context) error {
			_, err := engine.Call[sessiontree.AppendResponse](ctx, f.e, sessiontree.AppendFunction, sessiontree.AppendRequest{SessionID: sid, Message: &msg})
			return err
		})
	})
}

// BenchmarkMessages reads the model-facing messages of a 1,000-entry
// path, in a session where other branches hold 1,000 more entries.
func BenchmarkMessages(b *testing.B) {
	f := newFixture(b)
	sid := f.create(b)
	seed(b, f.s, sid, 1_000)
	leaf := f.meta(b, sid).ActiveLeaf
	// Noise: another branch of 1,000 entries off the root.
	root, err := f.s.Entries(context.Background(), sessiontree.ReadRequest{SessionID: sid})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.s.SetActiveLeaf(context.Background(), sessiontree.SetActiveLeafRequest{SessionID: sid, EntryID: root.Entries[0].ID}); err != nil {
		b.Fatal(err)
	}
	seed(b, f.s, sid, 1_000)
	run := func(b *testing.B, read func(ctx context.Context) (int, error)) {
		b.ReportAllocs()
		ctx := context.Background()
		lat := make(latencies, 0, b.N)
		b.ResetTimer()
		for b.Loop() {
			t := time.Now()
			n, err := read(ctx)
			if err != nil || n != 1_000 {
				b.Fatalf("%d messages, %v", n, err)
			}
			lat = append(lat, time.Since(t))
		}
		b.StopTimer()
		lat.report(b)
	}
	b.Run("path=1000,via=store", func(b *testing.B) {
		run(b, func(ctx context.Context) (int, error) {
			r, err := f.s.Messages(ctx, sessiontree.ReadRequest{SessionID: sid, Leaf: leaf})
			return len(r.Messages), err
		})
	})
	b.Run("path=1000,via=bus", func(b *testing.B) {
		run(b, func(ctx context.Context) (int, error) {
			r, err := engine.Call[sessiontree.MessagesResponse](ctx, f.e, sessiontree.MessagesFunction, sessiontree.ReadRequest{SessionID: sid, Leaf: leaf})
			return len(r.Messages), err
		})
	})
}
