package sessiontree

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestTreeCacheBounds: the tree cache keeps no more than its budget (the
// least recently used trees go first, a tree over the whole budget is
// not kept), drops a tree after its TTL, does not answer for a session
// made anew under the same id, and says from where to read on a tree
// whose session has grown.
func TestTreeCacheBounds(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	c := newTreeCache()
	c.now = func() time.Time { return now }
	tree := func(sid string, n int) (*treeIndex, Meta) {
		m := Meta{SessionID: sid, CreatedAt: 1, LastSeq: uint64(n)}
		x := newTreeIndex(m)
		nodes := make([]TreeNode, n)
		for i := range nodes {
			nodes[i] = TreeNode{EntryID: FormatEntryID(uint64(i + 1)), SessionID: sid}
		}
		x.add(nodes, m.LastSeq)
		return x, m
	}
	a, ma := tree("a", 4)
	b, mb := tree("b", 4)
	c.budget = 10 * a.bytes / 4
	c.put(a)
	now = now.Add(time.Second)
	c.put(b)
	now = now.Add(time.Second)
	if got, _, ok := c.get(ma); !ok || got != a { // a is now the most recently used
		t.Fatal("a not kept")
	}
	d, _ := tree("d", 4)
	c.put(d) // over the budget: b goes
	if _, _, ok := c.get(mb); ok {
		t.Fatal("b kept over the budget")
	}
	if _, _, ok := c.get(ma); !ok {
		t.Fatal("a dropped before b")
	}
	big, mbig := tree("big", 11)
	c.put(big)
	if _, _, ok := c.get(mbig); ok || c.bytes > c.budget {
		t.Fatalf("a tree over the budget kept (%d bytes of %d)", c.bytes, c.budget)
	}
	// The session has grown: read on after the kept tree's last entry.
	grown := ma
	grown.LastSeq += 3
	if _, from, ok := c.get(grown); !ok || from != ma.LastSeq+1 {
		t.Fatalf("grown session: from %d, %v; want %d", from, ok, ma.LastSeq+1)
	}
	if _, from, ok := c.get(ma); !ok || from != 0 {
		t.Fatalf("unchanged session: from %d, %v; want 0", from, ok)
	}
	// Extending a kept tree past the budget drops the others first.
	more := make([]TreeNode, 3)
	for i := range more {
		more[i] = TreeNode{EntryID: FormatEntryID(uint64(5 + i)), ParentID: "e1", SessionID: "a"}
	}
	c.extend(a, append(more, more...), 7)
	if _, _, ok := c.get(Meta{SessionID: "d", CreatedAt: 1, LastSeq: 4}); ok || len(a.nodes) != 7 || a.children["e1"] != 3 || c.bytes > c.budget {
		t.Fatalf("extended: d kept %v, %d nodes, %d children of e1, %d bytes of %d", ok, len(a.nodes), a.children["e1"], c.bytes, c.budget)
	}
	anew := ma
	anew.CreatedAt++
	if _, _, ok := c.get(anew); ok {
		t.Fatal("answered for a session made anew")
	}
	c.put(a)
	now = now.Add(treeCacheTTL + time.Second)
	if _, _, ok := c.get(ma); ok {
		t.Fatal("kept after its TTL")
	}
	c.put(b)
	c.drop(b)
	if _, _, ok := c.get(mb); ok || c.bytes != 0 {
		t.Fatalf("dropped tree still kept, %d bytes", c.bytes)
	}
}

// TestTreePagesWhileAppending: entries appended between two pages of
// session::tree (a branch under an early entry, a chain at the end) come
// on later pages, and each page's child counts are those of its read, as
// when every page read the whole session: each page is the part of the
// store's whole tree at that moment that follows the page before (the
// pages after the first extend the tree the first one read).
func TestTreePagesWhileAppending(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, e := startSmallPayload(t, 16<<10, wire.JSON, false)
	s := w.Store()
	seedPath(t, s, "s", 600)
	if _, err := s.Fork(ctx, ForkRequest{SessionID: "s", FromEntryID: "e8c", NewSessionID: "f"}); err != nil {
		t.Fatal(err)
	}
	seedMore := func(sid string, i int) {
		if _, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: sid, Messages: batchOf(fmt.Sprintf("%s more %d ", sid, i), 20)}); err != nil {
			t.Fatal(err)
		}
	}
	seedMore("f", 0)
	for _, sid := range []string{"s", "f"} {
		t.Run(sid, func(t *testing.T) {
			req := TreeRequest{SessionID: sid}
			appended := 0
			for page := 0; ; page++ {
				r, err := engine.Call[TreeResponse](ctx, e, TreeFunction, req)
				if err != nil {
					t.Fatalf("page %d: %v", page+1, err)
				}
				whole, err := s.Tree(ctx, SessionRequest{SessionID: sid})
				if err != nil {
					t.Fatal(err)
				}
				start := 0
				if req.After != "" {
					start = slices.IndexFunc(whole.Nodes, func(n TreeNode) bool { return n.EntryID == req.After }) + 1
				}
				if want := whole.Nodes[start : start+len(r.Nodes)]; !slices.Equal(r.Nodes, want) || r.ActiveLeaf != whole.ActiveLeaf {
					t.Fatalf("page %d: not the store's tree after %q", page+1, req.After)
				}
				if !r.Truncated {
					if start+len(r.Nodes) != len(whole.Nodes) || appended == 0 {
						t.Fatalf("last page ends at %d of %d nodes, %d appended", start+len(r.Nodes), len(whole.Nodes), appended)
					}
					break
				}
				req.After = r.Nodes[len(r.Nodes)-1].EntryID
				if page%2 == 0 {
					// A branch under the first own entry, then a chain
					// at the end.
					first := whole.Nodes[0].EntryID
					appendText(t, s, sid, first, fmt.Sprintf("branch %d", page))
					seedMore(sid, page)
					appended += 21
				}
			}
		})
	}
}
