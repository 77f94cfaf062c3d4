package sessiontree_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// newRegionFixture is newFixture on an engine of region "eu": the worker
// creates the primary stream and bucket and the "eu" copies (a standalone
// server ignores their placement).
func newRegionFixture(t testing.TB) *fixture {
	t.Helper()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns, engine.WithRegion("eu"))
	clk := &fakeClock{t: t0}
	w := sessiontree.NewWorker(sessiontree.WithClock(clk.Now))
	if err := w.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return &fixture{ns: ns, e: e, w: w, s: w.Store()}
}

// home is where a session's data lives, and where it must not.
type home struct {
	stream, bucket           string // its copies
	otherStream, otherBucket string // the other copies
}

var (
	primary = home{"III_SESSION_ENTRIES", "iii-sessions", "III_SESSION_ENTRIES_AT_eu", "iii-sessions-at-eu"}
	euHome  = home{"III_SESSION_ENTRIES_AT_eu", "iii-sessions-at-eu", "III_SESSION_ENTRIES", "iii-sessions"}
)

// subjectMsgs counts the messages of stream on subject.
func subjectMsgs(t testing.TB, js jetstream.JetStream, stream, subject string) uint64 {
	t.Helper()
	st, err := js.Stream(ctxT(t), stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctxT(t), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// hasKey reports whether bucket holds key.
func hasKey(t testing.TB, js jetstream.JetStream, bucket, key string) bool {
	t.Helper()
	kv, err := js.KeyValue(ctxT(t), bucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	_, err = kv.Get(ctxT(t), key)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// checkHome checks that session sid's entries (n of them) and meta are in
// h's copies and not in the others.
func checkHome(t testing.TB, js jetstream.JetStream, sid string, n uint64, h home) {
	t.Helper()
	subj, err := sessiontree.EntrySubject(sid)
	if err != nil {
		t.Fatal(err)
	}
	if got := subjectMsgs(t, js, h.stream, subj); got != n {
		t.Errorf("%s holds %d entries of %s, want %d", h.stream, got, sid, n)
	}
	if got := subjectMsgs(t, js, h.otherStream, subj); got != 0 {
		t.Errorf("%s holds %d entries of %s, want none", h.otherStream, got, sid)
	}
	if !hasKey(t, js, h.bucket, sid) {
		t.Errorf("%s has no meta of %s", h.bucket, sid)
	}
	if hasKey(t, js, h.otherBucket, sid) {
		t.Errorf("%s has a meta of %s", h.otherBucket, sid)
	}
}

// TestSessionHomes: a session "eu.s1" lives in the eu copies of the stream
// and the bucket, a plain "s2" in the primary ones, side by side with the
// same entry ids (each copy numbers its own entries); everything reads
// back from the right copy.
func TestSessionHomes(t *testing.T) {
	t.Parallel()
	f := newRegionFixture(t)
	ctx := ctxT(t)
	js := f.e.JetStream()
	for name, subject := range map[string]string{
		"III_SESSION_ENTRIES":       "iii.session.entries.*",
		"III_SESSION_ENTRIES_AT_eu": "iii.session.entries.eu.*",
	} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := st.CachedInfo().Config; !slices.Equal(cfg.Subjects, []string{subject}) || !cfg.AllowDirect {
			t.Errorf("%s: subjects %v, direct get %v", name, cfg.Subjects, cfg.AllowDirect)
		}
	}

	tests := []struct {
		sid  string
		home home
	}{
		{"eu.s1", euHome},
		{"s2", primary},
	}
	for _, tt := range tests {
		// Created over the bus: the function's validation takes the id.
		r, err := engine.Call[sessiontree.CreateResponse](ctx, f.e, sessiontree.CreateFunction, sessiontree.CreateRequest{SessionID: tt.sid, DisplayName: tt.sid})
		if err != nil || r.SessionID != tt.sid {
			t.Fatalf("create %s: %+v, %v", tt.sid, r, err)
		}
	}
	// Interleaved, so that both copies number their entries e1, e2, ...
	ids := map[string][]string{}
	for _, word := range []string{"a", "b"} {
		for _, tt := range tests {
			ids[tt.sid] = append(ids[tt.sid], f.add(t, tt.sid, "", tt.sid+":"+word))
		}
	}
	if !slices.Equal(ids["eu.s1"], ids["s2"]) {
		t.Fatalf("entry ids %v and %v: each copy should number its own", ids["eu.s1"], ids["s2"])
	}
	for _, tt := range tests {
		t.Run(tt.sid, func(t *testing.T) {
			sid := tt.sid
			// A branch under the first entry, then back to the main line.
			alt := f.add(t, sid, ids[sid][0], sid+":alt")
			wantTexts(t, f.texts(t, sid, ""), sid+":a", sid+":alt")
			wantTexts(t, f.texts(t, sid, ids[sid][1]), sid+":a", sid+":b")
			m, err := engine.Call[sessiontree.Meta](ctx, f.e, sessiontree.GetFunction, sessiontree.SessionRequest{SessionID: sid})
			if err != nil || m.SessionID != sid || m.EntryCount != 3 || m.ActiveLeaf != alt || m.Summary != sid+":a" {
				t.Fatalf("get %s = %+v, %v", sid, m, err)
			}
			if _, err := f.s.SetActiveLeaf(ctx, sessiontree.SetActiveLeafRequest{SessionID: sid, EntryID: ids[sid][1]}); err != nil {
				t.Fatal(err)
			}
			msgs, err := engine.Call[sessiontree.MessagesResponse](ctx, f.e, sessiontree.MessagesFunction, sessiontree.ReadRequest{SessionID: sid})
			if err != nil || len(msgs.Messages) != 2 || msgs.Messages[1].Message.Content[0].Text != sid+":b" {
				t.Fatalf("messages of %s = %+v, %v", sid, msgs, err)
			}
			tr := f.checkTree(t, sid)
			if len(tr.Nodes) != 3 {
				t.Errorf("tree of %s has %d nodes, want 3", sid, len(tr.Nodes))
			}
			checkHome(t, js, sid, 3, tt.home)

			// A fork (default id) stays home and shares the history.
			fk, err := f.s.Fork(ctx, sessiontree.ForkRequest{SessionID: sid, FromEntryID: ids[sid][0]})
			if err != nil {
				t.Fatal(err)
			}
			if region, _, ok := strings.Cut(fk.SessionID, "."); ok != (tt.home == euHome) || ok && region != "eu" {
				t.Errorf("fork of %s is %s, want a session of its home", sid, fk.SessionID)
			}
			f.add(t, fk.SessionID, "", "forked")
			wantTexts(t, f.texts(t, fk.SessionID, ""), sid+":a", "forked")
			checkHome(t, js, fk.SessionID, 1, tt.home)
			cl, err := f.s.Clone(ctx, sessiontree.CloneRequest{SessionID: sid, NewSessionID: strings.Replace(sid, "s", "c", 1)})
			if err != nil {
				t.Fatal(err)
			}
			wantTexts(t, f.texts(t, cl.SessionID, ""), sid+":a", sid+":b")
		})
	}

	// session::list pages through both copies.
	var listed []string
	cursor := ""
	for {
		page, err := f.s.List(ctx, sessiontree.ListRequest{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.Sessions {
			listed = append(listed, m.SessionID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(listed) != 6 || !slices.Contains(listed, "eu.s1") || !slices.Contains(listed, "s2") || !slices.Contains(listed, "eu.c1") || !slices.Contains(listed, "c2") {
		t.Errorf("listed %q, want both sessions, their forks and clones", listed)
	}

	// A node without a region serves the eu sessions too.
	other, err := sessiontree.Open(ctx, enginetest.NewEngine(t, f.ns))
	if err != nil {
		t.Fatal(err)
	}
	r, err := other.Messages(ctx, sessiontree.ReadRequest{SessionID: "eu.s1"})
	if err != nil || len(r.Messages) != 2 || r.Messages[0].Message.Content[0].Text != "eu.s1:a" {
		t.Fatalf("eu.s1 through a node without a region: %+v, %v", r, err)
	}
}

// TestUnknownRegion: a session homed in a region that has no copies is
// not_found (wrapping engine.ErrUnknownRegion), on every call, and
// nothing is written anywhere.
func TestUnknownRegion(t *testing.T) {
	t.Parallel()
	f := newRegionFixture(t)
	ctx := ctxT(t)
	sid := f.create(t)
	first := f.add(t, sid, "", "a")
	before := streamMsgs(t, f.ns)
	msg := user("x")
	tests := []struct {
		name string
		call func() error
	}{
		{"create", func() error {
			_, err := f.s.Create(ctx, sessiontree.CreateRequest{SessionID: "zz.s3"})
			return err
		}},
		{"ensure", func() error {
			_, err := f.s.Ensure(ctx, sessiontree.EnsureRequest{SessionID: "zz.s3"})
			return err
		}},
		{"append", func() error {
			_, err := f.s.Append(ctx, sessiontree.AppendRequest{SessionID: "zz.s3", Message: &msg})
			return err
		}},
		{"append_batch with a parent", func() error {
			_, err := f.s.AppendBatch(ctx, sessiontree.AppendBatchRequest{SessionID: "zz.s3", ParentID: first, Messages: []agent.Message{msg}})
			return err
		}},
		{"get", func() error {
			_, err := f.s.Meta(ctx, "zz.s3")
			return err
		}},
		{"messages", func() error {
			_, err := f.s.Messages(ctx, sessiontree.ReadRequest{SessionID: "zz.s3"})
			return err
		}},
		{"tree", func() error {
			_, err := f.s.Tree(ctx, sessiontree.SessionRequest{SessionID: "zz.s3"})
			return err
		}},
		{"fork", func() error {
			_, err := f.s.Fork(ctx, sessiontree.ForkRequest{SessionID: "zz.s3", FromEntryID: first})
			return err
		}},
		{"set_active_leaf", func() error {
			_, err := f.s.SetActiveLeaf(ctx, sessiontree.SetActiveLeafRequest{SessionID: "zz.s3", EntryID: first})
			return err
		}},
		{"append over the bus", func() error {
			_, err := engine.Call[sessiontree.AppendResponse](ctx, f.e, sessiontree.AppendFunction, sessiontree.AppendRequest{SessionID: "zz.s3", Message: &msg})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			wantCode(t, err, wire.CodeNotFound)
			if !strings.HasSuffix(tt.name, "over the bus") && !errors.Is(err, engine.ErrUnknownRegion) {
				t.Errorf("err = %v, want it to wrap engine.ErrUnknownRegion", err)
			}
		})
	}
	if after := streamMsgs(t, f.ns); !maps.Equal(after, before) {
		t.Errorf("streams changed: %v → %v", before, after)
	}
	wantTexts(t, f.texts(t, sid, ""), "a")
}

// streamMsgs is the message count of every stream on ns (a bucket is a
// stream "KV_<bucket>"), which also shows any stream created.
func streamMsgs(t testing.TB, ns *server.Server) map[string]uint64 {
	t.Helper()
	js := enginetest.NewEngine(t, ns).JetStream()
	out := map[string]uint64{}
	infos := js.ListStreams(ctxT(t))
	for si := range infos.Info() {
		out[si.Config.Name] = si.State.Msgs
	}
	if err := infos.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOpenNarrowsAnOldStream: a primary stream of an older version (">"
// subjects, no direct get) is narrowed and given direct get, and the
// region's copy is made beside it.
func TestOpenNarrowsAnOldStream(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ctx := ctxT(t)
	old := sessiontree.EntryStreamConfig(1)
	old.Subjects = []string{sessiontree.EntrySubjectPrefix + ">"}
	old.AllowDirect = false
	if _, err := enginetest.NewEngine(t, ns).JetStream().CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	e := enginetest.NewEngine(t, ns, engine.WithRegion("eu"))
	s, err := sessiontree.Open(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.JetStream().Stream(ctx, sessiontree.EntryStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; !slices.Equal(cfg.Subjects, []string{"iii.session.entries.*"}) || !cfg.AllowDirect {
		t.Fatalf("primary stream: subjects %v, direct get %v", cfg.Subjects, cfg.AllowDirect)
	}
	for _, sid := range []string{"eu.s1", "s2"} {
		if _, err := s.Create(ctx, sessiontree.CreateRequest{SessionID: sid}); err != nil {
			t.Fatal(err)
		}
		m := user(sid)
		if _, err := s.Append(ctx, sessiontree.AppendRequest{SessionID: sid, Message: &m}); err != nil {
			t.Fatal(err)
		}
		r, err := s.Messages(ctx, sessiontree.ReadRequest{SessionID: sid})
		if err != nil || len(r.Messages) != 1 || r.Messages[0].Message.Content[0].Text != sid {
			t.Fatalf("messages of %s = %+v, %v", sid, r, err)
		}
	}
}
