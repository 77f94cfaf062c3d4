package queue_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/queue"
)

// BenchmarkEnqueueHandle measures the durable round trip: Enqueue (an
// acked JetStream publish) → consumer → function call → ack, over one
// embedded server. b.N jobs are enqueued by the given number of producers
// and the benchmark ends when all were handled.
func BenchmarkEnqueueHandle(b *testing.B) {
	for _, bc := range []struct{ producers, concurrency int }{{1, 1}, {1, 8}, {8, 8}, {8, 32}} {
		b.Run(fmt.Sprintf("producers=%d,concurrency=%d", bc.producers, bc.concurrency), func(b *testing.B) {
			ns := enginetest.RunServer(b)
			e := enginetest.NewEngine(b, ns)
			var handled atomic.Int64
			done := make(chan struct{})
			var target atomic.Int64
			w, err := e.Worker("bench")
			if err != nil {
				b.Fatal(err)
			}
			if err := w.Register(engine.Function{ID: "bench::work", Handler: engine.Typed(func(_ context.Context, j job) (struct{}, error) {
				if handled.Add(1) == target.Load() {
					close(done)
				}
				return struct{}{}, nil
			})}); err != nil {
				b.Fatal(err)
			}
			c, err := queue.Consume(context.Background(), enginetest.NewEngine(b, ns), "bench", queue.WithConcurrency(bc.concurrency))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Stop()
			target.Store(int64(b.N))
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			errs := make(chan error, bc.producers)
			for range bc.producers {
				go func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							errs <- nil
							return
						}
						if err := e.Enqueue(ctx, "bench", "bench::work", job{ID: int(i), Text: "payload"}); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			for range bc.producers {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-done:
			case <-time.After(time.Minute):
				b.Fatalf("handled %d of %d", handled.Load(), b.N)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
		})
	}
}
