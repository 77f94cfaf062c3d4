package state_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/state"
)

// BenchmarkKVSet measures Store.Set (a direct get, then a CAS publish) on
// a warm key: value=small is a small object, value=4KiB a 4 KiB string.
func BenchmarkKVSet(b *testing.B) {
	for _, bc := range []struct {
		name  string
		value any
	}{
		{"value=small", map[string]any{"status": "running", "turn": 3, "model": "m"}},
		{"value=4KiB", strings.Repeat("x", 4<<10)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			v := newEnv(b, nil)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := v.store.Set(ctx, "bench", "k", bc.value); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// BenchmarkKVUpdateCAS measures Store.Update with one increment; with
// writers=2 two connections contend for one key, so part of the attempts
// lose the compare-and-set and retry.
func BenchmarkKVUpdateCAS(b *testing.B) {
	for _, writers := range []int{1, 2} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			ns := enginetest.RunServer(b)
			stores := make([]*state.Store, writers)
			for i := range stores {
				stores[i] = newStore(b, enginetest.NewEngine(b, ns), state.WithMaxRetries(10000))
			}
			ctx := context.Background()
			ops := []state.Op{state.Increment("n", 1)}
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for w, s := range stores {
				n := b.N / writers
				if w == 0 {
					n += b.N % writers
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range n {
						if _, _, err := s.Update(ctx, "bench", "counter", ops); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			got, _, err := stores[0].Get(ctx, "bench", "counter")
			if err != nil || got.(map[string]any)["n"] != float64(b.N) {
				b.Fatalf("counter = %v, %v; want %d", got, err, b.N)
			}
		})
	}
}
