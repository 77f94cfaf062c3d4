package orchestrator

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// TestFitWindowAfterAnotherCompaction: a request over the model's window
// whose session was compacted since the grain read its transcript (the
// turn_end trigger's compaction, mid-run) goes out with the transcript as
// it is now. compaction::compact answers nothing_to_compact then (the
// path is short already), and the request went out as it was, over the
// window, to fail with context_overflow.
func TestFitWindowAfterAnotherCompaction(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	tree := sessiontree.NewWorker()
	if err := tree.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tree.Close(context.Background()) })
	w, err := e.Worker("fake-compaction")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	if err := w.Register(engine.Function{ID: compactFunction, Handler: engine.Typed(func(context.Context, map[string]any) (compactResult, error) {
		calls.Add(1)
		return compactResult{Reason: "nothing_to_compact"}, nil
	})}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const sid = "fit1"
	if err := e.Trigger(ctx, "session::create", map[string]string{"session_id": sid}, nil); err != nil {
		t.Fatal(err)
	}
	stale := []agent.Message{
		agent.UserText("q1", 1),
		{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(strings.Repeat("long answer ", 2000))}, Timestamp: 2, StopReason: agent.StopEnd},
		agent.UserText("q2", 3),
	}
	ids := make([]string, len(stale))
	for i := range stale {
		var res sessiontree.AppendResponse
		if err := e.Trigger(ctx, "session::append", sessiontree.AppendRequest{SessionID: sid, Message: &stale[i]}, &res); err != nil {
			t.Fatal(err)
		}
		ids[i] = res.EntryID
	}
	summary := sessiontree.Entry{Type: sessiontree.TypeCompaction, Summary: "## Goal\nq1 was answered at length.", FirstKeptEntryID: ids[2], TokensBefore: 6000}
	if err := e.Trigger(ctx, "session::append", sessiontree.AppendRequest{SessionID: sid, Entry: &summary}, nil); err != nil {
		t.Fatal(err)
	}
	m := model{e: e, pub: newPublisher(e), history: newHistory(e, newPublisher(e), nil), logger: e.Logger()}
	preq := agent.ProviderRequest{SessionID: sid, Messages: stale}
	info := agent.Model{ID: "tiny", Provider: "scripted", ContextWindow: 4000}
	req := session.ModelRequest{SessionID: sid, RunID: "r1", Step: 3, Provider: "scripted", Model: "tiny", Messages: stale}
	if !m.fitWindow(ctx, req, &preq, info, true) {
		t.Fatalf("the request was left as it was (%d tokens over a usable %d)", requestTokens(preq), usableWindow(info.ContextWindow))
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("compaction::compact called %d times, want 1", n)
	}
	if need := requestTokens(preq); need > usableWindow(info.ContextWindow) || len(preq.Messages) != 2 {
		t.Fatalf("the request holds %d messages, %d tokens; want the summary and q2", len(preq.Messages), need)
	}
}
