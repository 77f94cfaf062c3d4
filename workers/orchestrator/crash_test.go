package orchestrator_test

// Crash tests with real processes: the node (`iii up`) runs as a child
// process and is killed with SIGKILL (a) while the model streams, (b) while
// a function call is recorded started but not done, (c) at random moments
// of a run, and again at a random moment of the restarted node's recovery;
// after a restart on the same data the run completes (or fails
// with a clear reason), no function call runs twice unless it is declared
// idempotent, no event is stored twice, and every record decodes and
// validates. The tools the model calls live in the test process (see
// crash_node_test.go), so they outlive the node and count their runs.
//
// The in-process tests at the end force two activations of one session and
// replay states a crash leaves behind.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// (a) Killed while the answer streams: the restarted node streams the
// model again and the run ends with the whole answer.
func TestCrashMidStream(t *testing.T) {
	t.Parallel()
	n := startCrashNode(t, "provider-scripted.delta_interval=25ms")
	tl := newCrashTools(t, n.url())
	js := tl.e.JetStream()
	const sid = "crash_a"
	text := strings.TrimSpace(strings.Repeat("the quick brown fox jumps over the lazy dog; ", 6))
	crashStartRun(t, tl.e, sid, text)
	enginetest.Eventually(t, 15*time.Second, func() error {
		typ, err := crashLastEventType(js, sid)
		if err != nil {
			return err
		}
		if typ != agent.EventMessageUpdate {
			return fmt.Errorf("last event %q: not streaming yet", typ)
		}
		return nil
	})
	if v, err := crashTurnState(tl.e, sid); err != nil || v == nil || v.State != agent.StateAssistantStreaming {
		t.Fatalf("before the kill: turn::get_state = %+v, %v", v, err)
	}
	n.restart()

	evs := crashWaitAgentEnds(t, js, sid, 1, 20*time.Second)
	t.Log(crashTypes(evs))
	crashCheckEvents(t, sid, evs)
	if sr := crashStopReason(evs); sr != agent.StopEnd {
		t.Fatalf("stop reason %q", sr)
	}
	if got := crashAnswer(evs); got != text {
		t.Fatalf("answer %q, want %q", got, text)
	}
	rec := crashSettled(t, js, sid)
	if rec.TurnCount != 1 || rec.StopReason != agent.StopEnd {
		t.Fatalf("record: turn_count %d, stop_reason %q", rec.TurnCount, rec.StopReason)
	}
	crashCheckTranscript(t, tl.e, sid, agent.RoleUser, agent.RoleAssistant)
	crashQuiesce(t, js, 10*time.Second)
}

// A client that prints message_update deltas (iii chat does) must see the
// answer once. The restarted stream reuses the update ids of the killed one
// ("<run>:<step>:u<n>"), and the stream drops the ones it already holds, so
// what a client reads is the killed stream's first updates followed by the
// restarted stream's later ones. A model never chunks (or even words) an
// answer the same way twice; the restart here streams at another pace to
// say so.
func TestCrashMidStreamDeltas(t *testing.T) {
	t.Parallel()
	n := startCrashNode(t, "provider-scripted.delta_interval=25ms")
	tl := newCrashTools(t, n.url())
	js := tl.e.JetStream()
	const sid = "crash_a2"
	text := strings.TrimSpace(strings.Repeat("pack my box with five dozen liquor jugs; ", 6))
	crashStartRun(t, tl.e, sid, text)
	enginetest.Eventually(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		evs, err := crashReadEvents(ctx, js, sid)
		if err != nil {
			return err
		}
		if crashCount(evs, agent.EventMessageUpdate) < 3 {
			return errors.New("fewer than 3 updates yet")
		}
		return nil
	})
	n.sets = []string{"provider-scripted.delta_interval=5ms"}
	n.restart()
	evs := crashWaitAgentEnds(t, js, sid, 1, 20*time.Second)
	if got := crashAnswer(evs); got != text {
		t.Fatalf("answer %q, want %q", got, text)
	}
	// A client appends each delta; an update that carries partial (the
	// message so far) replaces what it has.
	var streamed strings.Builder
	for _, ev := range evs {
		if ev.Type != agent.EventMessageUpdate {
			continue
		}
		if ev.Partial != nil {
			streamed.Reset()
			for _, c := range ev.Partial.Content {
				if c.Type == agent.ContentText {
					streamed.WriteString(c.Text)
				}
			}
			continue
		}
		streamed.WriteString(ev.Delta)
	}
	if streamed.String() != text {
		t.Fatalf("the deltas a client reads do not spell the crashAnswer after a crash mid-stream:\n got  %q\n want %q", streamed.String(), text)
	}
}

