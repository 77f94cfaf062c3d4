package sessiontree

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// twoStores are two stores on one server, each on its own connection, as
// two processes would be.
func twoStores(t *testing.T) (a, b *Store) {
	t.Helper()
	ns := enginetest.RunServer(t)
	open := func() *Store {
		s, err := Open(context.Background(), enginetest.NewEngine(t, ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	return open(), open()
}

func appendText(t *testing.T, s *Store, sid, parent, text string) string {
	t.Helper()
	r, err := s.Append(context.Background(), AppendRequest{SessionID: sid, ParentID: parent, Message: new(agent.UserText(text, 1))})
	if err != nil {
		t.Fatal(err)
	}
	return r.EntryID
}

func parentOf(t *testing.T, s *Store, sid, id string) string {
	t.Helper()
	n, err := s.getID(context.Background(), sid, id)
	if err != nil {
		t.Fatal(err)
	}
	return n.rec.ParentID
}

// waitUncached waits until s's watch has dropped sid's cached meta.
func waitUncached(t *testing.T, s *Store, sid string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, ok := s.meta.get(sid); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the cached meta outlived another writer's write", sid)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestMetaCacheSavesReads: a session's next append starts from the meta
// its previous append wrote, with no read.
func TestMetaCacheSavesReads(t *testing.T) {
	t.Parallel()
	s := openTest(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, CreateRequest{SessionID: "c1"}); err != nil {
		t.Fatal(err)
	}
	appendText(t, s, "c1", "", "one")
	h0 := s.meta.hits.Load()
	for i := range 5 {
		appendText(t, s, "c1", "", fmt.Sprint("more", i))
	}
	if got := s.meta.hits.Load() - h0; got < 5 {
		t.Fatalf("%d of 5 appends started from the cached meta", got)
	}
	m, err := s.Meta(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if m.EntryCount != 6 || m.Summary != "one" {
		t.Fatalf("meta %+v; want 6 entries, summary %q", m, "one")
	}
	if r, err := s.Messages(ctx, ReadRequest{SessionID: "c1"}); err != nil || len(r.Messages) != 6 {
		t.Fatalf("messages %d (%v); want 6", len(r.Messages), err)
	}
}

// TestMetaCacheFollowsOtherWriters: a meta written by another process —
// another store moving the active leaf, `nats kv put` renaming the
// session — is seen by the watch, and the next append and read use it.
func TestMetaCacheFollowsOtherWriters(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t)
	ctx := context.Background()
	if _, err := a.Create(ctx, CreateRequest{SessionID: "f1"}); err != nil {
		t.Fatal(err)
	}
	a1 := appendText(t, a, "f1", "", "a1")
	appendText(t, a, "f1", "", "a2")
	if _, _, ok := a.meta.get("f1"); !ok {
		t.Fatal("the meta a wrote is not cached")
	}

	// Another process moves the active leaf back to a1.
	if _, err := b.SetActiveLeaf(ctx, SetActiveLeafRequest{SessionID: "f1", EntryID: a1}); err != nil {
		t.Fatal(err)
	}
	waitUncached(t, a, "f1")
	x := appendText(t, a, "f1", "", "x")
	if p := parentOf(t, a, "f1", x); p != a1 {
		t.Fatalf("append after another process moved the leaf went under %s; want %s", p, a1)
	}

	// A raw write of the meta, as `nats kv put` would make.
	m, err := a.Meta(ctx, "f1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.meta.get("f1"); !ok {
		t.Fatal("the meta a read is not cached")
	}
	kv, err := b.metaKV(ctx, "f1")
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(ctx, "f1")
	if err != nil {
		t.Fatal(err)
	}
	renamed := []byte(`{"session_id":"f1","display_name":"renamed","created_at":1,"updated_at":2,` +
		fmt.Sprintf(`"active_leaf":%q,"entry_count":%d,"last_seq":%d}`, m.ActiveLeaf, m.EntryCount, m.LastSeq))
	if _, err := kv.Update(ctx, "f1", renamed, ent.Revision()); err != nil {
		t.Fatal(err)
	}
	waitUncached(t, a, "f1")
	if got, err := a.Meta(ctx, "f1"); err != nil || got.DisplayName != "renamed" {
		t.Fatalf("meta after a raw write: %+v (%v)", got, err)
	}
}

// TestMetaCacheLagLosesNothing: an append that starts from a cached meta
// another process's append has passed (the watch has not told yet) loses
// the entry stream's compare-and-set, reads the meta and goes under the
// other append: the chain stays linear and the count right.
func TestMetaCacheLagLosesNothing(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t)
	ctx := context.Background()
	if _, err := a.Create(ctx, CreateRequest{SessionID: "l1"}); err != nil {
		t.Fatal(err)
	}
	appendText(t, a, "l1", "", "a1")
	stale, staleRev, ok := a.meta.get("l1")
	if !ok {
		t.Fatal("the meta a wrote is not cached")
	}
	b1 := appendText(t, b, "l1", "", "b1")
	waitUncached(t, a, "l1")
	// Put a back into the lag: the watch has delivered b's write, and the
	// cache holds the meta from before it as if it had not.
	a.meta.mu.Lock()
	a.meta.metas["l1"] = cachedMeta{m: stale, rev: staleRev}
	a.meta.seen["l1"] = staleRev
	a.meta.mu.Unlock()

	h0 := a.meta.hits.Load()
	a2 := appendText(t, a, "l1", "", "a2")
	if a.meta.hits.Load() == h0 {
		t.Fatal("the append did not start from the stale cached meta")
	}
	if p := parentOf(t, a, "l1", a2); p != b1 {
		t.Fatalf("append from a stale cached meta went under %s; want the other process's %s", p, b1)
	}
	m, err := b.Meta(ctx, "l1")
	if err != nil {
		t.Fatal(err)
	}
	if m.EntryCount != 3 || m.ActiveLeaf != a2 {
		t.Fatalf("meta %+v; want 3 entries, active leaf %s", m, a2)
	}
}

// TestMetaCacheOrder: the cache never keeps a meta older than a write it
// knows of, and after trimming what it knows it caches nothing older
// than what it forgot.
func TestMetaCacheOrder(t *testing.T) {
	t.Parallel()
	m := func(sid string) Meta { return Meta{SessionID: sid} }
	tests := []struct {
		name string
		do   func(c *metaCache)
		want bool // s1 cached
	}{
		{"put", func(c *metaCache) { c.put(m("s1"), 5) }, true},
		{"newer write seen", func(c *metaCache) { c.put(m("s1"), 5); c.saw("s1", 6) }, false},
		{"own write seen late", func(c *metaCache) { c.put(m("s1"), 5); c.saw("s1", 5) }, true},
		{"older write seen late", func(c *metaCache) { c.put(m("s1"), 5); c.saw("s1", 4) }, true},
		{"put older than seen", func(c *metaCache) { c.saw("s1", 6); c.put(m("s1"), 5) }, false},
		{"put after newer put", func(c *metaCache) { c.put(m("s1"), 7); c.put(m("s1"), 5) }, true},
		{"dropped", func(c *metaCache) { c.put(m("s1"), 5); c.drop("s1") }, false},
		{"regional", func(c *metaCache) { c.put(m("eu.s1"), 5) }, false},
		{"trimmed, then an older put", func(c *metaCache) {
			c.saw("s1", 6)
			for i := range seenLimit + 1 {
				c.saw(fmt.Sprint("k", i), uint64(10+i))
			}
			c.put(m("s1"), 9) // s1's write at 6 was forgotten: refused
		}, false},
		{"trimmed, then a newer put", func(c *metaCache) {
			for i := range seenLimit + 1 {
				c.saw(fmt.Sprint("k", i), uint64(10+i))
			}
			c.put(m("s1"), uint64(20+seenLimit))
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newMetaCache()
			c.running = true
			tt.do(c)
			sid := "s1"
			if tt.name == "regional" {
				sid = "eu.s1"
			}
			if _, _, ok := c.get(sid); ok != tt.want {
				t.Fatalf("cached %v; want %v", ok, tt.want)
			}
			if len(c.seen) > seenLimit+1 {
				t.Fatalf("seen holds %d keys", len(c.seen))
			}
		})
	}
}

// A watch that ends before the store closes (nats.go gives up on one it
// cannot resume, as after a server restart; here it is stopped as nats.go
// stops it) is started again: the cache is off meanwhile, and back after,
// caching only what is newer than the writes it may have missed. Before,
// it stayed off for the rest of the process and every append read its
// meta.
func TestMetaCacheWatchesAgain(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	kv, err := e.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "meta-rewatch-test"})
	if err != nil {
		t.Fatal(err)
	}
	c := newMetaCache()
	if err := c.start(ctx, e.Conn(), kv, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	c.mu.Lock()
	kw := c.watcher
	c.mu.Unlock()
	if err := kw.Stop(); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if c.watching() {
			return fmt.Errorf("still watching")
		}
		return nil
	})
	// Writes nobody watches.
	for i := range 3 {
		if _, err := kv.Put(ctx, fmt.Sprint("gap", i), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		if !c.watching() {
			return fmt.Errorf("not watching again")
		}
		return nil
	})
	// A meta read before the new watch began may be older than a write
	// nobody saw: not cached. One read after it is.
	c.put(Meta{SessionID: "s2"}, 2)
	if _, _, ok := c.get("s2"); ok {
		t.Fatal("a meta older than the new watch was cached")
	}
	rev, err := kv.Put(ctx, "s2", []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	c.put(Meta{SessionID: "s2"}, rev)
	if _, _, ok := c.get("s2"); !ok {
		t.Fatal("a meta newer than the new watch was not cached")
	}
	if _, err := kv.Put(ctx, "s2", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	waitUncachedIn(t, c, "s2")
}

// waitUncachedIn waits until c's watch has dropped sid's cached meta.
func waitUncachedIn(t *testing.T, c *metaCache, sid string) {
	t.Helper()
	enginetest.Eventually(t, 5*time.Second, func() error {
		if _, _, ok := c.get(sid); ok {
			return fmt.Errorf("%s: the cached meta outlived a newer write", sid)
		}
		return nil
	})
}

// TestMetaCacheBucketCreatedAgain: a meta bucket deleted and created
// again (`nats kv rm`, `nats kv add`) under a running store leaves its
// watch open but silent (resumed at a revision the new bucket has not
// reached): the store's check of the bucket notices, drops what it
// cached and watches the new bucket, so another store's rewind
// (set_active_leaf) is seen and the next append goes under it. Before,
// the store served the meta it had cached for good, and appended on the
// branch the other store had left.
func TestMetaCacheBucketCreatedAgain(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t)
	ctx := context.Background()
	// Revisions the new bucket will not reach soon, some of them of a
	// session (y) that goes on in the new bucket.
	for i := range 5 {
		if _, err := a.Create(ctx, CreateRequest{SessionID: fmt.Sprint("old", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Create(ctx, CreateRequest{SessionID: "y"}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		appendText(t, a, "y", "", fmt.Sprint("y", i))
	}
	enginetest.RecreateKV(t, a.js, MetaBucketConfig(1))
	if _, err := a.Create(ctx, CreateRequest{SessionID: "x"}); err != nil {
		t.Fatal(err)
	}
	e1 := appendText(t, a, "x", "", "one")
	appendText(t, a, "x", "", "two")
	if _, err := b.SetActiveLeaf(ctx, SetActiveLeafRequest{SessionID: "x", EntryID: e1}); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 4*metaBucketCheck, func() error {
		if _, _, ok := a.meta.get("x"); ok {
			return fmt.Errorf("the meta cached before another store's write is still served")
		}
		return nil
	})
	if m, err := a.Meta(ctx, "x"); err != nil || m.ActiveLeaf != e1 {
		t.Fatalf("meta %+v (%v); want the active leaf %s", m, err, e1)
	}
	if p := parentOf(t, a, "x", appendText(t, a, "x", "", "three")); p != e1 {
		t.Fatalf("appended under %s; want the rewound leaf %s", p, e1)
	}
	// The new bucket's metas are cached again, those of sessions the
	// old bucket had written more often too (its meta rebuilt from the
	// entries), and dropped by another store's write.
	enginetest.Eventually(t, 4*metaBucketCheck, func() error {
		if !a.meta.watching() {
			return fmt.Errorf("not watching")
		}
		return nil
	})
	appendText(t, a, "y", "", "more")
	if _, _, ok := a.meta.get("y"); !ok {
		t.Fatal("the new bucket's meta is not cached")
	}
	appendText(t, b, "y", "", "from b")
	waitUncached(t, a, "y")
}
