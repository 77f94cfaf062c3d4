package sessiontree

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestPagesFitMaxPayload: session::entries, session::tree, session::list
// and session::export_html answer what is larger than the server's max
// payload in parts that each fit, where before the whole answer failed
// (internal: the reply exceeds the max payload), in either codec, over
// the bus or in-process. Together the parts are the whole answer of the
// store; the entries and the export stay on the leaf the first part
// named while the session goes on; an entry whose page alone is over
// the max payload is exported cut, saying so.
func TestPagesFitMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 16 << 10
	for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
		t.Run(codec.ContentType(), func(t *testing.T) {
			t.Parallel()
			enginetest.BusAndLocal(t, func(t *testing.T, local bool) {
				w, e := startSmallPayload(t, maxPayload, codec, local)
				testPages(t, w.Store(), e)
			})
		})
	}
}

func testPages(t *testing.T, s *Store, e *engine.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	session := func(sid string, n int) []string {
		t.Helper()
		if _, err := s.Create(ctx, CreateRequest{SessionID: sid, DisplayName: strings.Repeat("n", 250)}); err != nil {
			t.Fatal(err)
		}
		r, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: sid, Messages: batchOf(sid+` says "<hello>" & more, message `, n)})
		if err != nil {
			t.Fatal(err)
		}
		return r.EntryIDs
	}
	// Paths, trees and exports several times the max payload.
	ids := session("long", 300)
	// A fork: its tree and its paths go on into the history it shares.
	if _, err := s.Fork(ctx, ForkRequest{SessionID: "long", FromEntryID: ids[200], NewSessionID: "fork"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: "fork", Messages: batchOf("fork message ", 150)}); err != nil {
		t.Fatal(err)
	}
	// An entry whose html alone outgrows the max payload: its escaped
	// text is five times its size.
	session("huge", 2)
	huge := appendText(t, s, "huge", "", strings.Repeat(`"`, 6000))
	appendText(t, s, "huge", "", "after the huge one")
	// Sessions enough for a list page over the max payload.
	for i := range 60 {
		session(fmt.Sprintf("many%02d", i), 1)
	}
	// A session that fits every answer whole.
	session("short", 3)

	t.Run("entries", func(t *testing.T) {
		for _, tc := range []struct {
			sid       string
			minParts  int
			whileRead func()
		}{
			{sid: "long", minParts: 3, whileRead: func() { appendText(t, s, "long", "", "later") }},
			{sid: "fork", minParts: 3},
			{sid: "short", minParts: 1},
		} {
			full, err := s.Entries(ctx, ReadRequest{SessionID: tc.sid})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			req := EntriesRequest{SessionID: tc.sid}
			parts := 0
			for {
				r, err := engine.Call[EntriesResponse](ctx, e, EntriesFunction, req)
				if err != nil {
					t.Fatalf("%s part %d: %v", tc.sid, parts+1, err)
				}
				parts++
				if r.Leaf != full.Leaf {
					t.Fatalf("%s part %d: leaf %s, want %s", tc.sid, parts, r.Leaf, full.Leaf)
				}
				for _, en := range r.Entries {
					got = append(got, en.ID)
				}
				if !r.Truncated {
					break
				}
				if len(r.Entries) == 0 || parts > 100 {
					t.Fatalf("%s part %d: truncated with %d entries", tc.sid, parts, len(r.Entries))
				}
				if parts == 1 && tc.whileRead != nil {
					tc.whileRead()
				}
				req.Leaf, req.After = r.Leaf, r.Entries[len(r.Entries)-1].ID
			}
			want := make([]string, len(full.Entries))
			for i, en := range full.Entries {
				want[i] = en.ID
			}
			if !slices.Equal(got, want) || parts < tc.minParts {
				t.Fatalf("%s: %d entries in %d parts, want the %d of the path in at least %d", tc.sid, len(got), parts, len(want), tc.minParts)
			}
		}
	})

	t.Run("tree", func(t *testing.T) {
		for _, tc := range []struct {
			sid      string
			minParts int
		}{{"long", 3}, {"fork", 3}, {"short", 1}} {
			full, err := s.Tree(ctx, SessionRequest{SessionID: tc.sid})
			if err != nil {
				t.Fatal(err)
			}
			var got []TreeNode
			req := TreeRequest{SessionID: tc.sid}
			parts := 0
			for {
				r, err := engine.Call[TreeResponse](ctx, e, TreeFunction, req)
				if err != nil {
					t.Fatalf("%s part %d: %v", tc.sid, parts+1, err)
				}
				parts++
				if r.SessionID != tc.sid || r.ActiveLeaf != full.ActiveLeaf {
					t.Fatalf("%s part %d: session %s, active leaf %s", tc.sid, parts, r.SessionID, r.ActiveLeaf)
				}
				got = append(got, r.Nodes...)
				if !r.Truncated {
					break
				}
				if len(r.Nodes) == 0 || parts > 100 {
					t.Fatalf("%s part %d: truncated with %d nodes", tc.sid, parts, len(r.Nodes))
				}
				req.After = r.Nodes[len(r.Nodes)-1].EntryID
			}
			if !slices.Equal(got, full.Nodes) || parts < tc.minParts {
				t.Fatalf("%s: %d nodes in %d parts, want the %d of the tree in at least %d", tc.sid, len(got), parts, len(full.Nodes), tc.minParts)
			}
		}
	})

	t.Run("list", func(t *testing.T) {
		full, err := s.List(ctx, ListRequest{Limit: MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		req := ListRequest{Limit: MaxListLimit}
		parts := 0
		for {
			r, err := engine.Call[ListResponse](ctx, e, ListFunction, req)
			if err != nil {
				t.Fatalf("part %d: %v", parts+1, err)
			}
			parts++
			for _, m := range r.Sessions {
				got = append(got, m.SessionID)
			}
			if r.NextCursor == "" {
				break
			}
			if len(r.Sessions) == 0 || parts > 100 {
				t.Fatalf("part %d: a next cursor after %d sessions", parts, len(r.Sessions))
			}
			req.Cursor = r.NextCursor
		}
		var want []string
		for _, m := range full.Sessions {
			want = append(want, m.SessionID)
		}
		if !slices.Equal(got, want) || parts < 2 {
			t.Fatalf("%d sessions in %d parts, want the %d sessions in at least 2", len(got), parts, len(want))
		}
		// A limit that fits is kept.
		r, err := engine.Call[ListResponse](ctx, e, ListFunction, ListRequest{Limit: 3})
		if err != nil || len(r.Sessions) != 3 || r.NextCursor != formatCursor(full.Sessions[2]) {
			t.Fatalf("limit 3: %d sessions, cursor %q, %v", len(r.Sessions), r.NextCursor, err)
		}
	})

	t.Run("export_html", func(t *testing.T) {
		for _, tc := range []struct {
			sid       string
			minParts  int
			cut       bool
			whileRead func()
		}{
			{sid: "long", minParts: 3, whileRead: func() { appendText(t, s, "long", "", "later still") }},
			{sid: "fork", minParts: 3},
			{sid: "huge", minParts: 2, cut: true},
			{sid: "short", minParts: 1},
		} {
			full, err := s.ExportHTML(ctx, ReadRequest{SessionID: tc.sid})
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			req := ExportHTMLRequest{SessionID: tc.sid}
			parts := 0
			for {
				r, err := engine.Call[ExportHTMLResponse](ctx, e, ExportHTMLFunction, req)
				if err != nil {
					t.Fatalf("%s part %d: %v", tc.sid, parts+1, err)
				}
				parts++
				if r.Leaf != full.Leaf {
					t.Fatalf("%s part %d: leaf %s, want %s", tc.sid, parts, r.Leaf, full.Leaf)
				}
				got.WriteString(r.HTML)
				if !r.Truncated {
					if r.LastEntryID != full.Leaf {
						t.Fatalf("%s part %d: last entry %s, want the leaf %s", tc.sid, parts, r.LastEntryID, full.Leaf)
					}
					break
				}
				if r.LastEntryID == "" || r.LastEntryID == req.After || parts > 100 {
					t.Fatalf("%s part %d: truncated at %q after %q", tc.sid, parts, r.LastEntryID, req.After)
				}
				if parts == 1 && tc.whileRead != nil {
					tc.whileRead()
				}
				req.Leaf, req.After = r.Leaf, r.LastEntryID
			}
			h := got.String()
			if parts < tc.minParts {
				t.Fatalf("%s: %d parts, want at least %d", tc.sid, parts, tc.minParts)
			}
			if !tc.cut {
				if h != full.HTML {
					t.Fatalf("%s: the %d parts (%d bytes) are not the page (%d bytes)", tc.sid, parts, len(h), len(full.HTML))
				}
				continue
			}
			if !strings.HasPrefix(h, "<!DOCTYPE html>") || !strings.HasSuffix(h, "</html>\n") || strings.Count(h, "<section") != 4 ||
				!strings.Contains(h, `id="`+huge+`"`) || !strings.Contains(h, "bytes of this entry left out") || !strings.Contains(h, "after the huge one") {
				t.Fatalf("%s: the %d parts are not the page with the huge entry cut:\n%s", tc.sid, parts, h)
			}
		}
	})

	for _, tc := range []struct {
		name string
		fn   string
		req  any
		code wire.Code
	}{
		{"entries after without leaf", EntriesFunction, EntriesRequest{SessionID: "long", After: ids[0]}, wire.CodeInvalidPayload},
		{"entries after off the path", EntriesFunction, EntriesRequest{SessionID: "long", Leaf: ids[5], After: ids[9]}, wire.CodeInvalidPayload},
		{"entries after not an id", EntriesFunction, EntriesRequest{SessionID: "long", Leaf: ids[5], After: "x"}, wire.CodeInvalidPayload},
		{"entries of an unknown session", EntriesFunction, EntriesRequest{SessionID: "nope"}, wire.CodeNotFound},
		{"tree after not a node", TreeFunction, TreeRequest{SessionID: "short", After: ids[0]}, wire.CodeInvalidPayload},
		{"tree after not an id", TreeFunction, TreeRequest{SessionID: "short", After: "x"}, wire.CodeInvalidPayload},
		{"tree of an unknown session", TreeFunction, TreeRequest{SessionID: "nope"}, wire.CodeNotFound},
		{"export after without leaf", ExportHTMLFunction, ExportHTMLRequest{SessionID: "long", After: ids[0]}, wire.CodeInvalidPayload},
		{"export after off the path", ExportHTMLFunction, ExportHTMLRequest{SessionID: "long", Leaf: ids[5], After: ids[9]}, wire.CodeInvalidPayload},
		{"export of an unknown session", ExportHTMLFunction, ExportHTMLRequest{SessionID: "nope"}, wire.CodeNotFound},
		{"list cursor", ListFunction, ListRequest{Cursor: "yesterday"}, wire.CodeInvalidPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := engine.Call[map[string]any](ctx, e, tc.fn, tc.req)
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != tc.code {
				t.Fatalf("error = %v, want %s", err, tc.code)
			}
		})
	}
}

