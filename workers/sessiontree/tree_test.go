package sessiontree_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

func TestLinearAppendAndMessages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	wantTexts(t, f.texts(t, sid, ""))
	a := f.add(t, sid, "", "a")
	b := f.add(t, sid, "", "b")
	ids := f.chain(t, sid, "", "c", "d")
	wantTexts(t, f.texts(t, sid, ""), "a", "b", "c", "d")
	m := f.meta(t, sid)
	if m.EntryCount != 4 || m.ActiveLeaf != ids[1] || m.Summary != "a" {
		t.Fatalf("meta = %+v", m)
	}
	r, err := f.s.Messages(ctxT(t), sessiontree.ReadRequest{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	wantPath := []string{a, b, ids[0], ids[1]}
	for i, p := range r.Path {
		if p.EntryID != wantPath[i] || p.Type != sessiontree.TypeMessage || r.Messages[i].EntryID != wantPath[i] {
			t.Fatalf("path[%d] = %+v, message entry %s, want %s", i, p, r.Messages[i].EntryID, wantPath[i])
		}
	}
	if r.Leaf != ids[1] {
		t.Fatalf("leaf = %s", r.Leaf)
	}
	es, err := f.s.Entries(ctxT(t), sessiontree.ReadRequest{SessionID: sid, Leaf: b})
	if err != nil {
		t.Fatal(err)
	}
	if len(es.Entries) != 2 || es.Entries[0].ID != a || es.Entries[0].ParentID != "" || es.Entries[1].ParentID != a || es.Entries[1].Timestamp == 0 {
		t.Fatalf("entries = %+v", es.Entries)
	}
}

func TestBranchFromOlderParent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	ids := f.chain(t, sid, "", "a", "b", "c")
	d := f.add(t, sid, ids[1], "d") // a sibling of c
	wantTexts(t, f.texts(t, sid, ""), "a", "b", "d")
	wantTexts(t, f.texts(t, sid, ids[2]), "a", "b", "c")
	e := f.add(t, sid, "", "e") // under the active leaf, d
	wantTexts(t, f.texts(t, sid, e), "a", "b", "d", "e")
	root := f.add(t, sid, ids[0], "a2") // another branch near the root
	wantTexts(t, f.texts(t, sid, root), "a", "a2")
	tr := f.checkTree(t, sid)
	if len(tr.Nodes) != 6 || tr.ActiveLeaf != root {
		t.Fatalf("tree = %+v", tr)
	}
	for _, n := range tr.Nodes {
		want := map[string]int{ids[0]: 2, ids[1]: 2, d: 1}[n.EntryID]
		if n.ChildrenCount != want {
			t.Errorf("%s (%s) has %d children, want %d", n.EntryID, n.Summary, n.ChildrenCount, want)
		}
	}
	if m := f.meta(t, sid); m.EntryCount != 6 {
		t.Fatalf("entry_count = %d", m.EntryCount)
	}
}

func TestSetActiveLeaf(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	ids := f.chain(t, sid, "", "a", "b", "c")
	r, err := f.s.SetActiveLeaf(ctxT(t), sessiontree.SetActiveLeafRequest{SessionID: sid, EntryID: ids[0]})
	if err != nil || r.ActiveLeaf != ids[0] {
		t.Fatalf("set_active_leaf = %+v, %v", r, err)
	}
	wantTexts(t, f.texts(t, sid, ""), "a")
	f.add(t, sid, "", "x")
	wantTexts(t, f.texts(t, sid, ""), "a", "x")
	wantTexts(t, f.texts(t, sid, ids[2]), "a", "b", "c")
	if m := f.meta(t, sid); m.EntryCount != 4 {
		t.Fatalf("entry_count = %d", m.EntryCount)
	}
}

