package sessiontree_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// TestConcurrentAppendsToActiveLeaf: appends without parent_id from many
// writers all land, and make one chain (each goes under the entry that
// won before it), with the right count.
func TestConcurrentAppendsToActiveLeaf(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	const writers, each = 4, 8
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				m := user(fmt.Sprintf("w%d-%d", w, i))
				if _, err := f.s.Append(context.Background(), sessiontree.AppendRequest{SessionID: sid, Message: &m}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m := f.meta(t, sid)
	if m.EntryCount != writers*each {
		t.Fatalf("entry_count = %d, want %d", m.EntryCount, writers*each)
	}
	tr := f.checkTree(t, sid)
	if len(tr.Nodes) != writers*each {
		t.Fatalf("tree has %d nodes", len(tr.Nodes))
	}
	if got := f.texts(t, sid, ""); len(got) != writers*each {
		t.Fatalf("active path has %d messages, want one chain of %d", len(got), writers*each)
	}
}

// TestConcurrentBranches: writers appending to their own branches at the
// same time all land on the right branch.
func TestConcurrentBranches(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	root := f.add(t, sid, "", "root")
	const writers, each = 4, 6
	var wg sync.WaitGroup
	leaves := make([]string, writers)
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			parent := root
			for i := range each {
				m := user(fmt.Sprintf("w%d-%d", w, i))
				r, err := f.s.Append(context.Background(), sessiontree.AppendRequest{SessionID: sid, ParentID: parent, Message: &m})
				if err != nil {
					errs <- err
					return
				}
				parent = r.EntryID
			}
			leaves[w] = parent
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w, leaf := range leaves {
		want := append([]string{"root"}, texts(fmt.Sprintf("w%d-", w), each)...)
		wantTexts(t, f.texts(t, sid, leaf), want...)
	}
	if m := f.meta(t, sid); m.EntryCount != 1+writers*each {
		t.Fatalf("entry_count = %d", m.EntryCount)
	}
	f.checkTree(t, sid)
}

// rollBack rewrites the meta of sid with old, as if the writers since had
// stopped between their publish and their meta update.
func (f *fixture) rollBack(t *testing.T, sid string, old []byte) {
	t.Helper()
	kv, err := f.e.JetStream().KeyValue(ctxT(t), sessiontree.MetaBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctxT(t), sid, old); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) rawMeta(t *testing.T, sid string) []byte {
	t.Helper()
	kv, err := f.e.JetStream().KeyValue(ctxT(t), sessiontree.MetaBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctxT(t), sid)
	if err != nil {
		t.Fatal(err)
	}
	return e.Value()
}

// TestCrashBetweenPublishAndMeta: entries whose meta update never happened
// are neither lost nor break the tree; reads and appends fold them in.
func TestCrashBetweenPublishAndMeta(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	t.Run("read repairs", func(t *testing.T) {
		sid := f.create(t)
		f.chain(t, sid, "", "a", "b")
		old := f.rawMeta(t, sid)
		ids := f.chain(t, sid, "", "c", "d", "e") // a batch "interrupted" before its meta update
		f.rollBack(t, sid, old)
		wantTexts(t, f.texts(t, sid, ""), "a", "b", "c", "d", "e")
		m := f.meta(t, sid)
		if m.ActiveLeaf != ids[2] || m.EntryCount != 5 {
			t.Fatalf("repaired meta = %+v", m)
		}
		f.checkTree(t, sid)
	})

	t.Run("append repairs", func(t *testing.T) {
		sid := f.create(t)
		f.add(t, sid, "", "a")
		old := f.rawMeta(t, sid)
		lost := f.add(t, sid, "", "b")
		f.rollBack(t, sid, old)
		// The next append without parent goes under the entry the meta
		// missed: the interrupted append completes.
		c := f.add(t, sid, "", "c")
		wantTexts(t, f.texts(t, sid, c), "a", "b", "c")
		es, err := f.s.Entries(ctxT(t), sessiontree.ReadRequest{SessionID: sid})
		if err != nil {
			t.Fatal(err)
		}
		if es.Entries[2].ParentID != lost {
			t.Fatalf("c's parent = %s, want %s", es.Entries[2].ParentID, lost)
		}
		if m := f.meta(t, sid); m.EntryCount != 3 || m.ActiveLeaf != c {
			t.Fatalf("meta = %+v", m)
		}
	})

	t.Run("first entry lost from the meta", func(t *testing.T) {
		sid := f.create(t)
		old := f.rawMeta(t, sid)
		a := f.add(t, sid, "", "hello there")
		f.rollBack(t, sid, old)
		r, err := f.s.Ensure(ctxT(t), sessiontree.EnsureRequest{SessionID: sid})
		if err != nil || r.Created {
			t.Fatalf("ensure = %+v, %v", r, err)
		}
		m := f.meta(t, sid)
		if m.ActiveLeaf != a || m.EntryCount != 1 || m.Summary != "hello there" {
			t.Fatalf("meta = %+v", m)
		}
	})
}

func TestDedupID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	m := user("once")
	r1, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Message: &m, DedupID: "turn-1"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Message: &m, DedupID: "turn-1"})
	if err != nil || r2.EntryID != r1.EntryID {
		t.Fatalf("retry = %+v, %v; want %s", r2, err, r1.EntryID)
	}
	// A batch that stopped after its first entry, retried whole.
	b1, err := f.s.AppendBatch(ctxT(t), sessiontree.AppendBatchRequest{SessionID: sid, Messages: []agent.Message{user("x")}, DedupID: "turn-2"})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := f.s.AppendBatch(ctxT(t), sessiontree.AppendBatchRequest{SessionID: sid, Messages: []agent.Message{user("x"), user("y")}, DedupID: "turn-2"})
	if err != nil || len(b2.EntryIDs) != 2 || b2.EntryIDs[0] != b1.EntryIDs[0] {
		t.Fatalf("batch retry = %+v, %v", b2, err)
	}
	wantTexts(t, f.texts(t, sid, ""), "once", "x", "y")
	if m := f.meta(t, sid); m.EntryCount != 3 {
		t.Fatalf("entry_count = %d", m.EntryCount)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var sids []string
	for i := range 7 {
		r, err := f.s.Create(ctxT(t), sessiontree.CreateRequest{SessionID: fmt.Sprintf("s%d", i), DisplayName: fmt.Sprintf("n%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		sids = append(sids, r.SessionID)
	}
	f.add(t, "s2", "", "  what is\n\tthe plan?  ")
	// Newest first: s2 (just updated), then s6 … s0.
	want := []string{"s2", "s6", "s5", "s4", "s3", "s1", "s0"}
	var got []string
	cursor := ""
	pages := 0
	for {
		r, err := f.s.List(ctxT(t), sessiontree.ListRequest{Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, m := range r.Sessions {
			got = append(got, m.SessionID)
			if m.SessionID == "s2" && (m.Summary != "what is the plan?" || m.EntryCount != 1) {
				t.Fatalf("s2 = %+v", m)
			}
		}
		if r.NextCursor == "" {
			break
		}
		cursor = r.NextCursor
	}
	if strings.Join(got, ",") != strings.Join(want, ",") || pages != 3 {
		t.Fatalf("list = %v in %d pages, want %v in 3", got, pages, want)
	}
	r, err := f.s.List(ctxT(t), sessiontree.ListRequest{})
	if err != nil || len(r.Sessions) != 7 || r.NextCursor != "" {
		t.Fatalf("default page = %d sessions, cursor %q, %v", len(r.Sessions), r.NextCursor, err)
	}
}

func TestExportHTML(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r, err := f.s.Create(ctxT(t), sessiontree.CreateRequest{DisplayName: "<b>demo</b>"})
	if err != nil {
		t.Fatal(err)
	}
	sid := r.SessionID
	msgs := []agent.Message{
		{Role: agent.RoleUser, Content: []agent.Content{
			agent.Text("<script>alert(1)</script>"),
			{Type: agent.ContentImage, Mime: "image/png", Data: "iVBORw0KGgo="},
			{Type: agent.ContentImage, Mime: "text/html", Data: "PHNjcmlwdD4="},
		}},
		{Role: agent.RoleAssistant, StopReason: agent.StopFunctionCall, Model: "m1", Content: []agent.Content{
			{Type: agent.ContentThinking, Text: "hmm"},
			{Type: agent.ContentFunctionCall, ID: "call_1", FunctionID: "fs::read", Arguments: map[string]any{"path": "\"/etc/passwd\""}},
		}},
		{Role: agent.RoleFunctionResult, FunctionCallID: "call_1", FunctionID: "fs::read", IsError: true, Content: []agent.Content{agent.Text("denied")}},
	}
	if _, err := f.s.AppendBatch(ctxT(t), sessiontree.AppendBatchRequest{SessionID: sid, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	first := f.meta(t, sid).ActiveLeaf
	tail := []sessiontree.Entry{
		sessiontree.CompactionEntry("so far: <i>nothing</i>", "", 10),
		{Type: sessiontree.TypeBranchSummary, Summary: "left a branch", FromEntryID: first},
		{Type: sessiontree.TypeCustom, CustomType: "ui.pin", Data: map[string]any{"why": "</pre>"}},
	}
	if _, err := f.s.AppendBatch(ctxT(t), sessiontree.AppendBatchRequest{SessionID: sid, Entries: tail}); err != nil {
		t.Fatal(err)
	}
	out, err := f.s.ExportHTML(ctxT(t), sessiontree.ReadRequest{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	h := out.HTML
	for _, want := range []string{"<!DOCTYPE html>", "<style>", "&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;b&gt;demo&lt;/b&gt;",
		`src="data:image/png;base64,iVBORw0KGgo="`, "[image text/html not shown]", "fs::read", "(error)", "m1", "hmm",
		"so far: &lt;i&gt;nothing&lt;/i&gt;", "left a branch", "from " + first, "custom · ui.pin", "&lt;/pre&gt;"} {
		if !strings.Contains(h, want) {
			t.Errorf("export lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", "data:text/html", "<b>demo", "<i>nothing"} {
		if strings.Contains(h, bad) {
			t.Errorf("export contains %q", bad)
		}
	}
	empty := f.create(t)
	out, err = f.s.ExportHTML(ctxT(t), sessiontree.ReadRequest{SessionID: empty})
	if err != nil || !strings.Contains(out.HTML, "no entries") {
		t.Fatalf("empty export: %v", err)
	}
	_, err = f.s.ExportHTML(ctxT(t), sessiontree.ReadRequest{SessionID: "missing"})
	wantCode(t, err, wire.CodeNotFound)
}

func TestOpenEnablesDirectGet(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	js := f.e.JetStream()
	// An operator-made stream without direct get.
	cfg := sessiontree.EntryStreamConfig(1)
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	e2 := enginetest.NewEngine(t, f.ns)
	s, err := sessiontree.Open(ctx, e2)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, sessiontree.EntryStream)
	if err != nil || !st.CachedInfo().Config.AllowDirect {
		t.Fatalf("direct get not enabled: %v", err)
	}
	sid := f.create(t)
	f.chain(t, sid, "", "a", "b")
	r, err := s.Messages(ctx, sessiontree.ReadRequest{SessionID: sid})
	if err != nil || len(r.Messages) != 2 {
		t.Fatalf("messages through the second store = %+v, %v", r, err)
	}
}

func TestContextEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	f.chain(t, sid, "", "a", "b")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.s.Messages(canceled, sessiontree.ReadRequest{SessionID: sid})
	wantCode(t, err, wire.CodeCanceled)
	expired, cancel2 := context.WithTimeout(context.Background(), -time.Second)
	defer cancel2()
	_, err = f.s.Tree(expired, sessiontree.SessionRequest{SessionID: sid})
	wantCode(t, err, wire.CodeTimeout)
}

func TestNames(t *testing.T) {
	t.Parallel()
	if s, err := sessiontree.EntrySubject("s1"); err != nil || s != "iii.session.entries.s1" {
		t.Fatalf("EntrySubject = %q, %v", s, err)
	}
	if s, err := sessiontree.EntrySubject("eu.s1"); err != nil || s != "iii.session.entries.eu.s1" {
		t.Fatalf("EntrySubject(eu.s1) = %q, %v", s, err)
	}
	if _, err := sessiontree.EntrySubject("a.b.c"); err == nil {
		t.Fatal("EntrySubject accepted an id of two dots")
	}
	for _, typ := range []sessiontree.EntryType{sessiontree.TypeMessage, sessiontree.TypeCompaction, sessiontree.TypeBranchSummary, sessiontree.TypeCustom} {
		if !typ.Valid() {
			t.Errorf("%s not valid", typ)
		}
	}
	if sessiontree.EntryType("note").Valid() {
		t.Error("unknown type valid")
	}
}

// TestCorruptEntry: a message on a session's subject that is not a record
// (written around the store) is passed over: the session's reads leave it
// out and its appends go on (foreign_test.go has the cases), and the
// other sessions are left alone.
func TestCorruptEntry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	f.chain(t, sid, "", "a", "b")
	other := f.create(t)
	f.add(t, other, "", "fine")
	subj, err := sessiontree.EntrySubject(sid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.JetStream().Publish(ctxT(t), subj, []byte("\x81\xa1v\x07")); err != nil {
		t.Fatal(err)
	}
	wantTexts(t, f.texts(t, sid, ""), "a", "b")
	f.add(t, sid, "", "c")
	wantTexts(t, f.texts(t, sid, ""), "a", "b", "c")
	f.checkTree(t, sid)
	wantTexts(t, f.texts(t, other, ""), "fine")
}

// TestDedupSince: once the entry stream's duplicate window no longer
// holds a dedup id (shrunk here to 100 ms), a retry with dedup_since_ms
// still answers the first attempt's entries, completes a chain it stored
// only a prefix of, and answers an entry another writer appended after;
// without dedup_since_ms the retry stores the chain a second time.
func TestDedupSince(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	js := f.e.JetStream()
	st, err := js.Stream(ctxT(t), sessiontree.EntryStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Duplicates = 100 * time.Millisecond
	if _, err := js.UpdateStream(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	// The server stamps entries with its own clock, not the store's.
	since := time.Now().Add(-time.Minute).UnixMilli()
	batch := func(t *testing.T, sid, dedup string, sinceMs int64, msgs ...string) []string {
		t.Helper()
		ms := make([]agent.Message, len(msgs))
		for i, m := range msgs {
			ms[i] = user(m)
		}
		r, err := f.s.AppendBatch(ctxT(t), sessiontree.AppendBatchRequest{SessionID: sid, Messages: ms, DedupID: dedup, DedupSinceMs: sinceMs})
		if err != nil {
			t.Fatal(err)
		}
		return r.EntryIDs
	}
	pastWindow := func() { time.Sleep(300 * time.Millisecond) }

	t.Run("without dedup_since_ms the window is all", func(t *testing.T) {
		t.Parallel()
		sid := f.create(t)
		batch(t, sid, "t1", 0, "x", "y")
		pastWindow()
		batch(t, sid, "t1", 0, "x", "y")
		wantTexts(t, f.texts(t, sid, ""), "x", "y", "x", "y")
	})
	t.Run("whole chain stored", func(t *testing.T) {
		t.Parallel()
		sid := f.create(t)
		first := batch(t, sid, "t1", 0, "x", "y")
		pastWindow()
		again := batch(t, sid, "t1", since, "x", "y")
		if !slices.Equal(first, again) {
			t.Fatalf("retry answered %v, want %v", again, first)
		}
		wantTexts(t, f.texts(t, sid, ""), "x", "y")
		if m := f.meta(t, sid); m.EntryCount != 2 || m.ActiveLeaf != first[1] {
			t.Fatalf("meta = %+v", m)
		}
	})
	t.Run("prefix stored", func(t *testing.T) {
		t.Parallel()
		sid := f.create(t)
		first := batch(t, sid, "t1", 0, "x")
		pastWindow()
		again := batch(t, sid, "t1", since, "x", "y")
		if len(again) != 2 || again[0] != first[0] {
			t.Fatalf("retry answered %v, want %s first", again, first[0])
		}
		wantTexts(t, f.texts(t, sid, ""), "x", "y")
		f.checkTree(t, sid)
	})
	t.Run("another writer came after", func(t *testing.T) {
		t.Parallel()
		sid := f.create(t)
		first := batch(t, sid, "t1", 0, "x")
		other := f.add(t, sid, "", "other")
		pastWindow()
		again := batch(t, sid, "t1", since, "x")
		if !slices.Equal(first, again) {
			t.Fatalf("retry answered %v, want %v", again, first)
		}
		wantTexts(t, f.texts(t, sid, ""), "x", "other")
		if m := f.meta(t, sid); m.ActiveLeaf != other || m.EntryCount != 2 {
			t.Fatalf("meta = %+v, want the other writer's leaf", m)
		}
	})
	t.Run("nothing stored", func(t *testing.T) {
		t.Parallel()
		sid := f.create(t)
		f.add(t, sid, "", "a")
		ids := batch(t, sid, "t1", since, "x", "y")
		if len(ids) != 2 {
			t.Fatalf("ids = %v", ids)
		}
		wantTexts(t, f.texts(t, sid, ""), "a", "x", "y")
	})
	t.Run("single append", func(t *testing.T) {
		t.Parallel()
		sid := f.create(t)
		m := user("once")
		r1, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Message: &m, DedupID: "t1"})
		if err != nil {
			t.Fatal(err)
		}
		pastWindow()
		r2, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Message: &m, DedupID: "t1", DedupSinceMs: since})
		if err != nil || r2.EntryID != r1.EntryID {
			t.Fatalf("retry = %+v, %v; want %s", r2, err, r1.EntryID)
		}
		wantTexts(t, f.texts(t, sid, ""), "once")
	})
	t.Run("bad input", func(t *testing.T) {
		t.Parallel()
		sid := f.create(t)
		m := user("x")
		for _, req := range []sessiontree.AppendBatchRequest{
			{SessionID: sid, Messages: []agent.Message{m}, DedupSinceMs: since},
			{SessionID: sid, Messages: []agent.Message{m}, DedupID: "t1", DedupSinceMs: -1},
		} {
			_, err := f.s.AppendBatch(ctxT(t), req)
			wantCode(t, err, wire.CodeInvalidPayload)
		}
		_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Message: &m, DedupSinceMs: since})
		wantCode(t, err, wire.CodeInvalidPayload)
		wantTexts(t, f.texts(t, sid, ""))
	})
}

// TestMetaKeepsMarkup: a session's meta is stored as JSON without HTML
// escaping, as everything iii writes: a summary of markup reads as
// written with `nats kv get`.
func TestMetaKeepsMarkup(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.s.Create(ctxT(t), sessiontree.CreateRequest{SessionID: "m1", DisplayName: "<b>bold</b> & co"}); err != nil {
		t.Fatal(err)
	}
	f.add(t, "m1", "", "<div>hi</div>")
	f.s.Close() // writes a deferred meta, if any
	kv, err := f.e.JetStream().KeyValue(ctxT(t), sessiontree.MetaBucket)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(ctxT(t), "m1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"<b>bold</b> & co"`, `"<div>hi</div>"`} {
		if !strings.Contains(string(ent.Value()), want) {
			t.Fatalf("meta %s does not hold %s", ent.Value(), want)
		}
	}
}
