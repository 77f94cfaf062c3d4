package orchestrator

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/workers/scripted"
)

// A model call started before its record is written (the grain's
// prestart) sends the provider request at once but emits no event and
// returns nothing until ModelRequest.Committed is closed; one whose ctx
// ends first (the write lost its compare-and-set) emits nothing at all.
func TestModelWaitsForCommitted(t *testing.T) {
	t.Parallel()
	e, ctx := eventsEngine(t)
	p, err := scripted.New()
	if err != nil {
		t.Fatal(err)
	}
	sw := scripted.NewWorker(p)
	if err := sw.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Close(context.Background()) })
	pub := newPublisher(e)
	m := model{e: e, pub: pub, coalesce: time.Millisecond}
	events := func(sid string) uint64 {
		t.Helper()
		if err := pub.Flush(ctx, sid); err != nil {
			t.Fatal(err)
		}
		st, err := e.JetStream().Stream(ctx, "III_EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter("iii.events."+sid))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects["iii.events."+sid]
	}
	req := func(sid string, committed <-chan struct{}) session.ModelRequest {
		return session.ModelRequest{SessionID: sid, RunID: "r1", Step: 2, Provider: "scripted", Model: "echo",
			Messages: []agent.Message{agent.UserText("a long enough answer to stream in several deltas", 1)}, Committed: committed}
	}

	t.Run("committed", func(t *testing.T) {
		committed := make(chan struct{})
		out := make(chan turn.Input, 1)
		go func() { out <- m.Stream(ctx, req("commit1", committed)) }()
		select {
		case in := <-out:
			t.Fatalf("the call returned %T before its record was committed", in)
		case <-time.After(300 * time.Millisecond):
		}
		if n := events("commit1"); n != 0 {
			t.Fatalf("%d events before the record was committed", n)
		}
		close(committed)
		select {
		case in := <-out:
			if _, ok := in.(turn.ModelDone); !ok {
				t.Fatalf("the call returned %#v", in)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the call did not return once committed")
		}
		if n := events("commit1"); n == 0 {
			t.Fatal("no message_update once committed")
		}
	})
	t.Run("fenced", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		out := make(chan turn.Input, 1)
		go func() { out <- m.Stream(cctx, req("commit2", make(chan struct{}))) }()
		time.Sleep(200 * time.Millisecond)
		ccancel()
		select {
		case <-out:
		case <-time.After(10 * time.Second):
			t.Fatal("the cancelled call did not return")
		}
		if n := events("commit2"); n != 0 {
			t.Fatalf("%d events of a call whose record was never written", n)
		}
	})
}