func TestForkAtEveryEntry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	all := []string{"a", "b", "c", "d"}
	ids := f.chain(t, sid, "", all...)
	for i, at := range ids {
		t.Run(fmt.Sprintf("at=%d", i), func(t *testing.T) {
			r, err := f.s.Fork(ctxT(t), sessiontree.ForkRequest{SessionID: sid, FromEntryID: at})
			if err != nil {
				t.Fatal(err)
			}
			fid := r.SessionID
			m := f.meta(t, fid)
			if m.ForkedFrom == nil || m.ForkedFrom.SessionID != sid || m.ForkedFrom.EntryID != at || m.ActiveLeaf != at || m.EntryCount != 0 || m.Summary != "a" {
				t.Fatalf("fork meta = %+v", m)
			}
			wantTexts(t, f.texts(t, fid, ""), all[:i+1]...)
			x := f.add(t, fid, "", "x")
			wantTexts(t, f.texts(t, fid, ""), append(append([]string{}, all[:i+1]...), "x")...)
			// A branch off an inherited entry at or before the fork point.
			y := f.add(t, fid, ids[0], "y")
			wantTexts(t, f.texts(t, fid, y), "a", "y")
			wantTexts(t, f.texts(t, fid, x), append(append([]string{}, all[:i+1]...), "x")...)
			// The original does not see the fork's entries.
			wantTexts(t, f.texts(t, sid, ""), all...)
			_, err = f.s.Messages(ctxT(t), sessiontree.ReadRequest{SessionID: sid, Leaf: x})
			wantCode(t, err, wire.CodeNotFound)
			// Entries after the fork point are not in the fork's history.
			if i+1 < len(ids) {
				_, err = f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: fid, ParentID: ids[i+1], Message: ptr(user("z"))})
				wantCode(t, err, wire.CodeNotFound)
				_, err = f.s.SetActiveLeaf(ctxT(t), sessiontree.SetActiveLeafRequest{SessionID: fid, EntryID: ids[len(ids)-1]})
				wantCode(t, err, wire.CodeNotFound)
			}
			tr := f.checkTree(t, fid)
			if len(tr.Nodes) != i+1+2 {
				t.Fatalf("fork tree has %d nodes, want %d", len(tr.Nodes), i+3)
			}
			for j, n := range tr.Nodes[:i+1] {
				if n.EntryID != ids[j] || n.SessionID != sid {
					t.Fatalf("inherited node %d = %+v", j, n)
				}
			}
			if m := f.meta(t, fid); m.EntryCount != 2 || m.ActiveLeaf != y {
				t.Fatalf("fork meta after appends = %+v", m)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestForkOfFork(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s0 := f.create(t)
	ids := f.chain(t, s0, "", "a", "b", "c", "d")
	r1, err := f.s.Fork(ctxT(t), sessiontree.ForkRequest{SessionID: s0, FromEntryID: ids[2], DisplayName: "first fork"})
	if err != nil {
		t.Fatal(err)
	}
	s1 := r1.SessionID
	own1 := f.chain(t, s1, "", "x", "y")
	wantTexts(t, f.texts(t, s1, ""), "a", "b", "c", "x", "y")

	// Fork s1 at its own entry x.
	r2, err := f.s.Fork(ctxT(t), sessiontree.ForkRequest{SessionID: s1, FromEntryID: own1[0], NewSessionID: "fork-2"})
	if err != nil || r2.SessionID != "fork-2" {
		t.Fatalf("fork of fork = %+v, %v", r2, err)
	}
	wantTexts(t, f.texts(t, "fork-2", ""), "a", "b", "c", "x")
	f.add(t, "fork-2", "", "p")
	wantTexts(t, f.texts(t, "fork-2", ""), "a", "b", "c", "x", "p")
	// Through two forks, back to s0's entries before the first fork
	// point.
	q := f.add(t, "fork-2", ids[1], "q")
	wantTexts(t, f.texts(t, "fork-2", q), "a", "b", "q")
	// y (after x in s1) and d (after c in s0) are not in fork-2's history.
	for _, id := range []string{own1[1], ids[3]} {
		_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: "fork-2", ParentID: id, Message: ptr(user("z"))})
		wantCode(t, err, wire.CodeNotFound)
	}

	// Fork s1 at an inherited entry: b, stored in s0.
	r3, err := f.s.Fork(ctxT(t), sessiontree.ForkRequest{SessionID: s1, FromEntryID: ids[1]})
	if err != nil {
		t.Fatal(err)
	}
	wantTexts(t, f.texts(t, r3.SessionID, ""), "a", "b")
	if m := f.meta(t, r3.SessionID); m.DisplayName != "first fork" || m.ForkedFrom.SessionID != s1 {
		t.Fatalf("meta = %+v", m)
	}
	// The originals are untouched.
	wantTexts(t, f.texts(t, s0, ""), "a", "b", "c", "d")
	wantTexts(t, f.texts(t, s1, ""), "a", "b", "c", "x", "y")
	tr := f.checkTree(t, "fork-2")
	if len(tr.Nodes) != 6 { // a b c x (inherited) + p q
		t.Fatalf("fork-2 tree has %d nodes", len(tr.Nodes))
	}
}