// (b) Killed while calls are recorded started: a call not declared
// idempotent is not run again and ends "interrupted: outcome unknown"; an
// idempotent one runs again and its result is used (turn.Recover).
func TestCrashCallStarted(t *testing.T) {
	t.Parallel()
	n := startCrashNode(t)
	tl := newCrashTools(t, n.url())
	js := tl.e.JetStream()
	crashStartRun(t, tl.e, "crash_b1", `/call crash::slow {"tag":"b1"}`)
	crashStartRun(t, tl.e, "crash_b2", `/call crash::idem {"tag":"b2"}`)
	enginetest.Eventually(t, 15*time.Second, func() error {
		if tl.count("crash::slow", "b1", 0) != 1 || tl.count("crash::idem", "b2", 0) != 1 {
			return fmt.Errorf("calls not started: %v", tl.counts())
		}
		return nil
	})
	// The record says started (it is written before the call is sent).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, sid := range []string{"crash_b1", "crash_b2"} {
		rec, err := crashLoadRecord(ctx, js, sid)
		if err != nil {
			t.Fatal(err)
		}
		if ids := turn.InFlight(rec); rec.State != agent.StateFunctionExecute || len(ids) != 1 {
			t.Fatalf("%s before the kill: state %s, in flight %v", sid, rec.State, ids)
		}
	}
	n.kill()
	// Released now, a re-run would return at once: a wrong re-run of b1
	// shows in the count instead of blocking the turn.
	tl.release("b1")
	tl.release("b2")
	n.start()

	evs := crashWaitAgentEnds(t, js, "crash_b1", 1, 20*time.Second)
	t.Log("b1: ", crashTypes(evs))
	ends := crashCheckEvents(t, "crash_b1", evs)
	if len(ends) != 1 {
		t.Fatalf("b1: %d calls ended", len(ends))
	}
	for _, end := range ends {
		if !end.IsError || crashResultText(end) != "interrupted: outcome unknown" {
			t.Fatalf("b1: result %+v, want the error \"interrupted: outcome unknown\"", end.Result)
		}
	}
	if sr := crashStopReason(evs); sr != agent.StopEnd {
		t.Fatalf("b1: stop reason %q", sr)
	}
	if a := crashAnswer(evs); !strings.Contains(a, "crash::slow returned an error: interrupted: outcome unknown") {
		t.Fatalf("b1: crashAnswer %q does not quote the interruption", a)
	}

	evs = crashWaitAgentEnds(t, js, "crash_b2", 1, 20*time.Second)
	t.Log("b2: ", crashTypes(evs))
	ends = crashCheckEvents(t, "crash_b2", evs)
	if len(ends) != 1 {
		t.Fatalf("b2: %d calls ended", len(ends))
	}
	for _, end := range ends {
		if end.IsError || !strings.Contains(crashResultText(end), `"run":2`) {
			t.Fatalf("b2: result %+v, want the re-run's (run 2)", end.Result)
		}
	}
	if sr := crashStopReason(evs); sr != agent.StopEnd {
		t.Fatalf("b2: stop reason %q", sr)
	}

	for _, sid := range []string{"crash_b1", "crash_b2"} {
		crashSettled(t, js, sid)
		crashCheckTranscript(t, tl.e, sid, agent.RoleUser, agent.RoleAssistant, agent.RoleFunctionResult, agent.RoleAssistant)
	}
	// Once every step is acked nothing runs any more: the counts are final.
	crashQuiesce(t, js, 10*time.Second)
	if c := tl.count("crash::slow", "b1", 0); c != 1 {
		t.Fatalf("crash::slow (not idempotent) ran %d times", c)
	}
	if c := tl.count("crash::idem", "b2", 0); c != 2 {
		t.Fatalf("crash::idem (idempotent) ran %d times, want 2 (once before the kill, once after)", c)
	}
}

// (c) Killed at random moments of runs with two parallel calls: every run
// ends, every call ran at most once, every record is valid. A first run,
// not killed, measures how long a run takes here; the kills land anywhere
// in that time.
func TestCrashBetweenSteps(t *testing.T) {
	t.Parallel()
	crashKillRuns(t, "c", 8, nil)
}

// (c) again on a node whose own workers call each other over the bus
// (`iii up --local-calls=false`); in the other crash tests they call each
// other locally, as `iii up` does by default: the policy check, the
// provider request and the transcript appends run in the caller's
// goroutine, and die with it.
func TestCrashBetweenStepsBusCalls(t *testing.T) {
	t.Parallel()
	crashKillRuns(t, "b", 6, nil, "--local-calls=false")
}

