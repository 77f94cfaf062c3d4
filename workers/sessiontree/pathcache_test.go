package sessiontree

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/wire"
)

// TestPathCacheBounds: the path cache keeps no more than its budget
// (the least recently used paths go first, a path over the whole budget
// is not kept), drops a path after its TTL, and does not answer for a
// leaf that is not the kept path's last entry.
func TestPathCacheBounds(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	c := newPathCache()
	c.now = func() time.Time { return now }
	c.budget = 10 * (pathNodeBytes + 100)
	path := func(sid string, seq uint64, n int) []node {
		p := make([]node, n)
		for i := range p {
			p[i] = node{seq: seq - uint64(n-1-i), sid: sid, size: 100, rec: record{N: uint64(i + 1), Depth: uint64(i)}}
		}
		return p
	}
	a, b, big := path("a", 10, 4), path("b", 20, 4), path("c", 40, 11)
	leaf := func(p []node) node { return p[len(p)-1] }
	c.put(a)
	now = now.Add(time.Second)
	c.put(b)
	now = now.Add(time.Second)
	if _, ok := c.get(leaf(a)); !ok { // a is now the most recently used
		t.Fatal("a not kept")
	}
	c.put(path("d", 30, 4)) // over the budget: b goes
	if _, ok := c.get(leaf(b)); ok {
		t.Fatal("b kept over the budget")
	}
	if _, ok := c.get(leaf(a)); !ok {
		t.Fatal("a dropped before b")
	}
	c.put(big)
	if _, ok := c.get(leaf(big)); ok || c.bytes > c.budget {
		t.Fatalf("a path over the budget kept (%d bytes of %d)", c.bytes, c.budget)
	}
	other := leaf(a)
	other.rec.N++
	if _, ok := c.get(other); ok {
		t.Fatal("answered for another entry at the leaf's sequence")
	}
	c.put(a)
	now = now.Add(pathCacheTTL + time.Second)
	if _, ok := c.get(leaf(a)); ok {
		t.Fatal("kept after its TTL")
	}
	c.put(b)
	c.drop(leaf(b))
	if _, ok := c.get(leaf(b)); ok || c.bytes != 0 { // the others expired
		t.Fatalf("dropped path still kept, %d bytes", c.bytes)
	}
}

// TestPagesAcrossStores: the pages of one read served by two stores in
// turn (two replicas of the worker) are those one store serves: each
// store reads the path once and keeps it.
func TestPagesAcrossStores(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := twoStores(t)
	seedPath(t, a, "s", 400)
	const limit = 4 << 10
	whole, err := a.Entries(ctx, ReadRequest{SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	before := a.fetched.Load() + b.fetched.Load()
	var got []string
	req := EntriesRequest{SessionID: "s"}
	for page := 0; ; page++ {
		s := []*Store{a, b}[page%2]
		body, err := s.entriesPage(ctx, req, wire.JSON, limit)
		if err != nil {
			t.Fatal(err)
		}
		var r EntriesResponse
		if err := wire.JSON.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Entries {
			got = append(got, e.ID)
		}
		if !r.Truncated {
			break
		}
		req.Leaf, req.After = r.Leaf, r.Entries[len(r.Entries)-1].ID
	}
	var want []string
	for _, e := range whole.Entries {
		want = append(want, e.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages across stores: %d entries, want the %d of the path", len(got), len(want))
	}
	if reads := a.fetched.Load() + b.fetched.Load() - before; reads > 2*400+200 {
		t.Fatalf("%d entry reads, want about two paths' worth", reads)
	}
}
