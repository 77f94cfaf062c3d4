package orchestrator_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// An answer asking for more calls than MaxCallsPerAnswer fails the run
// before any of them runs. Before, 2,000 calls all ran (their effects
// done), and then the run failed: the turn record holding their results
// was larger than the server takes. An answer at the bound runs them all.
func TestTooManyCallsInOneAnswer(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	w, err := s.e.Worker("count")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	if err := w.Register(engine.Function{ID: "test::count", Handler: engine.Typed(func(context.Context, struct{}) (agent.FunctionResult, error) {
		calls.Add(1)
		return agent.TextResult("ok"), nil
	})}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sid   string
		n     int
		end   agent.StopReason
		calls int32
	}{
		{"calls-over", orchestrator.MaxCallsPerAnswer + 1, agent.StopError, 0},
		{"calls-at", orchestrator.MaxCallsPerAnswer, agent.StopEnd, orchestrator.MaxCallsPerAnswer},
	} {
		calls.Store(0)
		var res orchestrator.RunStartResult
		if err := s.e.Trigger(context.Background(), "run::start", agent.RunStart{
			SessionID: c.sid, Provider: "scripted", Model: "echo",
			Messages: []agent.Message{userText(strings.Repeat("/call test::count {}\n", c.n))},
		}, &res); err != nil || !res.Started {
			t.Fatalf("run::start = %+v, %v", res, err)
		}
		evs := events(t, s.e, c.sid, 60*time.Second)
		if last := evs[len(evs)-1]; last.StopReason != c.end {
			t.Fatalf("%d calls: agent_end %q", c.n, last.StopReason)
		}
		if got := calls.Load(); got != c.calls {
			t.Errorf("%d calls asked: %d ran, want %d", c.n, got, c.calls)
		}
		if c.end == agent.StopError {
			found := false
			for _, ev := range evs {
				if ev.Type == agent.EventMessageComplete && ev.Message != nil && strings.Contains(ev.Message.ErrorMessage, "function calls in one answer") {
					found = true
				}
			}
			if !found {
				t.Errorf("%d calls: no error message saying why: %v", c.n, types(evs))
			}
		}
	}
}

// A run whose messages the turn record cannot hold is refused by
// run::start, nothing written; one of 600 KiB was accepted and failed on
// its first record write. One of 200 KiB runs.
func TestRunMessagesFitTheRecord(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "huge", Provider: "scripted", Model: "echo",
		Messages: []agent.Message{userText(strings.Repeat("x", 600<<10))}}, nil)
	if !errors.Is(err, wire.ErrInvalidPayload) || !strings.Contains(err.Error(), "quarter of the server's max payload") {
		t.Fatalf("600 KiB: %v", err)
	}
	kv, err := s.e.JetStream().KeyValue(ctx, "iii-turn-state")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "huge"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a record was written: %v", err)
	}
	var res orchestrator.RunStartResult
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "large", Provider: "scripted", Model: "echo",
		Messages: []agent.Message{userText(strings.Repeat("y", 200<<10))}}, &res); err != nil || !res.Started {
		t.Fatalf("200 KiB: %+v, %v", res, err)
	}
	evs := events(t, s.e, "large", 60*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
		t.Fatalf("200 KiB: agent_end %q: %v", last.StopReason, types(evs))
	}
}
