package orchestrator_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/scripted"
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

// TestTurnWithLocalCalls: a turn runs end to end with local calls on
// (engine.WithLocalCalls: run::start, the policy check, the tool, the
// provider request and the transcript appends all skip the bus, and so do
// the provider's stream frames), and no function call or frame travels
// over the bus. With the provider in another process (an engine without
// local calls), its calls and frames come over the bus, and the
// orchestrator's channel, opened local-first, subscribes for them.
func TestTurnWithLocalCalls(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name              string
		providerElsewhere bool
	}{
		{"all local", false},
		{"provider elsewhere", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			watch, err := nats.Connect(ns.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer watch.Close()
			// Only functions that are served are watched: a subscriber on a
			// subject nobody serves would stand in for a responder, and the call
			// would wait for an answer instead of failing at once.
			var onBus, provider, frames atomic.Int64
			for _, id := range []string{"run::start", "policy::check_permissions", "math::add", "provider::scripted::stream", "session::append_batch", "session::messages"} {
				subj, err := subjects.FunctionSubject(id)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := watch.Subscribe(subj, func(*nats.Msg) {
					onBus.Add(1)
					if id == "provider::scripted::stream" {
						provider.Add(1)
					}
				}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := watch.Subscribe(subjects.ChannelSubjectPrefix+"*", func(*nats.Msg) { frames.Add(1) }); err != nil {
				t.Fatal(err)
			}
			if err := watch.Flush(); err != nil {
				t.Fatal(err)
			}
			s := startStackOn(t, enginetest.NewEngine(t, ns, engine.WithLocalCalls(true)), allowAll, nil)
			if c.providerElsewhere {
				if err := s.sw.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				p, err := scripted.New()
				if err != nil {
					t.Fatal(err)
				}
				sw := scripted.NewWorker(p)
				if err := sw.Start(context.Background(), enginetest.NewEngine(t, ns)); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sw.Close(context.Background()) })
			}
			for i, text := range []string{`/call math::add {"a":2,"b":3}`, "again"} {
				var res orchestrator.RunStartResult
				if err := s.e.Trigger(context.Background(), "run::start", agent.RunStart{
					SessionID: "local", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(text)},
				}, &res); err != nil || !res.Started {
					t.Fatalf("run::start %d = %+v, %v", i, res, err)
				}
				evs := eventsUntil(t, s.e, "local", i+1, 20*time.Second)
				if last := evs[len(evs)-1]; last.Type != agent.EventAgentEnd || last.StopReason != agent.StopEnd {
					t.Fatalf("run %d ended %v", i, types(evs))
				}
			}
			if n := s.calls.Load(); n != 1 {
				t.Fatalf("math::add ran %d times", n)
			}
			var out struct {
				Messages []struct {
					Message agent.Message `json:"message"`
				} `json:"messages"`
			}
			if err := s.e.Trigger(context.Background(), "session::messages", map[string]string{"session_id": "local"}, &out); err != nil {
				t.Fatal(err)
			}
			if len(out.Messages) != 6 { // user, call, result, answer; user, answer
				t.Fatalf("the transcript holds %d messages, want 6", len(out.Messages))
			}
			if err := watch.Flush(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // let the watcher see what went over the bus
			wantBus, wantProvider := int64(0), int64(0)
			if c.providerElsewhere {
				wantBus, wantProvider = 3, 3 // the model calls: two in run 1, one in run 2
			}
			if n, p := onBus.Load(), provider.Load(); n != wantBus || p != wantProvider {
				t.Fatalf("%d function calls went over the bus (%d to the provider), want %d (%d)", n, p, wantBus, wantProvider)
			}
			if n := frames.Load(); (n > 0) != c.providerElsewhere {
				t.Fatalf("%d channel frames went over the bus (provider elsewhere: %v)", n, c.providerElsewhere)
			}
		})
	}
}
