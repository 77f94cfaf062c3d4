package sessiontree

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// nodes are n stores on one server, each on its own connection, as n
// processes would be.
func nodes(t *testing.T, n int) []*Store {
	t.Helper()
	ns := enginetest.RunServer(t)
	out := make([]*Store, n)
	for i := range out {
		s, err := Open(context.Background(), enginetest.NewEngine(t, ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		out[i] = s
	}
	return out
}

// TestConcurrentAppendsAcrossNodes: appends to the active leaf from
// several goroutines on each of three nodes, with and without defer_meta,
// all land once, make one chain, and every node's meta (and, once the
// deferred writes are done, the stored one) counts them all.
func TestConcurrentAppendsAcrossNodes(t *testing.T) {
	t.Parallel()
	for _, deferMeta := range []bool{false, true} {
		t.Run(fmt.Sprint("defer_meta=", deferMeta), func(t *testing.T) {
			t.Parallel()
			stores := nodes(t, 3)
			ctx := context.Background()
			if _, err := stores[0].Create(ctx, CreateRequest{SessionID: "c"}); err != nil {
				t.Fatal(err)
			}
			const perNode, each = 3, 12
			var (
				wg  sync.WaitGroup
				mu  sync.Mutex
				ids = map[string]bool{}
			)
			for si, s := range stores {
				for g := range perNode {
					wg.Go(func() {
						for i := range each {
							m := agent.UserText(fmt.Sprintf("n%d-g%d-%d", si, g, i), 1)
							r, err := s.Append(ctx, AppendRequest{SessionID: "c", Message: &m, DeferMeta: deferMeta && i%3 != 0})
							if err != nil {
								t.Error(err)
								return
							}
							mu.Lock()
							if ids[r.EntryID] {
								t.Errorf("entry id %s answered twice", r.EntryID)
							}
							ids[r.EntryID] = true
							mu.Unlock()
						}
					})
				}
			}
			wg.Wait()
			n := len(stores) * perNode * each
			for i, s := range stores {
				m, err := s.Meta(ctx, "c")
				if err != nil || m.EntryCount != uint64(n) {
					t.Fatalf("node %d: meta %+v (%v), want %d entries", i, m, err, n)
				}
				r, err := s.Messages(ctx, ReadRequest{SessionID: "c"})
				if err != nil || len(r.Messages) != n || r.Leaf != m.ActiveLeaf {
					t.Fatalf("node %d: %d messages to %s (%v), want one chain of %d to %s", i, len(r.Messages), r.Leaf, err, n, m.ActiveLeaf)
				}
			}
			for _, s := range stores {
				s.flushAllKept(ctx)
			}
			enginetest.Eventually(t, 5*time.Second, func() error {
				if m := stored(t, stores[0], "c"); m.EntryCount != uint64(n) {
					return fmt.Errorf("stored meta counts %d entries, want %d", m.EntryCount, n)
				}
				return nil
			})
		})
	}
}

// TestConcurrentDedupAcrossNodes: the same batch with the same dedup_id,
// sent at once by six callers on two nodes (a retry racing the attempt
// it retries), is stored once and every caller gets its entry ids.
func TestConcurrentDedupAcrossNodes(t *testing.T) {
	t.Parallel()
	stores := nodes(t, 2)
	ctx := context.Background()
	if _, err := stores[0].Create(ctx, CreateRequest{SessionID: "c"}); err != nil {
		t.Fatal(err)
	}
	const rounds = 10
	for round := range rounds {
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			got = map[string]int{}
		)
		for g := range 6 {
			wg.Go(func() {
				msgs := []agent.Message{agent.UserText(fmt.Sprint("a", round), 1), agent.UserText(fmt.Sprint("b", round), 1), agent.UserText(fmt.Sprint("c", round), 1)}
				r, err := stores[g%2].AppendBatch(ctx, AppendBatchRequest{SessionID: "c", Messages: msgs, DedupID: fmt.Sprint("turn", round), DeferMeta: g%3 == 0})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[fmt.Sprint(r.EntryIDs)]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if len(got) != 1 {
			t.Fatalf("round %d: callers got different entries: %v", round, got)
		}
	}
	m, err := stores[1].Meta(ctx, "c")
	if err != nil || m.EntryCount != 3*rounds {
		t.Fatalf("meta %+v (%v), want %d entries", m, err, 3*rounds)
	}
	if r, err := stores[0].Messages(ctx, ReadRequest{SessionID: "c"}); err != nil || len(r.Messages) != 3*rounds {
		t.Fatalf("%d messages (%v), want %d", len(r.Messages), err, 3*rounds)
	}
}