// TestCutEntry: an entry cut for export keeps whole runes, leaves its
// images out and says how many bytes it left out.
func TestCutEntry(t *testing.T) {
	t.Parallel()
	e := htmlEntry{ID: "e1", Note: "short", Blocks: []htmlBlock{
		{Kind: "text", Text: "ééééé"}, // 10 bytes
		{Kind: "image", Image: "data:image/png;base64,AAAA"},
		{Kind: "text", Text: "ok"},
	}}
	for _, tc := range []struct {
		n     int
		texts []string
		left  int
	}{
		{n: 10, texts: []string{"ééééé", "[image not shown]", "ok"}, left: 26},
		{n: 5, texts: []string{"éé…", "[image not shown]", "ok"}, left: 26 + 6},
		{n: 0, texts: []string{"…", "[image not shown]", "…"}, left: 26 + 10 + 2 + 5},
	} {
		got := cutEntry(e, tc.n)
		var texts []string
		for _, b := range got.Blocks {
			texts = append(texts, b.Text)
		}
		if !slices.Equal(texts, tc.texts) || !strings.Contains(got.Note, fmt.Sprintf("%d bytes of this entry left out", tc.left)) {
			t.Errorf("cut to %d: %q, note %q; want %q, %d bytes left out", tc.n, texts, got.Note, tc.texts, tc.left)
		}
	}
}

// startSmallPayload starts the worker on a server of its own whose max
// payload is maxPayload, its engine calling in codec, locally or over the
// bus.
func startSmallPayload(t testing.TB, maxPayload int32, codec wire.Codec, local bool) (*Worker, *engine.Engine) {
	t.Helper()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(maxPayload))
	e := enginetest.NewEngine(t, ns, engine.WithCodec(codec), engine.WithLocalCalls(local))
	w := NewWorker()
	if err := w.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return w, e
}