// (c) again, with the node down for longer than the streams' duplicate
// windows, which are what drops the copies of a dead activation's
// deliveries shortly after a crash: here they are shrunk to 200 ms and
// left to pass before every restart, so only the replay's own check
// (ARCHITECTURE.md, "Replaying a dead activation's outbox") keeps events
// and transcript messages from being stored twice.
func TestCrashRestartAfterDuplicateWindows(t *testing.T) {
	t.Parallel()
	crashKillRuns(t, "w", 5, shrinkDuplicateWindows)
}

// shrinkDuplicateWindows sets the duplicate windows of the event stream
// and the session tree's entry stream to 200 ms.
func shrinkDuplicateWindows(ctx context.Context, js jetstream.JetStream) error {
	for _, name := range []string{subjects.EventStream, subjects.SessionEntryStream} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		cfg := st.CachedInfo().Config
		cfg.Duplicates = 200 * time.Millisecond
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("shrink the duplicate window of %s: %w", name, err)
		}
	}
	return nil
}

// crashKillRuns runs runs runs of two parallel calls on a node and kills
// it at a random moment of each. With shrink, the streams' duplicate
// windows are shrunk once before the runs and the node stays down for
// longer than them at every kill.
func crashKillRuns(t *testing.T, name string, runs int, shrink func(context.Context, jetstream.JetStream) error, extra ...string) {
	n := startCrashNodeWith(t, crashPolicy, extra, "provider-scripted.delta_interval=10ms")
	tl := newCrashTools(t, n.url())
	js := tl.e.JetStream()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	ref := "crash_" + name + "_ref"
	crashStartRun(t, tl.e, ref, crashTwoCalls(name+"ref"))
	refEvs := crashWaitAgentEnds(t, js, ref, 1, 20*time.Second)
	span := time.Duration(refEvs[len(refEvs)-1].TS-refEvs[0].TS+10) * time.Millisecond
	t.Logf("a run takes %v", span)
	var down time.Duration
	if shrink != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := shrink(ctx, js)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		down = time.Second
	}
	for i := range runs {
		sid := fmt.Sprintf("crash_%s%d", name, i)
		tag := fmt.Sprintf("%s%d", name, i)
		crashStartRun(t, tl.e, sid, crashTwoCalls(tag))
		// The point of the test is a kill at an arbitrary moment of the run.
		time.Sleep(time.Duration(rng.Int64N(int64(span))))
		typ, _ := crashLastEventType(js, sid)
		n.kill()
		time.Sleep(down)
		n.start()
		evs := crashWaitAgentEnds(t, js, sid, 1, 20*time.Second)
		ends := crashCheckEvents(t, sid, evs)
		if sr := crashStopReason(evs); sr != agent.StopEnd {
			t.Errorf("%s: stop reason %q", sid, sr)
		}
		if len(ends) != 2 {
			t.Errorf("%s: %d calls ended, want 2: %s", sid, len(ends), crashTypes(evs))
		}
		var results []string
		for _, ev := range evs {
			if ev.Type == agent.EventFunctionExecutionEnd {
				results = append(results, fmt.Sprintf("error=%v %s", ev.IsError, crashResultText(ev)))
			}
		}
		t.Logf("%s: killed after %q; results %v", sid, typ, results)
		crashSettled(t, js, sid)
		crashCheckTranscript(t, tl.e, sid, agent.RoleUser, agent.RoleAssistant, agent.RoleFunctionResult, agent.RoleFunctionResult, agent.RoleAssistant)
	}
	crashQuiesce(t, js, 10*time.Second)
	for k, c := range tl.counts() {
		if c > 1 {
			t.Errorf("%s ran %d times", k, c)
		}
	}
}

// (c) at scale: many sessions in flight when the node is killed, down for
// longer than the (shrunk) duplicate windows, so the restarted node
// replays every dead activation's outbox late and at once: the sweep
// wakes them all, each replay looks its events and transcript appends up
// (one event read, deleted when done, per session). Every run completes,
// no call runs twice, no event or transcript message is stored twice.
func TestCrashManySessions(t *testing.T) {
	t.Parallel()
	f := startCrashFleet(t, "many", 24)
	at := f.lastEvents()
	f.n.kill()
	t.Logf("a run takes %v; killed with the sessions' last events %v", f.span, at)
	time.Sleep(time.Second)
	f.n.start()
	f.check(t)
}

