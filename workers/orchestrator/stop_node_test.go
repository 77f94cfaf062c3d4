package orchestrator_test

// A node stopped (SIGTERM, as an operator, systemd or Kubernetes stops it)
// while a turn has a non-idempotent call running or parked for a human's
// approval: the promises of docs/CLUSTER.md "Graceful stop", end to end
// with a real `iii up` child process.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// waitCallStarted waits until fn ran once for tag and the record says a
// call is in flight.
func waitCallStarted(t *testing.T, tl *crashTools, fn, tag string) {
	t.Helper()
	enginetest.Eventually(t, 15*time.Second, func() error {
		if c := tl.count(fn, tag, 0); c != 1 {
			return fmt.Errorf("%s %s started %d times: %v", fn, tag, c, tl.counts())
		}
		return nil
	})
}

// stopTimed sends SIGTERM and returns how long the node took to exit 0.
func stopTimed(n *crashNode, timeout time.Duration) time.Duration {
	n.t.Helper()
	start := time.Now()
	n.stop(timeout)
	took := time.Since(start)
	n.t.Logf("the node stopped %v after SIGTERM", took.Round(time.Millisecond))
	return took
}

// stoppedCallEnded waits for sid's turn to end after the restart, with
// its one call's result and stop reason end, everything acked; and checks
// that fn ran once for tag. It returns the call's end event.
func stoppedCallEnded(t *testing.T, tl *crashTools, sid, fn, tag string) crashEvent {
	t.Helper()
	js := tl.e.JetStream()
	evs := crashWaitAgentEnds(t, js, sid, 1, 30*time.Second)
	ends := crashCheckEvents(t, sid, evs)
	if len(ends) != 1 {
		t.Fatalf("%d calls ended: %s", len(ends), crashTypes(evs))
	}
	if r := crashStopReason(evs); r != agent.StopEnd {
		t.Fatalf("stop reason %q: %s", r, crashTypes(evs))
	}
	crashSettled(t, js, sid)
	crashQuiesce(t, js, 10*time.Second)
	if c := tl.count(fn, tag, 0); c != 1 {
		t.Fatalf("the call ran %d times", c)
	}
	for _, end := range ends {
		return end
	}
	return crashEvent{}
}

// TestStopDrainsCallInFlight: the drain lets a running non-idempotent call
// finish and records its result; the restarted node ends the turn with
// that result, and the call ran once.
func TestStopDrainsCallInFlight(t *testing.T) {
	t.Parallel()
	n := startCrashNode(t, "orchestrator.drain_timeout=30s")
	tl := newCrashTools(t, n.url())
	const sid = "stop_drain"
	crashStartRun(t, tl.e, sid, `/call crash::slow {"tag":"sd"}`)
	waitCallStarted(t, tl, "crash::slow", "sd")

	go func() {
		time.Sleep(time.Second) // the node is draining by then
		tl.release("sd")
	}()
	if took := stopTimed(n, 25*time.Second); took < 900*time.Millisecond {
		t.Fatalf("the node exited %v after SIGTERM, before its call finished", took)
	}
	n.start()
	if end := stoppedCallEnded(t, tl, sid, "crash::slow", "sd"); end.IsError || !strings.Contains(crashResultText(end), `"run":1`) {
		t.Fatalf("result %+v, want the drained call's own (run 1)", end.Result)
	}
}

// TestStopDrainTimeout: a call still running when the drain's bound runs
// out is not waited for; the node exits 0, and the restarted node does not
// run it again: the turn ends with "interrupted: outcome unknown".
func TestStopDrainTimeout(t *testing.T) {
	t.Parallel()
	n := startCrashNode(t, "orchestrator.drain_timeout=1s")
	tl := newCrashTools(t, n.url())
	const sid = "stop_timeout"
	crashStartRun(t, tl.e, sid, `/call crash::slow {"tag":"st"}`)
	waitCallStarted(t, tl, "crash::slow", "st")

	stopTimed(n, 20*time.Second)
	tl.release("st") // a re-run would now return at once and show in the count
	n.start()
	if end := stoppedCallEnded(t, tl, sid, "crash::slow", "st"); !end.IsError || !strings.HasPrefix(crashResultText(end), agent.InterruptedText) {
		t.Fatalf("result %+v, want %q", end.Result, agent.InterruptedText)
	}
}

// TestStopWhileAwaitingApproval: a turn parked for a human does not hold
// the stop (a human may take hours) and is not forgotten by it: after the
// restart the same call waits for its decision, and once allowed it runs
// once.
func TestStopWhileAwaitingApproval(t *testing.T) {
	t.Parallel()
	n := startCrashNodeWith(t, "version: 1\nrules: []\n", nil, "orchestrator.drain_timeout=30s")
	tl := newCrashTools(t, n.url())
	js := tl.e.JetStream()
	const sid = "stop_parked"
	crashStartRun(t, tl.e, sid, `/call crash::fast {"tag":"sp","n":1}`)
	var view *agent.TurnView
	enginetest.Eventually(t, 15*time.Second, func() error {
		v, err := crashTurnState(tl.e, sid)
		if err != nil {
			return err
		}
		if v == nil || v.State != agent.StateFunctionAwaitingApproval || len(v.AwaitingApproval) != 1 {
			return fmt.Errorf("turn %+v: not parked yet", v)
		}
		view = v
		return nil
	})

	if took := stopTimed(n, 20*time.Second); took > 10*time.Second {
		t.Fatalf("the node took %v to stop with a turn parked for approval", took)
	}
	n.start()
	enginetest.Eventually(t, 15*time.Second, func() error {
		v, err := crashTurnState(tl.e, sid)
		if err != nil {
			return err
		}
		if v == nil || v.State != agent.StateFunctionAwaitingApproval || len(v.AwaitingApproval) != 1 ||
			v.AwaitingApproval[0].FunctionCallID != view.AwaitingApproval[0].FunctionCallID {
			return fmt.Errorf("after the restart: %+v, want the same call parked", v)
		}
		return nil
	})
	if c := tl.count("crash::fast", "sp", 1); c != 0 {
		t.Fatalf("the parked call ran %d times before a decision", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := view.AwaitingApproval[0]
	enginetest.Eventually(t, 10*time.Second, func() error {
		_, err := resolve(ctx, tl.nc, map[string]any{"session_id": sid, "function_call_id": p.FunctionCallID, "decision": "allow", "args_hash": p.ArgsHash})
		return err
	})
	evs := crashWaitAgentEnds(t, js, sid, 1, 30*time.Second)
	if r := crashStopReason(evs); r != agent.StopEnd {
		t.Fatalf("stop reason %q: %s", r, crashTypes(evs))
	}
	crashSettled(t, js, sid)
	crashQuiesce(t, js, 10*time.Second)
	if c := tl.count("crash::fast", "sp", 1); c != 1 {
		t.Fatalf("the approved call ran %d times", c)
	}
}
