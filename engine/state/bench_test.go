package state_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

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
			if err != nil || got.(map[string]any)["n"] != int64(b.N) {
				b.Fatalf("counter = %v, %v; want %d", got, err, b.N)
			}
		})
	}
}

// BenchmarkListPages lists a scope of keys page by page through state::list
// (limit items a page, after set to the last key received), as a client
// walking the whole scope does: one op is the whole walk. limit=0 leaves
// the max payload alone to cut the pages (one or two pages here).
func BenchmarkListPages(b *testing.B) {
	for _, bc := range []struct{ keys, limit int }{
		{20000, 100},
		{20000, 1000},
		{20000, 0}, // pages cut by the max payload only
	} {
		b.Run(fmt.Sprintf("keys=%d,limit=%d", bc.keys, bc.limit), func(b *testing.B) {
			v := newEnv(b, nil)
			serve(b, v)
			fillScope(b, v, "bench", bc.keys)
			nc := enginetest.Connect(b, v.ns)
			b.ReportAllocs()
			b.ResetTimer()
			pages := 0
			for i := 0; i < b.N; i++ {
				n, after := 0, ""
				for {
					body, _ := json.Marshal(map[string]any{"scope": "bench", "after": after, "limit": bc.limit})
					got, werr := jsonReq(b, nc, "iii.fn.state.list", string(body))
					if werr != nil {
						b.Fatal(werr)
					}
					var resp state.ListResponse
					if err := json.Unmarshal([]byte(got), &resp); err != nil {
						b.Fatal(err)
					}
					pages++
					n += len(resp.Items)
					if !resp.Truncated {
						break
					}
					after = resp.Items[len(resp.Items)-1].Key
				}
				if n != bc.keys {
					b.Fatalf("listed %d keys, want %d", n, bc.keys)
				}
			}
			b.ReportMetric(float64(pages)/b.Elapsed().Seconds(), "pages/s")
		})
	}
}

// fillScope writes n small values, keys k000000.., into scope, a chunk of
// asynchronous publishes at a time.
func fillScope(t testing.TB, v *env, scope string, n int) {
	t.Helper()
	ctx := testCtx(t)
	js := v.e.JetStream()
	for start := 0; start < n; start += 1000 {
		acks := make([]jetstream.PubAckFuture, 0, 1000)
		for i := start; i < min(start+1000, n); i++ {
			subj := fmt.Sprintf("$KV.%s.%s.k%06d", v.store.Bucket(), scope, i)
			f, err := js.PublishAsync(subj, []byte(fmt.Sprintf(`{"i":%d}`, i)))
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, f)
		}
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				t.Fatalf("fill: %v", err)
			case <-ctx.Done():
				t.Fatal("fill: publishes not acknowledged")
			}
		}
	}
}