// (c) during recovery: many sessions in flight when the node is killed;
// it restarts and is killed again at a random moment of its recovery
// (the sweep waking every session, the replays of the dead activations'
// outboxes, the runs going on), with the duplicate windows shrunk and
// passed at every kill, so the second replay of an outbox relies on its
// own look-up of what the first one stored. Every run completes once, no
// call runs twice, no event or transcript message is stored twice.
func TestCrashDuringRecovery(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	f := startCrashFleet(t, "rec", 16)
	f.n.kill()
	time.Sleep(time.Second)
	f.n.start()
	// The node said it is up: its sweep and replays are under way.
	again := time.Duration(rng.Int64N(int64(f.span)))
	time.Sleep(again)
	at := f.lastEvents()
	f.n.kill()
	t.Logf("a run takes %v; killed again %v into the recovery, the sessions' last events %v", f.span, again, at)
	time.Sleep(time.Second)
	f.n.start()
	f.check(t)
}

// crashTwoCalls is the prompt of a run that makes two parallel calls of
// crash::fast tagged tag.
func crashTwoCalls(tag string) string {
	return fmt.Sprintf("/call crash::fast {\"tag\":%q,\"n\":1}\n/call crash::fast {\"tag\":%q,\"n\":2}", tag, tag)
}

// crashFleet is many sessions running two parallel calls each on one
// node, started one after the other over about half a run's span, so that
// they are at every point of a run (just started, mid-stream, mid-call,
// done) when the test kills the node.
type crashFleet struct {
	n        *crashNode
	tl       *crashTools
	js       jetstream.JetStream
	name     string
	sessions int
	span     time.Duration // how long one run takes
}

// startCrashFleet starts a node and the tools, shrinks the duplicate
// windows to 200 ms (the node stays down longer at every kill), times a
// reference run and starts the sessions crash_<name>0…
func startCrashFleet(t *testing.T, name string, sessions int) *crashFleet {
	t.Helper()
	n := startCrashNode(t, "provider-scripted.delta_interval=10ms")
	tl := newCrashTools(t, n.url())
	f := &crashFleet{n: n, tl: tl, js: tl.e.JetStream(), name: name, sessions: sessions}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := shrinkDuplicateWindows(ctx, f.js)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	ref := "crash_" + name + "_ref"
	crashStartRun(t, tl.e, ref, crashTwoCalls(name+"ref"))
	refEvs := crashWaitAgentEnds(t, f.js, ref, 1, 20*time.Second)
	f.span = time.Duration(refEvs[len(refEvs)-1].TS-refEvs[0].TS+10) * time.Millisecond
	for i := range sessions {
		crashStartRun(t, tl.e, f.sid(i), crashTwoCalls(fmt.Sprintf("%s%d", name, i)))
		time.Sleep(f.span / time.Duration(2*sessions))
	}
	return f
}

func (f *crashFleet) sid(i int) string { return fmt.Sprintf("crash_%s%d", f.name, i) }

// lastEvents counts the sessions by the type of their last stored event.
func (f *crashFleet) lastEvents() map[agent.EventType]int {
	at := map[agent.EventType]int{}
	for i := range f.sessions {
		typ, _ := crashLastEventType(f.js, f.sid(i))
		at[typ]++
	}
	return at
}

// check waits for every session's run to end and checks it ended once,
// normally, with both calls' results, its events and transcript whole and
// nothing stored twice; then that no call ran twice.
func (f *crashFleet) check(t *testing.T) {
	t.Helper()
	for i := range f.sessions {
		sid := f.sid(i)
		evs := crashWaitAgentEnds(t, f.js, sid, 1, 30*time.Second)
		ends := crashCheckEvents(t, sid, evs)
		if sr := crashStopReason(evs); sr != agent.StopEnd {
			t.Errorf("%s: stop reason %q", sid, sr)
		}
		if len(ends) != 2 {
			t.Errorf("%s: %d calls ended, want 2: %s", sid, len(ends), crashTypes(evs))
		}
		crashCheckTranscript(t, f.tl.e, sid, agent.RoleUser, agent.RoleAssistant, agent.RoleFunctionResult, agent.RoleFunctionResult, agent.RoleAssistant)
	}
	crashQuiesce(t, f.js, 10*time.Second)
	for k, c := range f.tl.counts() {
		if c > 1 {
			t.Errorf("%s ran %d times", k, c)
		}
	}
}