func TestClone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	ids := f.chain(t, sid, "", "a", "b", "c")
	c1, err := f.s.Clone(ctxT(t), sessiontree.CloneRequest{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	wantTexts(t, f.texts(t, c1.SessionID, ""), "a", "b", "c")
	c2, err := f.s.Clone(ctxT(t), sessiontree.CloneRequest{SessionID: sid, Leaf: ids[0]})
	if err != nil {
		t.Fatal(err)
	}
	wantTexts(t, f.texts(t, c2.SessionID, ""), "a")
	f.add(t, c1.SessionID, "", "d")
	wantTexts(t, f.texts(t, c1.SessionID, ""), "a", "b", "c", "d")
	wantTexts(t, f.texts(t, sid, ""), "a", "b", "c")

	empty := f.create(t)
	c3, err := f.s.Clone(ctxT(t), sessiontree.CloneRequest{SessionID: empty})
	if err != nil {
		t.Fatal(err)
	}
	m := f.meta(t, c3.SessionID)
	if m.ForkedFrom == nil || m.ForkedFrom.SessionID != empty || m.ForkedFrom.EntryID != "" || m.ActiveLeaf != "" {
		t.Fatalf("clone of an empty session = %+v", m)
	}
	wantTexts(t, f.texts(t, c3.SessionID, ""))
	f.add(t, c3.SessionID, "", "first")
	wantTexts(t, f.texts(t, c3.SessionID, ""), "first")
}

func TestCompactionAndSummaries(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	ids := f.chain(t, sid, "", "m1", "m2", "m3", "m4", "m5")
	appendEntry := func(parent string, e sessiontree.Entry) string {
		t.Helper()
		r, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, ParentID: parent, Entry: &e})
		if err != nil {
			t.Fatal(err)
		}
		return r.EntryID
	}
	c1 := appendEntry("", sessiontree.CompactionEntry("S1", ids[3], 1234))
	f.add(t, sid, "", "m6")
	wantTexts(t, f.texts(t, sid, ""), sessiontree.CompactionPrefix+"S1", "m4", "m5", "m6")
	r, err := f.s.Messages(ctxT(t), sessiontree.ReadRequest{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	if r.Messages[0].EntryID != c1 || r.Messages[0].Message.Role != agent.RoleUser || len(r.Path) != 7 || r.Path[5].Type != sessiontree.TypeCompaction {
		t.Fatalf("messages = %+v", r)
	}
	// A custom entry is never model-facing; a second compaction wins.
	appendEntry("", sessiontree.Entry{Type: sessiontree.TypeCustom, CustomType: "ui.bookmark", Data: map[string]any{"n": 1}})
	appendEntry("", sessiontree.CompactionEntry("S2", "", 99))
	f.add(t, sid, "", "m7")
	wantTexts(t, f.texts(t, sid, ""), sessiontree.CompactionPrefix+"S2", "m7")
	// The path before the compactions still reads in full.
	wantTexts(t, f.texts(t, sid, ids[4]), "m1", "m2", "m3", "m4", "m5")

	// A branch summary on a branch off m2.
	bs := appendEntry(ids[1], sessiontree.Entry{Type: sessiontree.TypeBranchSummary, Summary: "tried X", FromEntryID: c1})
	f.add(t, sid, "", "m8")
	wantTexts(t, f.texts(t, sid, ""), "m1", "m2", sessiontree.BranchSummaryPrefix+"tried X", "m8")

	// A compaction whose first kept entry is not on its path.
	e := sessiontree.CompactionEntry("bad", ids[3], 0)
	_, err = f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, ParentID: bs, Entry: &e})
	wantCode(t, err, wire.CodeInvalidPayload)
	// Compactions appear in the raw path and the tree, never in messages.
	es, err := f.s.Entries(ctxT(t), sessiontree.ReadRequest{SessionID: sid, Leaf: c1})
	if err != nil {
		t.Fatal(err)
	}
	last := es.Entries[len(es.Entries)-1]
	if last.Type != sessiontree.TypeCompaction || last.Summary != "S1" || last.FirstKeptEntryID != ids[3] || last.TokensBefore != 1234 {
		t.Fatalf("compaction entry = %+v", last)
	}
	tr := f.checkTree(t, sid)
	var kinds []string
	for _, n := range tr.Nodes {
		kinds = append(kinds, n.Summary)
	}
	joined := strings.Join(kinds, "|")
	for _, want := range []string{"compaction: S1", "custom: ui.bookmark", "branch summary: tried X", "user: m8"} {
		if !strings.Contains(joined, want) {
			t.Errorf("tree summaries %q lack %q", joined, want)
		}
	}
}
