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
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/scripted"
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

// serveDirectory stands in for the directory worker: an index and one
// skill.
func serveDirectory(t *testing.T, e *engine.Engine) {
	t.Helper()
	w, err := e.Worker("directory")
	if err != nil {
		t.Fatal(err)
	}
	type getReq struct {
		ID string `json:"id"`
	}
	fns := []engine.Function{
		{ID: "directory::skills::index", Handler: engine.Typed(func(context.Context, map[string]any) (map[string]any, error) {
			return map[string]any{"markdown": "- [Add](iii://tools/math::add): adds two numbers"}, nil
		})},
		{ID: "directory::skills::get", Handler: engine.Typed(func(_ context.Context, r getReq) (map[string]any, error) {
			if r.ID != "tools/math::add" {
				return nil, wire.Errorf(wire.CodeNotFound, "no skill %q", r.ID)
			}
			return map[string]any{"id": r.ID, "link": "iii://" + r.ID, "title": "Adding", "body": "Call math::add with a and b."}, nil
		})},
	}
	for _, fn := range fns {
		if err := w.Register(fn); err != nil {
			t.Fatal(err)
		}
	}
}

// The model receives the assembled prompt: preamble, mode, workspace,
// skills index and the run's skills; a prompt the caller brings is sent
// verbatim; an unknown skill fails the run.
func TestAssembledSystemPrompt(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	prompts := make(chan string, 4)
	s := startStackScripted(t, ns, allowAll, []scripted.Option{scripted.WithScript("capture", func(req scripted.StreamRequest) (scripted.Reply, error) {
		prompts <- req.SystemPrompt
		return scripted.Reply{Text: "ok"}, nil
	})})
	serveDirectory(t, s.e)
	var calls sandboxCalls
	serveSandbox(t, s.e, &calls)
	ctx := context.Background()
	run := func(sid string, rs agent.RunStart) []agent.Event {
		t.Helper()
		rs.SessionID, rs.Provider, rs.Model = sid, "scripted", "capture"
		rs.Messages = []agent.Message{userText("hi")}
		if err := s.e.Trigger(ctx, "run::start", rs, nil); err != nil {
			t.Fatal(err)
		}
		return events(t, s.e, sid, 20*time.Second)
	}
	run("p1", agent.RunStart{Mode: agent.ModePlan, Sandbox: true, Skills: []string{"tools/math::add"}})
	got := <-prompts
	for _, want := range []string{"directory::skills::get", "Mode: plan", "/sandboxes/p1", "iii://tools/math::add", "## Adding (iii://tools/math::add)", "Call math::add with a and b."} {
		if !strings.Contains(got, want) {
			t.Errorf("prompt lacks %q:\n%s", want, got)
		}
	}
	run("p2", agent.RunStart{SystemPrompt: "Be terse.", Sandbox: true})
	if got := <-prompts; got != "Be terse." {
		t.Errorf("a caller's prompt was changed: %q", got)
	}
	evs := run("p3", agent.RunStart{Skills: []string{"nope/none"}})
	if last := evs[len(evs)-1]; last.StopReason != agent.StopError {
		t.Fatalf("unknown skill: stop reason %q", last.StopReason)
	}
	if view := waitState(t, s.e, "p3", agent.StateFailed); view.Error == nil || !strings.Contains(view.Error.Message, `skill "nope/none"`) {
		t.Fatalf("failure %+v", view.Error)
	}
	select {
	case p := <-prompts:
		t.Fatalf("the model was called for a run whose skill is unknown: %q", p)
	default:
	}
}