// Two activations of one session (forced: the second host is woken by hand
// while the first waits for a call): they cannot both write. The one that
// writes second loses its compare-and-set and halts; the run completes once
// and the call ran once.
func TestTwoActivationsOneWriter(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	logs := [2]*crashHaltLog{{}, {}}
	opts := func(i int) []orchestrator.Option {
		return []orchestrator.Option{
			orchestrator.WithAckWait(time.Second),
			orchestrator.WithHostOptions(session.WithLogger(slog.New(logs[i]))),
		}
	}
	s := startStack(t, ns, opts(0)...)
	orchs := [2]*orchestrator.Orchestrator{s.orch, orchestrator.New(opts(1)...)}
	if err := orchs[1].Start(context.Background(), enginetest.NewEngine(t, ns)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = orchs[1].Close(context.Background()) })

	var runs atomic.Int64
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	w, err := s.e.Worker("block")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "crash::block", Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
		runs.Add(1)
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return map[string]any{"ok": true}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	const sid = "two1"
	crashStartRun(t, s.e, sid, "/call crash::block")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("crash::block never started")
	}
	// Whichever orchestrator consumed the step holds the session.
	holder := -1
	for i, o := range orchs {
		if o.Host().Active() == 1 {
			holder = i
		}
	}
	if holder < 0 || orchs[1-holder].Host().Active() != 0 {
		t.Fatalf("active grains: %d and %d", orchs[0].Host().Active(), orchs[1].Host().Active())
	}
	other := 1 - holder
	v, err := crashTurnState(s.e, sid)
	if err != nil || v == nil || v.State != agent.StateFunctionExecute {
		t.Fatalf("turn::get_state = %+v, %v", v, err)
	}
	if err := orchs[other].Host().Wake(sid, session.Wake{Step: v.Step, Ack: func() error { return nil }, InProgress: func() error { return nil }}); err != nil {
		t.Fatal(err)
	}
	// The forced activation takes the call for a dead one's: it records the
	// call interrupted and finishes the run.
	evs := crashWaitAgentEnds(t, s.e.JetStream(), sid, 1, 15*time.Second)
	close(release)
	// The first activation's result now loses the compare-and-set.
	enginetest.Eventually(t, 10*time.Second, func() error {
		if len(logs[holder].halts()) == 0 {
			return errors.New("the first activation has not halted")
		}
		return nil
	})
	// The halted activation is gone from its host at once. (Its step,
	// given back with a one-second delay, may then activate a fresh grain
	// on either node, which finds it stale.)
	enginetest.Eventually(t, 500*time.Millisecond, func() error {
		if n := orchs[holder].Host().Active(); n != 0 {
			return fmt.Errorf("the halted activation is still registered (%d active)", n)
		}
		return nil
	})
	// Its un-acked step is redelivered after the ack wait and found stale.
	crashQuiesce(t, s.e.JetStream(), 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if evs, err = crashReadEvents(ctx, s.e.JetStream(), sid); err != nil {
		t.Fatal(err)
	}
	t.Log(crashTypes(evs))
	ends := crashCheckEvents(t, sid, evs)
	if h0, h1 := logs[holder].halts(), logs[other].halts(); len(h0) != 1 || h0[0] != "write record" || len(h1) != 0 {
		t.Fatalf("halts: first activation %v, forced one %v; want exactly one, the first's, on its write", h0, h1)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("crash::block ran %d times", n)
	}
	for _, end := range ends {
		if !end.IsError || crashResultText(end) != "interrupted: outcome unknown" {
			t.Fatalf("result %+v: want interrupted (the forced activation recovered the call)", end.Result)
		}
	}
	crashSettled(t, s.e.JetStream(), sid)

	// The loser's process runs the session's next run: its events must
	// continue the session's seq, not the loser's stale count.
	t.Run("next run on the loser's node", func(t *testing.T) {
		if err := orchs[other].Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		crashStartRun(t, s.e, sid, "hello again")
		evs := crashWaitAgentEnds(t, s.e.JetStream(), sid, 2, 15*time.Second)
		t.Log(crashTypes(evs))
		crashCheckEvents(t, sid, evs)
	})
}

