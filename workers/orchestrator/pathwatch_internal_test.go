package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// The history port serves a run's transcript without asking the session
// tree once the meta watch says nobody else wrote it, and reads it again
// as soon as someone did: another writer's append, a moved active leaf.
func TestPathWatch(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	tree := sessiontree.NewWorker()
	if err := tree.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tree.Close(context.Background()) })
	paths := newPathWatch(e, slog.New(slog.DiscardHandler))
	t.Cleanup(paths.stop)
	h := newHistory(e, newPublisher(e), paths)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const sid = "pathwatch1"
	if err := h.ensure(ctx, sid); err != nil {
		t.Fatal(err)
	}
	text := func(msgs []agent.Message) string {
		s := ""
		for _, m := range msgs {
			s += m.Content[0].Text + ";"
		}
		return s
	}
	n := 0
	appendUser := func(s string) {
		t.Helper()
		n++
		msg := agent.Message{Role: agent.RoleUser, Content: []agent.Content{agent.Text(s)}, Timestamp: int64(n)}
		if err := h.Append(ctx, sid, fmt.Sprintf("r:%d:0", n), []agent.Message{msg}); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx, sid); err != nil {
			t.Fatal(err)
		}
	}
	// load loads until want comes back without a read (skipped grows).
	load := func(want string) {
		t.Helper()
		enginetest.Eventually(t, 10*time.Second, func() error {
			before := paths.skipped.Load()
			msgs, _, err := h.LoadIdentified(ctx, sid)
			if err != nil {
				return err
			}
			if got := text(msgs); got != want {
				return fmt.Errorf("transcript %q, want %q", got, want)
			}
			if paths.skipped.Load() == before {
				return fmt.Errorf("transcript %q read from the tree", want)
			}
			return nil
		})
	}

	appendUser("a")
	load("a;") // the first loads read, and start the watch
	// A known path is answered without a copy, clipped: a caller's
	// append copies it, and the path's own growth stays out of sight of
	// a slice answered before.
	first, _, err := h.LoadIdentified(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := h.LoadIdentified(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if &first[0] != &again[0] || cap(first) != len(first) {
		t.Fatalf("known path copied or not clipped (len %d, cap %d)", len(first), cap(first))
	}
	_ = append(first, agent.Message{Role: agent.RoleUser, Content: []agent.Content{agent.Text("mine")}})
	appendUser("b")
	load("a;b;") // this process's own append: still current
	if got := text(first); got != "a;" {
		t.Fatalf("an earlier answer reads %q after the path grew", got)
	}
	// This process's appends let the tree write their meta late
	// (defer_meta): the held path stays current at once, and after the
	// late write lands.
	loadNow := func(want string) {
		t.Helper()
		before := paths.skipped.Load()
		msgs, _, err := h.LoadIdentified(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		if got := text(msgs); got != want || paths.skipped.Load() == before {
			t.Fatalf("transcript %q (read from the tree: %v), want %q held", got, paths.skipped.Load() == before, want)
		}
	}
	time.Sleep(2 * sessiontree.DefaultMetaDelay) // b's meta written
	appendUser("b2")
	appendUser("b3")
	loadNow("a;b;b2;b3;") // the watch's newest write is b's: own, older
	time.Sleep(2 * sessiontree.DefaultMetaDelay)
	loadNow("a;b;b2;b3;")

	// Another writer appends: the next load reads it.
	var res sessiontree.AppendResponse
	foreign := agent.Message{Role: agent.RoleUser, Content: []agent.Content{agent.Text("c")}, Timestamp: 99}
	if err := e.Trigger(ctx, sessiontree.AppendFunction, sessiontree.AppendRequest{SessionID: sid, Message: &foreign}, &res); err != nil {
		t.Fatal(err)
	}
	load("a;b;b2;b3;c;")

	// The active leaf moves back to the first entry.
	var entries struct {
		Messages []pathEntry `json:"messages"`
	}
	if err := e.Trigger(ctx, sessiontree.MessagesFunction, map[string]string{"session_id": sid}, &entries); err != nil {
		t.Fatal(err)
	}
	if err := e.Trigger(ctx, sessiontree.SetActiveLeafFunction, sessiontree.SetActiveLeafRequest{SessionID: sid, EntryID: entries.Messages[0].EntryID}, nil); err != nil {
		t.Fatal(err)
	}
	load("a;")

	// A passivated session is not tracked any more.
	h.Forget(sid)
	paths.mu.Lock()
	_, tracked := paths.tracked[sid]
	paths.mu.Unlock()
	if tracked {
		t.Fatal("a forgotten session is still tracked")
	}
}

// Two processes take turns on one session (a session that moved between
// nodes): the first append of a process after it read the path writes the
// session's meta at once, so the other process's watch sees that someone
// else appended and reads the path again, although the tree defers the
// metas of the later appends (here for longer than the test).
func TestPathWatchSeesAnotherProcess(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	tree := sessiontree.NewWorker(sessiontree.WithMetaDelay(2 * time.Second))
	if err := tree.Start(context.Background(), enginetest.NewEngine(t, ns)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tree.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type process struct {
		h     *history
		paths *pathWatch
	}
	newProcess := func() process {
		e := enginetest.NewEngine(t, ns)
		paths := newPathWatch(e, slog.New(slog.DiscardHandler))
		t.Cleanup(paths.stop)
		return process{newHistory(e, newPublisher(e), paths), paths}
	}
	a, b := newProcess(), newProcess()
	const sid = "pathwatch2"
	if err := a.h.ensure(ctx, sid); err != nil {
		t.Fatal(err)
	}
	n := 0
	appendUser := func(p process, s string) {
		t.Helper()
		n++
		msg := agent.Message{Role: agent.RoleUser, Content: []agent.Content{agent.Text(s)}, Timestamp: int64(n)}
		if err := p.h.Append(ctx, sid, fmt.Sprintf("r:%d:0", n), []agent.Message{msg}); err != nil {
			t.Fatal(err)
		}
		if err := p.h.Flush(ctx, sid); err != nil {
			t.Fatal(err)
		}
	}
	text := func(p process) string {
		t.Helper()
		msgs, _, err := p.h.LoadIdentified(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		s := ""
		for _, m := range msgs {
			s += m.Content[0].Text + ";"
		}
		return s
	}
	// a holds the path, with appends of its own; the watch runs.
	text(a)
	appendUser(a, "a1")
	appendUser(a, "a2")
	enginetest.Eventually(t, 10*time.Second, func() error {
		before := a.paths.skipped.Load()
		if got := text(a); got != "a1;a2;" || a.paths.skipped.Load() == before {
			return fmt.Errorf("a: %q, not held yet", got)
		}
		return nil
	})
	// b reads and appends twice: its first append writes the meta.
	if got := text(b); got != "a1;a2;" {
		t.Fatalf("b reads %q", got)
	}
	appendUser(b, "b1")
	appendUser(b, "b2")
	time.Sleep(100 * time.Millisecond) // a's watch passes the write on
	if got := text(a); got != "a1;a2;b1;b2;" {
		t.Fatalf("a after b's appends: %q (a held its older path)", got)
	}
	// And back: a's first append after its read is seen by b.
	appendUser(a, "a3")
	appendUser(a, "a4")
	time.Sleep(100 * time.Millisecond)
	if got := text(b); got != "a1;a2;b1;b2;a3;a4;" {
		t.Fatalf("b after a's appends: %q", got)
	}
}
