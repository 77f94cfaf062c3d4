package sessiontree_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// t0 is the tests' clock start: 2026-01-07 10:00 UTC.
var t0 = time.Date(2026, 1, 7, 10, 0, 0, 0, time.UTC)

// fakeClock advances by one millisecond on every read, so that every
// stamp is distinct and ordered.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

type fixture struct {
	ns *server.Server
	e  *engine.Engine
	w  *sessiontree.Worker
	s  *sessiontree.Store
}

// newFixture starts a server, an engine and a started worker on a fake
// clock.
func newFixture(t testing.TB, opts ...sessiontree.Option) *fixture {
	t.Helper()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	clk := &fakeClock{t: t0}
	w := sessiontree.NewWorker(append([]sessiontree.Option{sessiontree.WithClock(clk.Now)}, opts...)...)
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

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func user(text string) agent.Message { return agent.UserText(text, 1) }

func assistant(text string) agent.Message {
	return agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(text)}, StopReason: agent.StopEnd, Timestamp: 1}
}

func (f *fixture) create(t testing.TB) string {
	t.Helper()
	r, err := f.s.Create(ctxT(t), sessiontree.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return r.SessionID
}

// add appends a user message with text under parent ("": the active leaf).
func (f *fixture) add(t testing.TB, sid, parent, text string) string {
	t.Helper()
	m := user(text)
	r, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, ParentID: parent, Message: &m})
	if err != nil {
		t.Fatalf("append %q to %s under %q: %v", text, sid, parent, err)
	}
	return r.EntryID
}

// chain appends user messages with texts in one batch.
func (f *fixture) chain(t testing.TB, sid, parent string, texts ...string) []string {
	t.Helper()
	msgs := make([]agent.Message, len(texts))
	for i, s := range texts {
		msgs[i] = user(s)
	}
	r, err := f.s.AppendBatch(ctxT(t), sessiontree.AppendBatchRequest{SessionID: sid, ParentID: parent, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	return r.EntryIDs
}

// texts is the text of each model-facing message of the path to leaf.
func (f *fixture) texts(t testing.TB, sid, leaf string) []string {
	t.Helper()
	r, err := f.s.Messages(ctxT(t), sessiontree.ReadRequest{SessionID: sid, Leaf: leaf})
	if err != nil {
		t.Fatalf("messages of %s at %q: %v", sid, leaf, err)
	}
	out := make([]string, len(r.Messages))
	for i, m := range r.Messages {
		out[i] = m.Message.Content[0].Text
	}
	return out
}

func (f *fixture) meta(t testing.TB, sid string) sessiontree.Meta {
	t.Helper()
	m, err := f.s.Meta(ctxT(t), sid)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func wantTexts(t testing.TB, got []string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("messages = %q, want %q", got, want)
	}
}

func wantCode(t testing.TB, err error, code wire.Code) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != code {
		t.Fatalf("error = %v, want code %s", err, code)
	}
}

// checkTree checks the invariants of a session's tree: unique ids, every
// parent present and older, child counts matching, the active leaf
// present.
func (f *fixture) checkTree(t testing.TB, sid string) sessiontree.TreeResponse {
	t.Helper()
	tr, err := f.s.Tree(ctxT(t), sessiontree.SessionRequest{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	children := map[string]int{}
	for _, n := range tr.Nodes {
		if seen[n.EntryID] {
			t.Fatalf("entry %s twice in the tree", n.EntryID)
		}
		if n.ParentID != "" && !seen[n.ParentID] {
			t.Fatalf("entry %s: parent %s not listed before it", n.EntryID, n.ParentID)
		}
		seen[n.EntryID] = true
		children[n.ParentID]++
	}
	for _, n := range tr.Nodes {
		if n.ChildrenCount != children[n.EntryID] {
			t.Fatalf("entry %s: children_count %d, want %d", n.EntryID, n.ChildrenCount, children[n.EntryID])
		}
	}
	if tr.ActiveLeaf != "" && !seen[tr.ActiveLeaf] {
		t.Fatalf("active leaf %s not in the tree", tr.ActiveLeaf)
	}
	return tr
}

func texts(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}