// A kill between the write of a run's last record (state stopped, outbox
// turn_state_changed + agent_end + finish) and the delivery of its outbox
// leaves that record in KV and the step that woke the session un-acked. The
// redelivered step must deliver the outbox: otherwise agent_end is never
// published and clients wait forever. The record is built with the turn
// machine as the dead activation left it; the step is the run's first one,
// as the consumer redelivers it.
func TestRedeliveredStepDeliversFinalOutbox(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns, orchestrator.WithAckWait(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const sid, runID = "undelivered1", "run1"
	now := time.Now().UnixMilli()
	rec, _, err := turn.New(agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", MaxTurns: 5, Messages: []agent.Message{userText("hi")}}, runID, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []turn.Input{
		turn.Provisioned{},
		turn.ModelDone{Message: agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("hi")}}},
		turn.SteeringDrained{},
	} {
		if rec, _, err = turn.Apply(turn.Delivered(rec), in, now); err != nil {
			t.Fatal(err)
		}
	}
	if rec.State != agent.StateStopped || len(rec.Outbox) == 0 {
		t.Fatalf("built record: state %s, outbox %d", rec.State, len(rec.Outbox))
	}
	data, _ := json.Marshal(rec)
	kv, err := s.e.JetStream().KeyValue(ctx, "iii-turn-state")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, sid, data); err != nil {
		t.Fatal(err)
	}
	step, _ := json.Marshal(orchestrator.Step{SessionID: sid, Step: 1, State: agent.StateProvisioning})
	if _, err := s.e.JetStream().Publish(ctx, "iii.turn.step."+sid, step); err != nil {
		t.Fatal(err)
	}
	// Wait for the property itself rather than for the step consumer to
	// look idle: under load a wake can be between a nak or an ack-wait
	// expiry and its redelivery, when the consumer shows nothing pending.
	enginetest.Eventually(t, 15*time.Second, func() error {
		typ, err := crashLastEventType(s.e.JetStream(), sid)
		if err != nil {
			return err
		}
		got, err := crashLoadRecord(ctx, s.e.JetStream(), sid)
		if err != nil {
			return err
		}
		if typ != agent.EventAgentEnd || len(got.Outbox) > 0 {
			return fmt.Errorf("the run's last outbox was not delivered: last event %q, %d effects left in the record", typ, len(got.Outbox))
		}
		return nil
	})
	crashQuiesce(t, s.e.JetStream(), 10*time.Second)
}

// Two unclustered orchestrators share the step consumer. run::start hands
// the record to its own grain, so the step may be consumed by the replica
// whose grain does not run the run: it hands the step over to the one that
// does. No run gets a second activation (no halt), every step is acked
// promptly (long before the ack wait would redeliver it), and every run's
// events are whole.
func TestReplicasHandOverSteps(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	logs := [2]*crashHaltLog{{}, {}}
	opts := func(i int) []orchestrator.Option {
		return []orchestrator.Option{
			orchestrator.WithAckWait(30 * time.Second),
			orchestrator.WithHostOptions(session.WithLogger(slog.New(logs[i]))),
		}
	}
	s := startStack(t, ns, opts(0)...)
	second := orchestrator.New(opts(1)...)
	if err := second.Start(context.Background(), enginetest.NewEngine(t, ns)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close(context.Background()) })

	const sessions, runs = 4, 4
	for r := 1; r <= runs; r++ {
		for i := range sessions {
			crashStartRun(t, s.e, fmt.Sprintf("ho%d", i), fmt.Sprintf("run %d", r))
		}
		for i := range sessions {
			crashWaitAgentEnds(t, s.e.JetStream(), fmt.Sprintf("ho%d", i), r, 15*time.Second)
		}
	}
	crashQuiesce(t, s.e.JetStream(), 5*time.Second)
	for i, l := range logs {
		if h := l.halts(); len(h) != 0 {
			t.Errorf("orchestrator %d halted activations: %v", i, h)
		}
	}
	for i := range sessions {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		evs, err := crashReadEvents(ctx, s.e.JetStream(), fmt.Sprintf("ho%d", i))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if ends := crashCheckEvents(t, fmt.Sprintf("ho%d", i), evs); len(ends) != 0 {
			t.Fatalf("ho%d: %d function results in runs that call none", i, len(ends))
		}
	}
}

