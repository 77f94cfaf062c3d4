package sessiontree

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// deferredStores are two stores on one server, each on its own
// connection as two processes would be, with meta delay d.
func deferredStores(t *testing.T, d time.Duration) (a, b *Store, ns *server.Server) {
	t.Helper()
	ns = enginetest.RunServer(t)
	open := func() *Store {
		s, err := Open(context.Background(), enginetest.NewEngine(t, ns), WithMetaDelay(d))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	return open(), open(), ns
}

// appendDeferred appends a user message with text under the active leaf,
// with defer_meta.
func appendDeferred(t *testing.T, s *Store, sid, text string) string {
	t.Helper()
	r, err := s.Append(context.Background(), AppendRequest{SessionID: sid, Message: new(agent.UserText(text, 1)), DeferMeta: true})
	if err != nil {
		t.Fatal(err)
	}
	return r.EntryID
}

// stored is sid's meta as the bucket holds it.
func stored(t *testing.T, s *Store, sid string) Meta {
	t.Helper()
	kv, err := s.metaKV(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	var m Meta
	if err := json.Unmarshal(ent.Value(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// waitStored waits until the bucket holds sid's meta with count entries
// and active leaf leaf.
func waitStored(t *testing.T, s *Store, sid string, count uint64, leaf string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		m := stored(t, s, sid)
		if m.EntryCount == count && m.ActiveLeaf == leaf {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: stored meta %d entries at %q after %v; want %d at %q", sid, m.EntryCount, m.ActiveLeaf, within, count, leaf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func keptCount(s *Store) int {
	s.kmu.Lock()
	defer s.kmu.Unlock()
	return len(s.kept)
}

// TestDeferredMeta: appends with defer_meta leave the stored meta behind
// until the delay passes, while the store's own reads and appends see
// them, and another process reading or appending repairs and loses
// nothing.
func TestDeferredMeta(t *testing.T) {
	t.Parallel()
	a, b, _ := deferredStores(t, maxMetaDeferral) // the timer writes nothing in this test's time
	ctx := context.Background()
	if _, err := a.Create(ctx, CreateRequest{SessionID: "d1"}); err != nil {
		t.Fatal(err)
	}
	// The first user message fills the summary: written at once.
	first := appendDeferred(t, a, "d1", "first")
	if m := stored(t, a, "d1"); m.EntryCount != 1 || m.ActiveLeaf != first || m.Summary != "first" {
		t.Fatalf("stored meta after the first append %+v; want 1 entry at %s, summary", m, first)
	}
	var ids []string
	for i := range 3 {
		ids = append(ids, appendDeferred(t, a, "d1", fmt.Sprint("more", i)))
	}
	if m := stored(t, a, "d1"); m.EntryCount != 1 {
		t.Fatalf("stored meta after deferred appends has %d entries; want still 1", m.EntryCount)
	}
	if m, err := a.Meta(ctx, "d1"); err != nil || m.EntryCount != 4 || m.ActiveLeaf != ids[2] {
		t.Fatalf("a's meta %+v (%v); want 4 entries at %s", m, err, ids[2])
	}
	// The appends went one under the other: a's later appends started
	// from its own kept fold.
	if p := parentOf(t, a, "d1", ids[2]); p != ids[1] {
		t.Fatalf("parent of %s is %s; want %s", ids[2], p, ids[1])
	}

	// Another process sees every entry and repairs the stored meta.
	r, err := b.Messages(ctx, ReadRequest{SessionID: "d1"})
	if err != nil || len(r.Messages) != 4 {
		t.Fatalf("b reads %d messages (%v); want 4", len(r.Messages), err)
	}
	waitStored(t, a, "d1", 4, ids[2], time.Second)

	// b appends (eagerly), then a again (deferred): a's expected
	// sequence fails, it refreshes and appends under b's entry.
	bx := appendText(t, b, "d1", "", "from b")
	ax := appendDeferred(t, a, "d1", "from a")
	if p := parentOf(t, a, "d1", ax); p != bx {
		t.Fatalf("a's append after b's went under %s; want %s", p, bx)
	}
	if m, err := b.Meta(ctx, "d1"); err != nil || m.EntryCount != 6 || m.ActiveLeaf != ax {
		t.Fatalf("b's meta %+v (%v); want 6 entries at %s", m, err, ax)
	}
	// a's kept fold, written at close, changes nothing b's repair wrote.
	a.Close()
	if keptCount(a) != 0 {
		t.Fatal("a kept a fold after Close")
	}
	waitStored(t, b, "d1", 6, ax, time.Second)
}

// TestDeferredMetaWrittenAfterDelay: the timer writes a burst's meta
// once, a delay after its last append.
func TestDeferredMetaWrittenAfterDelay(t *testing.T) {
	t.Parallel()
	a, _, _ := deferredStores(t, 50*time.Millisecond)
	ctx := context.Background()
	if _, err := a.Create(ctx, CreateRequest{SessionID: "d2"}); err != nil {
		t.Fatal(err)
	}
	appendDeferred(t, a, "d2", "first")
	kv, err := a.metaKV(ctx, "d2")
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(ctx, "d2")
	if err != nil {
		t.Fatal(err)
	}
	rev := ent.Revision()
	var last string
	for i := range 5 {
		last = appendDeferred(t, a, "d2", fmt.Sprint("more", i))
	}
	waitStored(t, a, "d2", 6, last, 2*time.Second)
	ent, err = kv.Get(ctx, "d2")
	if err != nil {
		t.Fatal(err)
	}
	if ent.Revision() != rev+1 {
		t.Fatalf("the burst of 5 appends wrote the meta %d times; want once", ent.Revision()-rev)
	}
	if keptCount(a) != 0 {
		t.Fatal("the fold is still kept after its write")
	}
}

// TestDeferredMetaBusySession: a session appended to more often than the
// delay has its meta written within maxMetaDeferral all the same.
func TestDeferredMetaBusySession(t *testing.T) {
	t.Parallel()
	a, _, _ := deferredStores(t, 300*time.Millisecond)
	ctx := context.Background()
	if _, err := a.Create(ctx, CreateRequest{SessionID: "d3"}); err != nil {
		t.Fatal(err)
	}
	appendDeferred(t, a, "d3", "first")
	start := time.Now()
	for i := 0; time.Since(start) < maxMetaDeferral+500*time.Millisecond; i++ {
		appendDeferred(t, a, "d3", fmt.Sprint("more", i))
		if stored(t, a, "d3").EntryCount > 1 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no meta written in %v of appends every 50 ms", time.Since(start))
}

// TestDeferredMetaAndSetActiveLeaf: set_active_leaf after deferred
// appends carries their fold, and the leaf it sets is not moved back.
func TestDeferredMetaAndSetActiveLeaf(t *testing.T) {
	t.Parallel()
	a, _, _ := deferredStores(t, 20*time.Millisecond)
	ctx := context.Background()
	if _, err := a.Create(ctx, CreateRequest{SessionID: "d4"}); err != nil {
		t.Fatal(err)
	}
	x1 := appendDeferred(t, a, "d4", "x1")
	appendDeferred(t, a, "d4", "x2")
	appendDeferred(t, a, "d4", "x3")
	if _, err := a.SetActiveLeaf(ctx, SetActiveLeafRequest{SessionID: "d4", EntryID: x1}); err != nil {
		t.Fatal(err)
	}
	waitStored(t, a, "d4", 3, x1, time.Second)
	time.Sleep(100 * time.Millisecond) // past the delay
	if m := stored(t, a, "d4"); m.EntryCount != 3 || m.ActiveLeaf != x1 {
		t.Fatalf("stored meta %+v after the delay; want 3 entries at %s", m, x1)
	}
}

// TestDeferredMetaListed: session::list served by the store writes its
// kept folds first.
func TestDeferredMetaListed(t *testing.T) {
	t.Parallel()
	a, _, _ := deferredStores(t, maxMetaDeferral)
	ctx := context.Background()
	if _, err := a.Create(ctx, CreateRequest{SessionID: "d5"}); err != nil {
		t.Fatal(err)
	}
	appendDeferred(t, a, "d5", "x1")
	last := appendDeferred(t, a, "d5", "x2")
	r, err := a.List(ctx, ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Sessions) != 1 || r.Sessions[0].EntryCount != 2 || r.Sessions[0].ActiveLeaf != last {
		t.Fatalf("list %+v; want d5 with 2 entries at %s", r.Sessions, last)
	}
}

// TestDeferredMetaOff: with a meta delay of 0, defer_meta writes at once.
func TestDeferredMetaOff(t *testing.T) {
	t.Parallel()
	a, _, _ := deferredStores(t, 0)
	ctx := context.Background()
	if _, err := a.Create(ctx, CreateRequest{SessionID: "d6"}); err != nil {
		t.Fatal(err)
	}
	appendDeferred(t, a, "d6", "x1")
	last := appendDeferred(t, a, "d6", "x2")
	if m := stored(t, a, "d6"); m.EntryCount != 2 || m.ActiveLeaf != last {
		t.Fatalf("stored meta %+v; want 2 entries at %s", m, last)
	}
	if keptCount(a) != 0 {
		t.Fatal("a fold was kept with a meta delay of 0")
	}
}

// TestDeferredMetaConcurrentReads: reads of a session while its deferred
// appends go on see a meta that only grows (run with -race).
func TestDeferredMetaConcurrentReads(t *testing.T) {
	t.Parallel()
	a, _, _ := deferredStores(t, 20*time.Millisecond)
	ctx := context.Background()
	if _, err := a.Create(ctx, CreateRequest{SessionID: "d7"}); err != nil {
		t.Fatal(err)
	}
	appendDeferred(t, a, "d7", "first")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 40 {
			if _, err := a.Append(ctx, AppendRequest{SessionID: "d7", Message: new(agent.UserText(fmt.Sprint("m", i), 1)), DeferMeta: true}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var seen uint64
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		m, err := a.Meta(ctx, "d7")
		if err != nil {
			t.Fatal(err)
		}
		if m.EntryCount < seen {
			t.Fatalf("meta went back from %d to %d entries", seen, m.EntryCount)
		}
		seen = m.EntryCount
	}
	if m, err := a.Meta(ctx, "d7"); err != nil || m.EntryCount != 41 {
		t.Fatalf("meta %+v (%v); want 41 entries", m, err)
	}
}
