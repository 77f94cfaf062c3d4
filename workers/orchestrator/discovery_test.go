package orchestrator_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// TestFirstTurnDiscoversOnce: a fresh orchestrator's first run discovers
// the catalog once. run::start's provider check discovers it; the model
// call's tool list takes that discovery instead of waiting out a second
// quiet period (150 ms of the first turn of every process).
func TestFirstTurnDiscoversOnce(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj, _ := micro.ControlSubject(micro.InfoVerb, "", "")
	var discoveries atomic.Int64
	sub, err := nc.Subscribe(subj, func(*nats.Msg) { discoveries.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var res orchestrator.RunStartResult
	if err := s.e.Trigger(context.Background(), "run::start", agent.RunStart{
		SessionID: "first", Provider: "scripted", Model: "echo",
		Messages: []agent.Message{userText(`/call math::add {"a":2,"b":3}`)},
	}, &res); err != nil || !res.Started {
		t.Fatalf("run::start = %+v, %v", res, err)
	}
	evs := events(t, s.e, "first", 20*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
		t.Fatalf("run ended %q: %v", last.StopReason, types(evs))
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("math::add ran %d times", n)
	}
	if n := discoveries.Load(); n != 1 {
		t.Fatalf("the first run discovered the catalog %d times, want 1", n)
	}
}
