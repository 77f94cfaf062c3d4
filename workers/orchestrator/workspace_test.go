package orchestrator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// sandboxCalls records what a stand-in sandbox worker was asked (the real
// worker's own tests are in workers/sandbox; e2e/ runs both together).
type sandboxCalls struct {
	mu      sync.Mutex
	created []string // session ids
	killed  []string // session ids
	callers []string // sessions from baggage
}

func serveSandbox(t *testing.T, e *engine.Engine, c *sandboxCalls) {
	t.Helper()
	w, err := e.Worker("sandbox")
	if err != nil {
		t.Fatal(err)
	}
	type req struct {
		SessionID string `json:"session_id"`
		Network   bool   `json:"network"`
	}
	fns := []engine.Function{
		{ID: "sandbox::create", Handler: engine.Typed(func(ctx context.Context, r req) (map[string]any, error) {
			sid, _ := engine.SessionFromContext(ctx)
			c.mu.Lock()
			defer c.mu.Unlock()
			c.created = append(c.created, r.SessionID)
			c.callers = append(c.callers, sid)
			return map[string]any{"sandbox_id": "sb-" + r.SessionID, "workdir": "/sandboxes/" + r.SessionID, "isolation": "bwrap", "network": r.Network}, nil
		})},
		{ID: "sandbox::destroy", Handler: engine.Typed(func(_ context.Context, r req) (map[string]any, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.killed = append(c.killed, r.SessionID)
			return map[string]any{"destroyed": true}, nil
		})},
	}
	for _, fn := range fns {
		if err := w.Register(fn); err != nil {
			t.Fatal(err)
		}
	}
}

// A run with sandbox:true gets its sandbox at provisioning and loses it
// when it ends; a run without one never asks.
func TestRunSandboxLifecycle(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	var calls sandboxCalls
	serveSandbox(t, s.e, &calls)
	ctx := context.Background()

	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "plain", Provider: "scripted", Model: "echo",
		Messages: []agent.Message{userText("hi")}}, nil); err != nil {
		t.Fatal(err)
	}
	events(t, s.e, "plain", 20*time.Second)
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "boxed", Provider: "scripted", Model: "echo", Sandbox: true,
		Messages: []agent.Message{userText(`/call math::add {"a":1,"b":2}`)}}, nil); err != nil {
		t.Fatal(err)
	}
	evs := events(t, s.e, "boxed", 20*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
		t.Fatalf("stop reason %q: %v", last.StopReason, types(evs))
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		calls.mu.Lock()
		defer calls.mu.Unlock()
		if strings.Join(calls.created, ",") != "boxed" || strings.Join(calls.callers, ",") != "boxed" || strings.Join(calls.killed, ",") != "boxed" {
			return fmt.Errorf("created %v (callers %v), destroyed %v", calls.created, calls.callers, calls.killed)
		}
		return nil
	})
}

// A run that asks for a sandbox where no sandbox worker runs fails with a
// reason that says so, instead of running without one.
func TestRunSandboxUnavailable(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	if err := s.e.Trigger(context.Background(), "run::start", agent.RunStart{SessionID: "nobox", Provider: "scripted", Model: "echo", Sandbox: true,
		Messages: []agent.Message{userText("hi")}}, nil); err != nil {
		t.Fatal(err)
	}
	evs := events(t, s.e, "nobox", 20*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopError {
		t.Fatalf("stop reason %q: %v", last.StopReason, types(evs))
	}
	view := waitState(t, s.e, "nobox", agent.StateFailed)
	if view.Error == nil || !strings.Contains(view.Error.Message, "sandbox") {
		t.Fatalf("failure %+v", view.Error)
	}
	if s.calls.Load() != 0 {
		t.Fatal("a function ran")
	}
}
