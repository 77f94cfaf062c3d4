package sessiontree

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestForeignMessagesPassedOver: messages another client publishes on a
// session's entry subject (garbage, msgpack that is no entry) are passed
// over: appends go on under the active leaf, reads and the tree leave
// them out, and naming one as an entry is not_found.
func TestForeignMessagesPassedOver(t *testing.T) {
	t.Parallel()
	notEntryMsgpack, err := msgpack.Marshal(map[string]any{"v": 99, "hello": "world"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		payload []byte
	}{
		{"garbage", []byte("garbage")},
		{"empty", nil},
		{"msgpack that is no entry", notEntryMsgpack},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a, b, _ := deferredStores(t, maxMetaDeferral)
			ctx := context.Background()
			const sid = "foreign1"
			if _, err := a.Create(ctx, CreateRequest{SessionID: sid}); err != nil {
				t.Fatal(err)
			}
			x1 := appendText(t, a, sid, "", "x1")
			foreign := func() uint64 {
				t.Helper()
				ack, err := a.js.Publish(ctx, EntrySubjectPrefix+sid, c.payload)
				if err != nil {
					t.Fatal(err)
				}
				return ack.Sequence
			}
			f1 := foreign()
			// The store that cached the meta: its append's expected
			// sequence fails, and it passes the message over.
			x2 := appendText(t, a, sid, "", "x2")
			if p := parentOf(t, a, sid, x2); p != x1 {
				t.Fatalf("x2 went under %s; want %s", p, x1)
			}
			// a appends x3 leaving its meta unwritten (as a writer that
			// stopped before its meta would), then a foreign message
			// comes: another store folds x3 in and passes the message
			// over.
			x3 := appendDeferred(t, a, sid, "x3")
			foreign()
			x4 := appendText(t, b, sid, "", "x4")
			if p := parentOf(t, b, sid, x4); p != x3 {
				t.Fatalf("x4 went under %s; want %s", p, x3)
			}
			for _, s := range []*Store{a, b} {
				r, err := s.Messages(ctx, ReadRequest{SessionID: sid})
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, e := range r.Messages {
					got = append(got, e.Message.Content[0].Text)
				}
				if len(got) != 4 || got[0] != "x1" || got[3] != "x4" {
					t.Fatalf("messages %q; want x1…x4", got)
				}
				tr, err := s.Tree(ctx, SessionRequest{SessionID: sid})
				if err != nil {
					t.Fatal(err)
				}
				if len(tr.Nodes) != 4 {
					t.Fatalf("tree of %d nodes; want 4", len(tr.Nodes))
				}
				if mm, err := s.Meta(ctx, sid); err != nil || mm.EntryCount != 4 || mm.ActiveLeaf != x4 {
					t.Fatalf("meta %+v (%v); want 4 entries at %s", mm, err, x4)
				}
			}
			// A deduplicated append looked up among the entries stored
			// since a time before the foreign messages: stored once.
			since := time.Now().Add(-time.Minute).UnixMilli()
			req := AppendRequest{SessionID: sid, Message: new(agent.UserText("once", 1)), DedupID: "d1", DedupSinceMs: since}
			first, err := a.Append(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			again, err := b.Append(ctx, req)
			if err != nil || again.EntryID != first.EntryID {
				t.Fatalf("the retry answered %+v, %v; want %s", again, err, first.EntryID)
			}
			// Naming the foreign message as an entry.
			_, err = a.Append(ctx, AppendRequest{SessionID: sid, ParentID: FormatEntryID(f1), Message: new(agent.UserText("under it", 1))})
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.CodeNotFound {
				t.Fatalf("append under the foreign message: %v; want not_found", err)
			}
			if _, err := a.SetActiveLeaf(ctx, SetActiveLeafRequest{SessionID: sid, EntryID: FormatEntryID(f1)}); !errors.As(err, &we) || we.Code != wire.CodeNotFound {
				t.Fatalf("set_active_leaf to the foreign message: %v; want not_found", err)
			}
		})
	}
}