// A hand-over request that is not one (bad JSON, a bad session id, a reply
// subject that is not a JetStream ack) is refused and wakes nothing.
func TestHandOverBadInput(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	subj, err := subjects.StepHostSubject(s.orch.HostID())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, body string }{
		{"not json", `{`},
		{"bad session id", `{"session_id":"a b","step":1,"reply":"$JS.ACK.x"}`},
		{"wildcard session id", `{"session_id":"a*","step":1,"reply":"$JS.ACK.x"}`},
		{"no reply", `{"session_id":"ok1","step":1}`},
		{"reply not an ack", `{"session_id":"ok1","step":1,"reply":"iii.fn.run.start"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, err := s.e.Conn().Request(subj, []byte(tt.body), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if string(msg.Data) != "refused" {
				t.Fatalf("answer %q, want refused", msg.Data)
			}
		})
	}
	if n := s.orch.Host().Active(); n != 0 {
		t.Fatalf("%d grains activated by refused hand-overs", n)
	}
}

// run::start takes the record of a session whose grain is idle here from
// the grain (no KV read). When another writer moved the record since (here:
// the record rewritten in KV behind the grain's back), that copy is stale:
// run::start loses its compare-and-set, reads KV and starts the run.
func TestRunStartStaleSettledCopy(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	const sid = "stale1"
	crashStartRun(t, s.e, sid, "first")
	js := s.e.JetStream()
	crashWaitAgentEnds(t, js, sid, 1, 15*time.Second)
	enginetest.Eventually(t, 5*time.Second, func() error {
		if _, _, ok := s.orch.Host().Settled(sid); !ok {
			return errors.New("the grain does not hold a settled record")
		}
		return nil
	})
	_, grainRev, _ := s.orch.Host().Settled(sid)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, subjects.SessionBucket(subjects.TurnStateBucket, sid))
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if ent.Revision() != grainRev {
		t.Fatalf("grain holds revision %d, KV %d", grainRev, ent.Revision())
	}
	if _, err := kv.Update(ctx, sid, ent.Value(), ent.Revision()); err != nil {
		t.Fatal(err)
	}
	crashStartRun(t, s.e, sid, "second")
	evs := crashWaitAgentEnds(t, js, sid, 2, 15*time.Second)
	crashCheckEvents(t, sid, evs)
}

// A dead activation's outbox is delivered again by the next one. The
// streams' duplicate windows (events 30 seconds, entries 10 minutes) drop what the
// dead one stored, but a node restarted later than that used to store
// every event and transcript message a second time. Here the outbox of a
// whole run (user message, answer, their events, agent_end) is delivered
// once, the record is put back as the dead activation left it, written an
// hour ago, and the windows are shrunk and let pass (as an hour would):
// the replay must store nothing twice, also when another writer appended
// to the transcript after the outbox's messages.
func TestReplayAfterDuplicateWindow(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns, orchestrator.WithAckWait(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := s.e.JetStream()
	const sid, runID = "replaylate1", "run1"
	now := time.Now().UnixMilli()
	rec := stoppedRun(t, sid, runID, "hi", "hello", now)
	kv, err := js.KeyValue(ctx, "iii-turn-state")
	if err != nil {
		t.Fatal(err)
	}
	wake := func(step uint64) {
		t.Helper()
		data, _ := json.Marshal(orchestrator.Step{SessionID: sid, Step: step, State: agent.StateProvisioning})
		if _, err := js.Publish(ctx, "iii.turn.step."+sid, data); err != nil {
			t.Fatal(err)
		}
	}
	delivered := func() error {
		typ, err := crashLastEventType(js, sid)
		if err != nil {
			return err
		}
		got, err := crashLoadRecord(ctx, js, sid)
		if err != nil {
			return err
		}
		if typ != agent.EventAgentEnd || len(got.Outbox) > 0 {
			return fmt.Errorf("outbox not delivered: last event %q, %d effects left in the record", typ, len(got.Outbox))
		}
		return nil
	}
	data, _ := json.Marshal(rec)
	if _, err := kv.Create(ctx, sid, data); err != nil {
		t.Fatal(err)
	}
	wake(1)
	enginetest.Eventually(t, 15*time.Second, delivered)
	before, err := crashReadEvents(ctx, js, sid)
	if err != nil {
		t.Fatal(err)
	}
	crashCheckTranscript(t, s.e, sid, agent.RoleUser, agent.RoleAssistant)

	// An hour later, as far as the record and the windows can tell.
	rec.UpdatedAtMs = now - time.Hour.Milliseconds()
	if err := shrinkDuplicateWindows(ctx, js); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	// replay puts r back as a dead activation left it, wakes the session
	// and returns the events once r's outbox is delivered.
	replay := func(r turn.Record) []crashEvent {
		t.Helper()
		data, _ := json.Marshal(r)
		if _, err := kv.Put(ctx, sid, data); err != nil {
			t.Fatal(err)
		}
		wake(1)
		enginetest.Eventually(t, 15*time.Second, delivered)
		crashQuiesce(t, js, 10*time.Second)
		evs, err := crashReadEvents(ctx, js, sid)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	after := replay(rec)
	if len(after) != len(before) {
		t.Errorf("events: %d after the late replay, %d before: %s", len(after), len(before), crashTypes(after))
	}
	crashCheckTranscript(t, s.e, sid, agent.RoleUser, agent.RoleAssistant)

	// The next run's record, written an hour ago and never delivered: the
	// stream's last event is the run before's, so all of it is delivered.
	rec2 := stoppedRun(t, sid, "run2", "again", "again", now+1)
	rec2.UpdatedAtMs = rec.UpdatedAtMs
	final := replay(rec2)
	if len(final) != 2*len(before) || crashCount(final, agent.EventAgentEnd) != 2 {
		t.Errorf("events after the second run's late delivery: %d, want %d: %s", len(final), 2*len(before), crashTypes(final))
	}
	crashCheckTranscript(t, s.e, sid, agent.RoleUser, agent.RoleAssistant, agent.RoleUser, agent.RoleAssistant)

	// Another writer appended after the second run's messages (a client's
	// own session::append): the transcript no longer ends with the
	// outbox's appends, so the replay cannot recognise them there. The
	// session tree looks their dedup ids up among the entries stored since
	// the record's write (dedup_since_ms) instead of appending them again.
	var appended struct {
		EntryID string `json:"entry_id"`
	}
	if err := s.e.Trigger(ctx, "session::append", map[string]any{"session_id": sid, "message": userText("aside")}, &appended); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // past the shrunk windows
	if again := replay(rec2); len(again) != len(final) {
		t.Errorf("events after a late replay behind another writer: %d, want %d: %s", len(again), len(final), crashTypes(again))
	}
	crashCheckTranscript(t, s.e, sid, agent.RoleUser, agent.RoleAssistant, agent.RoleUser, agent.RoleAssistant, agent.RoleUser)
}

// stoppedRun is the record of a whole run (the user says ask, the model
// answers answer) as the turn machine leaves it at the run's end, nothing
// of it delivered: its outbox holds every effect of the run.
func stoppedRun(t *testing.T, sid, runID, ask, answer string, now int64) turn.Record {
	t.Helper()
	rec, _, err := turn.New(agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", MaxTurns: 5, Messages: []agent.Message{userText(ask)}}, runID, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []turn.Input{
		turn.Provisioned{},
		turn.ModelDone{Message: agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(answer)}, Timestamp: now}},
		turn.SteeringDrained{},
	} {
		if rec, _, err = turn.Apply(rec, in, now); err != nil {
			t.Fatal(err)
		}
	}
	if rec.State != agent.StateStopped {
		t.Fatalf("built record: state %s", rec.State)
	}
	return rec
}

// TestRunStartDeliversTheLastRunsEvents: the previous run's grain died
// after its terminal write, having stored only some of its events (its
// agent_end not among them), and a client starts the next run: run::start
// carries the events the stream does not hold into the new run, whose
// grain publishes them first. Every run ends in the stream, and no event
// is stored twice, though the duplicate window is long past.
func TestRunStartDeliversTheLastRunsEvents(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := s.e.JetStream()
	const sid = "leftevents1"
	now := time.Now().UnixMilli()
	rec := stoppedRun(t, sid, "run1", "hi", "hello", now)
	var emits []turn.Effect
	for _, eff := range rec.Outbox {
		if eff.Kind == turn.EffectEmit {
			emits = append(emits, eff)
		}
	}
	// The dead grain stored the first half of its events.
	for _, eff := range emits[:len(emits)/2] {
		ev := *eff.Event
		ev.Seq = uint64(len(emits)) // any; the check orders by seq
		data, _ := json.Marshal(ev)
		if _, err := js.Publish(ctx, "iii.events."+sid, data, jetstream.WithMsgID("ev:"+sid+":"+eff.ID)); err != nil {
			t.Fatal(err)
		}
	}
	// An hour ago, as far as the record and the windows can tell.
	rec.UpdatedAtMs = now - time.Hour.Milliseconds()
	if err := shrinkDuplicateWindows(ctx, js); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	kv, err := js.KeyValue(ctx, "iii-turn-state")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(rec)
	if _, err := kv.Create(ctx, sid, data); err != nil {
		t.Fatal(err)
	}
	startRun(t, s.e, sid, "again")
	enginetest.Eventually(t, 15*time.Second, func() error {
		evs, err := crashReadEvents(ctx, js, sid)
		if err != nil {
			return err
		}
		if n := crashCount(evs, agent.EventAgentEnd); n != 2 {
			return fmt.Errorf("%d runs ended in the stream: %s", n, crashTypes(evs))
		}
		return nil
	})
	crashQuiesce(t, js, 10*time.Second)
	evs, err := crashReadEvents(ctx, js, sid)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for _, ev := range evs {
		ids[ev.msgID]++
	}
	for _, eff := range emits {
		if n := ids["ev:"+sid+":"+eff.ID]; n != 1 {
			t.Errorf("run1's event %s (%s) stored %d times", eff.ID, eff.Event.Type, n)
		}
	}
	// In the stream, run1 ends before anything of run2.
	run1 := "ev:" + sid + ":run1:"
	end1 := slices.IndexFunc(evs, func(ev crashEvent) bool { return ev.msgID == "ev:"+sid+":"+emits[len(emits)-1].ID })
	first2 := slices.IndexFunc(evs, func(ev crashEvent) bool { return !strings.HasPrefix(ev.msgID, run1) })
	if end1 < 0 || evs[end1].Type != agent.EventAgentEnd || first2 < end1 {
		t.Fatalf("run1's end at %d, run2's first event at %d: %s", end1, first2, crashTypes(evs))
	}
}
