package sessiontree

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// deleteMeta deletes sid's meta as `nats kv del iii-sessions <sid>` does
// (the documented repair of a meta that does not decode) and waits until
// every store in stores has seen it.
func deleteMeta(t *testing.T, sid string, stores ...*Store) {
	t.Helper()
	kv, err := stores[0].metaKV(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(context.Background(), sid); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		waitUncached(t, s, sid)
	}
}

// TestDeletedMetaRebuilt: a session whose meta was deleted is rebuilt
// from its newest entry by the next read or append, as the docs and the
// error of a meta that does not decode promise (before, it was not_found
// until a session::ensure; a deferred meta of it was retried every 2 s
// for the life of the process; ensure answered created:true over the
// history). A session with no entry stays unknown.
func TestDeletedMetaRebuilt(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t)
	ctx := context.Background()

	for _, tc := range []struct {
		name string
		do   func(sid, first string) error
	}{
		{"get", func(sid, _ string) error { _, err := b.Meta(ctx, sid); return err }},
		{"messages", func(sid, _ string) error { _, err := b.Messages(ctx, ReadRequest{SessionID: sid}); return err }},
		{"append", func(sid, _ string) error {
			_, err := b.Append(ctx, AppendRequest{SessionID: sid, Message: new(agent.UserText("three", 1))})
			return err
		}},
		{"fork", func(sid, first string) error {
			_, err := b.Fork(ctx, ForkRequest{SessionID: sid, FromEntryID: first})
			return err
		}},
		// Before, ensure created an empty meta over the history and
		// answered created:true, which a caller reads as "nothing to
		// read, number from 1".
		{"ensure", func(sid, _ string) error {
			r, err := b.Ensure(ctx, EnsureRequest{SessionID: sid, DisplayName: "new"})
			if err == nil && r.Created {
				return errors.New("created:true for a session with history")
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := "r_" + tc.name
			if _, err := a.Create(ctx, CreateRequest{SessionID: sid}); err != nil {
				t.Fatal(err)
			}
			one := appendText(t, a, sid, "", "one")
			two := appendText(t, a, sid, "", "two")
			deleteMeta(t, sid, a, b)
			if err := tc.do(sid, one); err != nil {
				t.Fatalf("after the meta was deleted: %v", err)
			}
			m, err := a.Meta(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			want := uint64(2)
			if tc.name == "append" {
				want = 3
			} else if m.ActiveLeaf != two {
				t.Fatalf("rebuilt active leaf %s, want %s", m.ActiveLeaf, two)
			}
			if m.EntryCount != want || m.Summary == "" {
				t.Fatalf("rebuilt meta %+v, want %d entries and a summary", m, want)
			}
			if r, err := a.Messages(ctx, ReadRequest{SessionID: sid}); err != nil || len(r.Messages) != int(want) {
				t.Fatalf("%d messages (%v), want %d", len(r.Messages), err, want)
			}
		})
	}

	t.Run("no entries", func(t *testing.T) {
		if _, err := a.Create(ctx, CreateRequest{SessionID: "r_empty"}); err != nil {
			t.Fatal(err)
		}
		deleteMeta(t, "r_empty", a, b)
		_, err := b.Meta(ctx, "r_empty")
		if !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("meta of a deleted empty session: %v, want not_found", err)
		}
		// Nothing to lose: ensure creates it, and then finds it.
		for _, want := range []bool{true, false} {
			if r, err := b.Ensure(ctx, EnsureRequest{SessionID: "r_empty"}); err != nil || r.Created != want {
				t.Fatalf("ensure of a deleted empty session = %+v, %v; want created %v", r, err, want)
			}
		}
	})

	t.Run("deferred meta", func(t *testing.T) {
		if _, err := a.Create(ctx, CreateRequest{SessionID: "r_kept"}); err != nil {
			t.Fatal(err)
		}
		appendText(t, a, "r_kept", "", "one")
		last := appendDeferred(t, a, "r_kept", "two")
		deleteMeta(t, "r_kept", a, b)
		a.flushAllKept(ctx)
		if n := keptCount(a); n != 0 {
			t.Fatalf("%d deferred metas still kept after their write", n)
		}
		if m := stored(t, a, "r_kept"); m.EntryCount != 2 || m.ActiveLeaf != last {
			t.Fatalf("stored meta %+v, want 2 entries at %s", m, last)
		}
	})

	t.Run("appends in flight", func(t *testing.T) {
		sid := "r_busy"
		if _, err := a.Create(ctx, CreateRequest{SessionID: sid}); err != nil {
			t.Fatal(err)
		}
		appendText(t, a, sid, "", "first")
		var wg sync.WaitGroup
		var mu sync.Mutex
		appended := 1
		for w, s := range []*Store{a, b, a, b} {
			wg.Go(func() {
				for i := range 15 {
					m := agent.UserText(fmt.Sprintf("w%d-%d", w, i), 1)
					if _, err := s.Append(ctx, AppendRequest{SessionID: sid, Message: &m, DeferMeta: i%2 == 0}); err != nil {
						t.Errorf("append while the meta is deleted: %v", err)
						return
					}
					mu.Lock()
					appended++
					mu.Unlock()
				}
			})
		}
		time.Sleep(5 * time.Millisecond)
		kv, err := a.metaKV(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, sid); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		a.flushAllKept(ctx)
		b.flushAllKept(ctx)
		m, err := b.Meta(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		if m.EntryCount != uint64(appended) {
			t.Fatalf("meta counts %d entries, %d appended", m.EntryCount, appended)
		}
		if r, err := a.Messages(ctx, ReadRequest{SessionID: sid}); err != nil || len(r.Messages) != appended {
			t.Fatalf("%d messages on the active path (%v), want %d", len(r.Messages), err, appended)
		}
	})
}

// TestCreateOverDeletedMeta: create, fork and clone into the id of a
// session whose meta was deleted (its entries are there) answer
// conflict, as for a session whose meta is there, and the session keeps
// its history. Before, they wrote a new meta over the history: the
// next read folded the old entries into it, so a fork there read them
// as its own path while naming another session in forked_from.
func TestCreateOverDeletedMeta(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t)
	ctx := context.Background()
	if _, err := a.Create(ctx, CreateRequest{SessionID: "c_src"}); err != nil {
		t.Fatal(err)
	}
	src := appendText(t, a, "c_src", "", "source")

	for _, tc := range []struct {
		name string
		do   func(sid string) error
	}{
		{"create", func(sid string) error {
			_, err := b.Create(ctx, CreateRequest{SessionID: sid})
			return err
		}},
		{"fork", func(sid string) error {
			_, err := b.Fork(ctx, ForkRequest{SessionID: "c_src", FromEntryID: src, NewSessionID: sid})
			return err
		}},
		{"clone", func(sid string) error {
			_, err := b.Clone(ctx, CloneRequest{SessionID: "c_src", NewSessionID: sid})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := "c_" + tc.name
			if _, err := a.Create(ctx, CreateRequest{SessionID: sid}); err != nil {
				t.Fatal(err)
			}
			appendText(t, a, sid, "", "one")
			two := appendText(t, a, sid, "", "two")
			deleteMeta(t, sid, a, b)
			if err := tc.do(sid); !errors.Is(err, wire.ErrConflict) {
				t.Fatalf("%s into a session with history and no meta: %v, want conflict", tc.name, err)
			}
			m, err := a.Meta(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			if m.ForkedFrom != nil || m.EntryCount != 2 || m.ActiveLeaf != two {
				t.Fatalf("meta after the %s: %+v, want its own 2 entries at %s", tc.name, m, two)
			}
			r, err := a.Messages(ctx, ReadRequest{SessionID: sid})
			if err != nil || len(r.Messages) != 2 {
				t.Fatalf("%d messages (%v), want the session's own 2", len(r.Messages), err)
			}
		})
	}

	t.Run("fresh id", func(t *testing.T) {
		for _, sid := range []string{"c_new1", "c_new2"} {
			if _, err := b.Fork(ctx, ForkRequest{SessionID: "c_src", FromEntryID: src, NewSessionID: sid}); err != nil {
				t.Fatalf("fork into a new id: %v", err)
			}
		}
		if _, err := b.Create(ctx, CreateRequest{SessionID: "c_new3"}); err != nil {
			t.Fatalf("create of a new id: %v", err)
		}
	})
}
