package sessiontree

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestMessagesFitMaxPayload: session::messages answers a path whose view
// or path is larger than the server's max payload in pages that each
// fit, where before the whole answer failed (internal: the reply exceeds
// the max payload), in either codec, over the bus or in-process. The
// pages stay on the leaf the first one named while the session goes on,
// and together they are the whole view; a compacted path that fits but
// for its summarised entries is one page holding the newest of them.
func TestMessagesFitMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 16 << 10
	for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
		t.Run(codec.ContentType(), func(t *testing.T) {
			t.Parallel()
			enginetest.BusAndLocal(t, func(t *testing.T, local bool) {
				w, e := startSmallPayload(t, maxPayload, codec, local)
				testMessagesPages(t, w.Store(), e)
			})
		})
	}
}

func testMessagesPages(t *testing.T, s *Store, e *engine.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	session := func(sid string, n int) []string {
		t.Helper()
		if _, err := s.Create(ctx, CreateRequest{SessionID: sid}); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := 0; i < n; i += MaxBatchEntries {
			r, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: sid, Messages: batchOf(fmt.Sprintf("%s message %d.", sid, i), min(MaxBatchEntries, n-i))})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.EntryIDs...)
		}
		return ids
	}
	// A path whose messages are several times the max payload.
	session("long", 1000)
	// A path whose summarised entries alone outgrow it; the view is five
	// messages.
	ids := session("compacted", 1000)
	c, err := s.Append(ctx, AppendRequest{SessionID: "compacted", Entry: &Entry{Type: TypeCompaction, Summary: "so far", FirstKeptEntryID: ids[len(ids)-2], TokensBefore: 1}})
	if err != nil {
		t.Fatal(err)
	}
	appendText(t, s, "compacted", "", "after one")
	appendText(t, s, "compacted", "", "after two")

	for _, tc := range []struct {
		sid       string
		minPages  int
		maxPages  int
		whileRead func() // runs after the first page
	}{
		{sid: "long", minPages: 3, maxPages: 40, whileRead: func() { appendText(t, s, "long", "", "later") }},
		{sid: "compacted", minPages: 1, maxPages: 1},
	} {
		t.Run(tc.sid, func(t *testing.T) {
			full, err := s.Messages(ctx, ReadRequest{SessionID: tc.sid})
			if err != nil {
				t.Fatal(err)
			}
			var got []PathMessage
			req := MessagesRequest{SessionID: tc.sid}
			pages := 0
			for {
				r, err := engine.Call[MessagesResponse](ctx, e, MessagesFunction, req)
				if err != nil {
					t.Fatalf("page %d: %v", pages+1, err)
				}
				pages++
				if r.Leaf != full.Leaf {
					t.Fatalf("page %d: leaf %s, want %s", pages, r.Leaf, full.Leaf)
				}
				if r.PathOmitted+len(r.Path) != len(full.Path) || !slices.Equal(r.Path, full.Path[r.PathOmitted:]) {
					t.Fatalf("page %d: path of %d after %d omitted is not the newest of the %d steps", pages, len(r.Path), r.PathOmitted, len(full.Path))
				}
				got = append(got, r.Messages...)
				if !r.Truncated {
					break
				}
				if len(r.Messages) == 0 || pages >= tc.maxPages {
					t.Fatalf("page %d: truncated with %d messages", pages, len(r.Messages))
				}
				if pages == 1 && tc.whileRead != nil {
					tc.whileRead()
				}
				req.Leaf, req.After = r.Leaf, r.Messages[len(r.Messages)-1].EntryID
			}
			if pages < tc.minPages || pages > tc.maxPages {
				t.Fatalf("%d pages, want %d to %d", pages, tc.minPages, tc.maxPages)
			}
			if len(got) != len(full.Messages) {
				t.Fatalf("%d messages in %d pages, want %d", len(got), pages, len(full.Messages))
			}
			for i := range got {
				if got[i].EntryID != full.Messages[i].EntryID || got[i].Message.Content[0].Text != full.Messages[i].Message.Content[0].Text {
					t.Fatalf("message %d = %s %q, want %s %q", i, got[i].EntryID, got[i].Message.Content[0].Text,
						full.Messages[i].EntryID, full.Messages[i].Message.Content[0].Text)
				}
			}
			t.Logf("%d messages, %d path steps: %d pages", len(got), len(full.Path), pages)
		})
	}

	t.Run("compacted path holds the view", func(t *testing.T) {
		r, err := engine.Call[MessagesResponse](ctx, e, MessagesFunction, MessagesRequest{SessionID: "compacted"})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Messages) != 5 || r.Messages[0].EntryID != c.EntryID || r.PathOmitted == 0 || r.Truncated {
			t.Fatalf("%d messages from %s, %d path steps omitted, truncated %v; want 5 from the compaction %s, some omitted",
				len(r.Messages), r.Messages[0].EntryID, r.PathOmitted, r.Truncated, c.EntryID)
		}
		// What a compactor looks up on the path: the compaction and the
		// first kept entry.
		for _, id := range []string{c.EntryID, ids[len(ids)-2]} {
			if !slices.ContainsFunc(r.Path, func(p PathStep) bool { return p.EntryID == id }) {
				t.Fatalf("%s not on the answer's path", id)
			}
		}
	})

	for _, tc := range []struct {
		name string
		req  MessagesRequest
		code wire.Code
	}{
		{"after without leaf", MessagesRequest{SessionID: "long", After: "e1"}, wire.CodeInvalidPayload},
		{"after not an id", MessagesRequest{SessionID: "long", Leaf: "e1", After: "x"}, wire.CodeInvalidPayload},
		{"after summarised", MessagesRequest{SessionID: "compacted", Leaf: c.EntryID, After: ids[0]}, wire.CodeInvalidPayload},
		{"after of another session", MessagesRequest{SessionID: "compacted", Leaf: c.EntryID, After: "e1"}, wire.CodeInvalidPayload},
		{"after off the leaf's view", MessagesRequest{SessionID: "compacted", Leaf: ids[5], After: ids[9]}, wire.CodeInvalidPayload},
		{"unknown session", MessagesRequest{SessionID: "nope"}, wire.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := engine.Call[MessagesResponse](ctx, e, MessagesFunction, tc.req)
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != tc.code {
				t.Fatalf("error = %v, want %s", err, tc.code)
			}
		})
	}
}
