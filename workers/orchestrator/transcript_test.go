package orchestrator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/scripted"
)

// providerRequests records every request of provider::scripted::stream
// as the provider receives it (a plain subscription beside the worker's
// queue group).
type providerRequests struct {
	mu   sync.Mutex
	reqs []agent.ProviderRequest
}

func watchProvider(t *testing.T, nc *nats.Conn) *providerRequests {
	t.Helper()
	pr := &providerRequests{}
	sub, err := nc.Subscribe(subjects.MustFunctionSubject("provider::scripted::stream"), func(m *nats.Msg) {
		var req agent.ProviderRequest
		if err := wire.ForContentType(m.Header.Get(wire.HeaderContentType)).Unmarshal(m.Data, &req); err != nil {
			t.Errorf("provider request: %v", err)
			return
		}
		pr.mu.Lock()
		pr.reqs = append(pr.reqs, req)
		pr.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return pr
}

func (pr *providerRequests) all() []agent.ProviderRequest {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return append([]agent.ProviderRequest(nil), pr.reqs...)
}

// sent is the number of messages a request carried, and its base.
func sent(req agent.ProviderRequest) (n, base int) {
	if req.Transcript != nil && req.Transcript.Base > 0 {
		return len(req.Transcript.More), req.Transcript.Base
	}
	return len(req.Messages), 0
}

// A session's model calls after the first carry only the new messages,
// within a run and across runs, and the answers are what the whole
// transcript gives (the scripted model quotes the function result, which
// only the continuation carries).
func TestTranscriptContinuation(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	pr := watchProvider(t, enginetest.Connect(t, ns))
	ctx := context.Background()
	for i, text := range []string{"/call math::add {\"a\":1,\"b\":2}", "second run", "/call math::add {\"a\":5,\"b\":5}"} {
		if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "tc1", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(text)}}, nil); err != nil {
			t.Fatal(err)
		}
		evs := eventsUntil(t, s.e, "tc1", i+1, 20*time.Second)
		last := evs[len(evs)-1]
		if last.Type != agent.EventAgentEnd || last.StopReason != agent.StopEnd {
			t.Fatalf("run %d ended %+v", i, last)
		}
	}
	reqs := pr.all()
	if len(reqs) != 5 {
		for i, req := range reqs {
			n, base := sent(req)
			t.Logf("call %d: %d on %d, %+v", i, n, base, req.Transcript)
		}
		t.Fatalf("%d model calls, want 5", len(reqs))
	}
	// Whole transcript lengths of the five calls: 1 (user), 3 (+ the
	// call and its result), 5 (+ answer, user), 7 (+ answer, user), 9.
	want := []struct{ n, base int }{{1, 0}, {2, 1}, {2, 3}, {2, 5}, {2, 7}}
	for i, req := range reqs {
		n, base := sent(req)
		if n != want[i].n || base != want[i].base {
			t.Errorf("call %d sent %d messages on a base of %d, want %d on %d", i, n, base, want[i].n, want[i].base)
		}
		if req.Transcript == nil || req.Transcript.ID != reqs[0].Transcript.ID {
			t.Errorf("call %d transcript %+v, want id %s", i, req.Transcript, reqs[0].Transcript.ID)
		}
	}
	all := eventsUntil(t, s.e, "tc1", 3, 10*time.Second)
	var answers []string
	for _, ev := range all {
		if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Role == agent.RoleAssistant && ev.Message.StopReason == agent.StopEnd {
			answers = append(answers, ev.Message.Content[0].Text)
		}
	}
	if len(answers) != 3 || !strings.Contains(answers[0], "3") || !strings.Contains(answers[2], "10") {
		t.Fatalf("answers %q", answers)
	}
}

// With continuations off every call carries the whole transcript.
func TestTranscriptContinuationOff(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns, orchestrator.WithTranscriptContinuation(false))
	pr := watchProvider(t, enginetest.Connect(t, ns))
	ctx := context.Background()
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "tc2", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("/call math::add {\"a\":1,\"b\":2}")}}, nil); err != nil {
		t.Fatal(err)
	}
	eventsUntil(t, s.e, "tc2", 1, 20*time.Second)
	for i, req := range pr.all() {
		if req.Transcript != nil || len(req.Messages) != 1+2*i {
			t.Errorf("call %d: %d messages, transcript %+v", i, len(req.Messages), req.Transcript)
		}
	}
}

// A provider that no longer keeps the transcript (here: restarted between
// two runs) refuses the continuation; the orchestrator sends the whole
// transcript at once and the run goes on as if nothing happened.
func TestTranscriptContinuationRefused(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	pr := watchProvider(t, enginetest.Connect(t, ns))
	ctx := context.Background()
	run := func(i int, text string) {
		t.Helper()
		if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "tc3", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(text)}}, nil); err != nil {
			t.Fatal(err)
		}
		evs := eventsUntil(t, s.e, "tc3", i, 20*time.Second)
		if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
			t.Fatalf("run %d ended %+v", i, last)
		}
	}
	run(1, "first")
	// A new provider instance: it keeps nothing.
	if err := s.sw.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := scripted.New()
	if err != nil {
		t.Fatal(err)
	}
	sw := scripted.NewWorker(p)
	if err := sw.Start(ctx, s.e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Close(context.Background()) })
	run(2, "/call math::add {\"a\":20,\"b\":22}")

	reqs := pr.all()
	var shape []string
	for _, req := range reqs {
		n, base := sent(req)
		shape = append(shape, fmt.Sprintf("%d@%d", n, base))
	}
	// first (1 whole), then run 2's first call: a continuation (2 on 1),
	// refused, sent whole (3), then the call's answer continues it (2 on 3).
	if got := strings.Join(shape, " "); got != "1@0 2@1 3@0 2@3" {
		t.Fatalf("calls %s, want 1@0 2@1 3@0 2@3", got)
	}
	final := ""
	for _, ev := range eventsUntil(t, s.e, "tc3", 2, 10*time.Second) {
		if ev.Type != agent.EventMessageComplete || ev.Message == nil {
			continue
		}
		switch ev.Message.StopReason {
		case agent.StopError:
			t.Fatalf("a model call failed: %+v", ev.Message)
		case agent.StopEnd:
			final = ev.Message.Content[0].Text
		}
	}
	if !strings.Contains(final, "42") {
		t.Fatalf("final answer %q", final)
	}
}
