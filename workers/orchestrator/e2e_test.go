package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/policy"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// stack starts a scripted provider, a test tool and an orchestrator on ns.
type stack struct {
	e     *engine.Engine
	orch  *orchestrator.Orchestrator
	sw    *scripted.Worker
	calls atomic.Int64
}

// allowAll is the policy of the stacks whose tests are not about the
// chokepoint: every call runs.
const allowAll = "version: 1\nrules:\n  - \"*\"\n"

func startStack(t *testing.T, ns *server.Server, opts ...orchestrator.Option) *stack {
	t.Helper()
	return startStackPolicy(t, ns, allowAll, opts...)
}

// startSessions serves the session tree (the transcript) on e.
func startSessions(t *testing.T, e *engine.Engine) {
	t.Helper()
	w := sessiontree.NewWorker()
	if err := w.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
}

// startPolicy serves policyYAML as policy::check_permissions on e.
func startPolicy(t *testing.T, e *engine.Engine, policyYAML string) *policy.Worker {
	t.Helper()
	pw := policy.NewWorker("", policy.WithFallback([]byte(policyYAML)))
	if err := pw.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pw.Close(context.Background()) })
	return pw
}

// startStackPolicy is startStack with policyYAML as the policy ("" starts
// no policy worker).
func startStackPolicy(t *testing.T, ns *server.Server, policyYAML string, opts ...orchestrator.Option) *stack {
	t.Helper()
	return startStackScripted(t, ns, policyYAML, nil, opts...)
}

// startStackScripted is startStackPolicy with options for the scripted
// provider (scripts of other models).
func startStackScripted(t *testing.T, ns *server.Server, policyYAML string, sopts []scripted.Option, opts ...orchestrator.Option) *stack {
	t.Helper()
	return startStackOn(t, enginetest.NewEngine(t, ns), policyYAML, sopts, opts...)
}

// startStackOn is startStackScripted on engine e.
func startStackOn(t *testing.T, e *engine.Engine, policyYAML string, sopts []scripted.Option, opts ...orchestrator.Option) *stack {
	t.Helper()
	return startStackEnv(t, e, policyYAML, sopts, nil, opts...)
}

// startClusteredStack is startStack with its orchestrator in a grain
// cluster of its own (one member), as `iii up --cluster` runs it: grain
// requests then go through the cluster's remote.
func startClusteredStack(t *testing.T, ns *server.Server, cluster string) *stack {
	t.Helper()
	env := map[string]map[string]string{"orchestrator": {orchestrator.SettingCluster: cluster, orchestrator.SettingNode: "n1"}}
	return startStackEnv(t, enginetest.NewEngine(t, ns), allowAll, nil, env)
}

// startStackEnv is startStackOn with settings for the orchestrator's
// Provision (nil: not provisioned).
func startStackEnv(t *testing.T, e *engine.Engine, policyYAML string, sopts []scripted.Option, settings map[string]map[string]string, opts ...orchestrator.Option) *stack {
	t.Helper()
	ctx := context.Background()
	s := &stack{e: e}
	if policyYAML != "" {
		startPolicy(t, s.e, policyYAML)
	}
	startSessions(t, s.e)
	p, err := scripted.New(sopts...)
	if err != nil {
		t.Fatal(err)
	}
	sw := scripted.NewWorker(p)
	if err := sw.Start(ctx, s.e); err != nil {
		t.Fatal(err)
	}
	s.sw = sw
	t.Cleanup(func() { _ = sw.Close(context.Background()) })
	w, err := s.e.Worker("tools")
	if err != nil {
		t.Fatal(err)
	}
	type addReq struct {
		A float64 `json:"a"`
		B float64 `json:"b"`
	}
	if err := w.Register(engine.Function{ID: "math::add", Handler: engine.Typed(func(_ context.Context, r addReq) (map[string]any, error) {
		s.calls.Add(1)
		return map[string]any{"sum": r.A + r.B}, nil
	})}); err != nil {
		t.Fatal(err)
	}
	s.orch = orchestrator.New(opts...)
	if settings != nil {
		if err := s.orch.Provision(ctx, workers.Env{Settings: settings}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.orch.Start(ctx, s.e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.orch.Close(context.Background()) })
	return s
}

func userText(text string) agent.Message {
	return agent.Message{Role: agent.RoleUser, Content: []agent.Content{{Type: agent.ContentText, Text: text}}, Timestamp: time.Now().UnixMilli()}
}

// events reads a session's events until agent_end (or the timeout).
func events(t *testing.T, e *engine.Engine, sid string, timeout time.Duration) []agent.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cons, err := e.JetStream().OrderedConsumer(ctx, subjects.SessionStream(subjects.EventStream, sid), jetstream.OrderedConsumerConfig{FilterSubjects: []string{"iii.events." + sid}})
	if err != nil {
		t.Fatal(err)
	}
	var out []agent.Event
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Until(deadline(ctx))))
		if err != nil {
			t.Fatalf("events of %s after %d: %v (%v)", sid, len(out), err, types(out))
		}
		var ev agent.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
		if ev.Type == agent.EventAgentEnd {
			return out
		}
	}
}

func deadline(ctx context.Context) time.Time { d, _ := ctx.Deadline(); return d }

func types(evs []agent.Event) []string {
	var s []string
	for _, ev := range evs {
		if ev.Type == agent.EventTurnStateChanged {
			s = append(s, string(ev.Type)+":"+string(ev.State))
			continue
		}
		s = append(s, string(ev.Type))
	}
	return s
}

func TestTurnEndToEnd(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	var res orchestrator.RunStartResult
	err := s.e.Trigger(ctx, "run::start", agent.RunStart{
		SessionID: "s1", Provider: "scripted", Model: "echo",
		Messages: []agent.Message{userText(`/call math::add {"a":2,"b":3}`)},
	}, &res)
	if err != nil || !res.Started {
		t.Fatalf("run::start = %+v, %v", res, err)
	}
	evs := events(t, s.e, "s1", 20*time.Second)
	seq := strings.Join(types(evs), " ")
	t.Log(seq)
	for _, want := range []string{"function_execution_start", "function_execution_end", "turn_end", "agent_end"} {
		if !strings.Contains(seq, want) {
			t.Fatalf("events lack %s: %s", want, seq)
		}
	}
	last := evs[len(evs)-1]
	if last.StopReason != agent.StopEnd {
		t.Fatalf("agent_end stop_reason %q: %s", last.StopReason, seq)
	}
	var answer string
	for _, ev := range evs {
		if ev.Type == agent.EventMessageComplete && ev.Message != nil {
			for _, c := range ev.Message.Content {
				answer += c.Text
			}
		}
	}
	if !strings.Contains(answer, "5") {
		t.Fatalf("final answer does not quote the result: %q (%s)", answer, seq)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("math::add ran %d times", n)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq <= evs[i-1].Seq {
			t.Fatalf("event seq not increasing at %d: %d then %d", i, evs[i-1].Seq, evs[i].Seq)
		}
	}
	var view *agent.TurnView
	if err := s.e.Trigger(ctx, "turn::get_state", map[string]string{"session_id": "s1"}, &view); err != nil || view == nil || view.State != agent.StateStopped {
		t.Fatalf("turn::get_state = %+v, %v", view, err)
	}
	// A second run on the same session continues its history.
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "s1", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("again")}}, &res); err != nil || !res.Started {
		t.Fatalf("second run::start = %+v, %v", res, err)
	}
}

func TestRunStartBadInput(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	good := func() agent.RunStart {
		return agent.RunStart{SessionID: "ok", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("hi")}}
	}
	tests := []struct {
		name string
		mut  func(*agent.RunStart)
		raw  []byte
	}{
		{name: "missing session", mut: func(r *agent.RunStart) { r.SessionID = "" }},
		{name: "star", mut: func(r *agent.RunStart) { r.SessionID = "a*" }},
		{name: "gt", mut: func(r *agent.RunStart) { r.SessionID = "a>" }},
		{name: "two dots", mut: func(r *agent.RunStart) { r.SessionID = "a.b.c" }},
		{name: "no region", mut: func(r *agent.RunStart) { r.SessionID = ".b" }},
		{name: "no name", mut: func(r *agent.RunStart) { r.SessionID = "a." }},
		{name: "space", mut: func(r *agent.RunStart) { r.SessionID = "a b" }},
		{name: "unknown provider", mut: func(r *agent.RunStart) { r.Provider = "nope" }},
		{name: "empty messages", mut: func(r *agent.RunStart) { r.Messages = nil }},
		{name: "2 MiB", mut: func(r *agent.RunStart) { r.Messages = []agent.Message{userText(strings.Repeat("x", 2<<20))} }},
		// The engine's codec (msgpack) carries them; the record and the
		// events (JSON) could not.
		{name: "NaN in details", mut: func(r *agent.RunStart) { r.Messages[0].Details = map[string]any{"x": []any{math.NaN()}} }},
		{name: "infinite cost", mut: func(r *agent.RunStart) {
			r.Messages = append(r.Messages, agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("a")}, Usage: &agent.Usage{CostUSD: math.Inf(1)}}, userText("b"))
		}},
	}
	for _, tt := range tests {
		rs := good()
		tt.mut(&rs)
		err := s.e.Trigger(ctx, "run::start", rs, nil)
		if !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%s: err = %v, want invalid_payload", tt.name, err)
		}
	}
	// harness::trigger's outer ids fill the payload's; two that differ
	// are refused, not one of them dropped.
	for _, tt := range []struct {
		name string
		in   orchestrator.HarnessTrigger
	}{
		{"session ids differ", orchestrator.HarnessTrigger{SessionID: "other", Payload: good()}},
		{"message ids differ", orchestrator.HarnessTrigger{MessageID: "m1", Payload: func() agent.RunStart { r := good(); r.MessageID = "m2"; return r }()}},
	} {
		err := s.e.Trigger(ctx, "harness::trigger", tt.in, nil)
		if !errors.Is(err, wire.ErrInvalidPayload) || !strings.Contains(err.Error(), "differ") {
			t.Errorf("harness::trigger, %s: err = %v, want invalid_payload", tt.name, err)
		}
	}
	// Nothing persisted.
	kv, err := s.e.JetStream().KeyValue(ctx, "iii-turn-state")
	if err != nil {
		t.Fatal(err)
	}
	if keys, _ := kv.ListKeys(ctx); keys != nil {
		for k := range keys.Keys() {
			t.Errorf("record persisted for %q", k)
		}
	}
}

func TestBusyAndIdempotent(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	rs := agent.RunStart{SessionID: "b1", Provider: "scripted", Model: "echo", IdempotencyKey: "k1", Messages: []agent.Message{userText("/sleep 1500\nslow")}}
	var first, again, busy orchestrator.RunStartResult
	if err := s.e.Trigger(ctx, "run::start", rs, &first); err != nil || !first.Started {
		t.Fatalf("start: %+v %v", first, err)
	}
	if err := s.e.Trigger(ctx, "run::start", rs, &again); err != nil || !again.Started || again.RunID != first.RunID {
		t.Fatalf("idempotent retry: %+v %v (first %+v)", again, err, first)
	}
	rs.IdempotencyKey = ""
	if err := s.e.Trigger(ctx, "run::start", rs, &busy); err != nil || busy.Started || busy.Reason != "session_busy" {
		t.Fatalf("busy: %+v %v", busy, err)
	}
	events(t, s.e, "b1", 20*time.Second)
}

// A harness::trigger that names no session but gives an idempotency key
// runs in a session derived from the key: its retry reaches the same
// session and answers the same run. Each retry started the run again, in
// a fresh session. Without a key, each trigger gets a fresh session.
func TestHarnessTriggerIdempotentWithoutSession(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	trigger := func(key string) orchestrator.HarnessResult {
		t.Helper()
		var res orchestrator.HarnessResult
		rs := agent.RunStart{Provider: "scripted", Model: "echo", IdempotencyKey: key, Messages: []agent.Message{userText("hi")}}
		if err := s.e.Trigger(ctx, "harness::trigger", orchestrator.HarnessTrigger{Payload: rs}, &res); err != nil || res.StatusCode != 200 || !res.Body.Started {
			t.Fatalf("harness::trigger %q = %+v, %v", key, res, err)
		}
		return res
	}
	first := trigger("order-42")
	events(t, s.e, first.Body.SessionID, 20*time.Second)
	again := trigger("order-42")
	if again.Body.SessionID != first.Body.SessionID || again.Body.RunID != first.Body.RunID {
		t.Fatalf("retry: %+v, first %+v", again.Body, first.Body)
	}
	if other := trigger("order-43"); other.Body.SessionID == first.Body.SessionID {
		t.Fatalf("another key ran in the same session %q", other.Body.SessionID)
	}
	if a, b := trigger(""), trigger(""); a.Body.SessionID == b.Body.SessionID {
		t.Fatalf("two triggers without a key share session %q", a.Body.SessionID)
	}
}

// A retry of a run::start whose key never reached the runs bucket (the
// node died between the record write and the key's, or that write
// failed) still answers the first run after the session's next run has
// replaced its record: that run::start remembers the key first. It
// started the run again.
func TestIdempotentRetryAfterNextRun(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	const sid = "idem_next"
	start := func(key, text string) orchestrator.RunStartResult {
		t.Helper()
		var res orchestrator.RunStartResult
		if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo",
			IdempotencyKey: key, Messages: []agent.Message{userText(text)}}, &res); err != nil || !res.Started {
			t.Fatalf("run::start %s: %+v, %v", key, res, err)
		}
		return res
	}
	first := start("k1", "one")
	eventsUntil(t, s.e, sid, 1, 20*time.Second)
	// The key's entry lost, as if never written.
	runs, err := s.e.JetStream().KeyValue(ctx, subjects.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := runs.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		if err := runs.Purge(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	start("k2", "two")
	eventsUntil(t, s.e, sid, 2, 20*time.Second)
	if again := start("k1", "one"); again.RunID != first.RunID {
		t.Fatalf("retry of k1 answered run %s, want the first run %s: the run started twice", again.RunID, first.RunID)
	}
	// No third run: the session's record still tells of the second.
	if evs := auditAllEvents(t, s.e, sid, 500*time.Millisecond); auditCount(evs, agent.EventAgentEnd) != 2 {
		t.Fatalf("%d runs ended, want 2: %v", auditCount(evs, agent.EventAgentEnd), types(evs))
	}
}

func TestAbortMidStream(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "a1", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("/sleep 5000\nnever")}}, nil); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		var v *agent.TurnView
		if err := s.e.Trigger(ctx, "turn::get_state", map[string]string{"session_id": "a1"}, &v); err != nil {
			return err
		}
		if v == nil || v.State != agent.StateAssistantStreaming {
			return errors.New("not streaming yet")
		}
		return nil
	})
	var ab orchestrator.AbortResult
	if err := s.e.Trigger(ctx, "run::abort", map[string]string{"session_id": "a1"}, &ab); err != nil || !ab.Aborted {
		t.Fatalf("abort = %+v, %v", ab, err)
	}
	evs := events(t, s.e, "a1", 10*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopAborted {
		t.Fatalf("stop reason %q: %v", last.StopReason, types(evs))
	}
}

func TestSteeringDuringFunctionExecution(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	w, _ := s.e.Worker("slow")
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	_ = w.Register(engine.Function{ID: "slow::wait", Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return map[string]any{"ok": true}, nil
	}})
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "st1", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("/call slow::wait")}}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("slow::wait never started")
	}
	var pushed orchestrator.InboxPushResult
	if err := s.e.Trigger(ctx, "session::inbox_push", orchestrator.InboxPushRequest{SessionID: "st1", Name: "steering", Item: userText("steer me")}, &pushed); err != nil || pushed.Queued != 1 {
		t.Fatalf("inbox_push = %+v, %v", pushed, err)
	}
	if err := s.e.Trigger(ctx, "session::inbox_push", orchestrator.InboxPushRequest{SessionID: "st1", Name: "bogus", Item: userText("x")}, nil); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("bad inbox name: %v", err)
	}
	close(release)
	evs := events(t, s.e, "st1", 20*time.Second)
	sawSteer := false
	for _, ev := range evs {
		if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Role == agent.RoleUser {
			for _, c := range ev.Message.Content {
				if c.Text == "steer me" {
					sawSteer = true
				}
			}
		}
	}
	if !sawSteer {
		t.Fatalf("steering message never reached the turn: %v", types(evs))
	}
	var drained orchestrator.InboxDrainResult
	if err := s.e.Trigger(ctx, "session::inbox_drain", orchestrator.InboxDrainRequest{SessionID: "st1", Name: "steering"}, &drained); err != nil || len(drained.Items) != 0 {
		t.Fatalf("inbox not emptied: %+v %v", drained, err)
	}
}

// Calls of one answer run in parallel; results keep the model's order.
// "first" finishes only after "second" has started (a barrier, not a
// timing): were the calls run one after the other, "first" would wait out
// its timeout and answer "serial". "second" finishes first, so the results
// arrive out of the model's order.
func TestParallelCallsKeepOrder(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	w, _ := s.e.Worker("pace")
	secondStarted := make(chan struct{})
	var once sync.Once
	_ = w.Register(engine.Function{ID: "pace::sleep", Handler: engine.Typed(func(_ context.Context, r struct {
		Tag string `json:"tag"`
	}) (map[string]string, error) {
		if r.Tag == "second" {
			once.Do(func() { close(secondStarted) })
			return map[string]string{"tag": r.Tag}, nil
		}
		select {
		case <-secondStarted:
			time.Sleep(20 * time.Millisecond) // "second" is done by now
			return map[string]string{"tag": r.Tag}, nil
		case <-time.After(15 * time.Second):
			return map[string]string{"tag": "serial"}, nil
		}
	})})
	text := "/call pace::sleep {\"tag\":\"first\"}\n/call pace::sleep {\"tag\":\"second\"}"
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "par1", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(text)}}, nil); err != nil {
		t.Fatal(err)
	}
	evs := events(t, s.e, "par1", 30*time.Second)
	var ends []string
	for _, ev := range evs {
		if ev.Type == agent.EventTurnEnd && len(ev.FunctionResults) == 2 {
			for _, r := range ev.FunctionResults {
				for _, c := range r.Content {
					ends = append(ends, c.Text)
				}
			}
		}
	}
	if len(ends) != 2 || !strings.Contains(ends[0], "first") || !strings.Contains(ends[1], "second") {
		t.Fatalf("results not in the model's order: %q (%v)", ends, types(evs))
	}
}

func TestAbortDuringFunctionExecution(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	w, _ := s.e.Worker("block")
	started := make(chan struct{}, 1)
	_ = w.Register(engine.Function{ID: "block::forever", Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "ab2", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("/call block::forever")}}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("call never started")
	}
	var ab orchestrator.AbortResult
	if err := s.e.Trigger(ctx, "run::abort", map[string]string{"session_id": "ab2"}, &ab); err != nil || !ab.Aborted || ab.State != agent.StateStopped {
		t.Fatalf("abort = %+v, %v", ab, err)
	}
	evs := events(t, s.e, "ab2", 10*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopAborted {
		t.Fatalf("stop reason %q: %v", last.StopReason, types(evs))
	}
	// Aborting a finished run is a no-op.
	if err := s.e.Trigger(ctx, "run::abort", map[string]string{"session_id": "ab2"}, &ab); err != nil || ab.Aborted {
		t.Fatalf("second abort = %+v, %v", ab, err)
	}
}

// Idle grains passivate; the next run reactivates the session from KV and
// its transcript, and event seq continues.
func TestPassivateAndReactivate(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns, orchestrator.WithHostOptions(session.WithIdleTimeout(200*time.Millisecond)))
	ctx := context.Background()
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "pz", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("one")}}, nil); err != nil {
		t.Fatal(err)
	}
	first := events(t, s.e, "pz", 10*time.Second)
	enginetest.Eventually(t, 10*time.Second, func() error {
		if n := s.orch.Host().Active(); n != 0 {
			return fmt.Errorf("%d grains still active", n)
		}
		return nil
	})
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "pz", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("two")}}, nil); err != nil {
		t.Fatal(err)
	}
	all := eventsUntil(t, s.e, "pz", 2, 10*time.Second)
	if len(all) <= len(first) || all[len(all)-1].Seq <= first[len(first)-1].Seq {
		t.Fatalf("second run's events do not continue the first's: %v", types(all))
	}
}

// eventsUntil reads a session's events until the n-th agent_end.
func eventsUntil(t *testing.T, e *engine.Engine, sid string, n int, timeout time.Duration) []agent.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cons, err := e.JetStream().OrderedConsumer(ctx, subjects.SessionStream(subjects.EventStream, sid), jetstream.OrderedConsumerConfig{FilterSubjects: []string{"iii.events." + sid}})
	if err != nil {
		t.Fatal(err)
	}
	var out []agent.Event
	ends := 0
	for ends < n {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Until(deadline(ctx))))
		if err != nil {
			t.Fatalf("events of %s: %v (%v)", sid, err, types(out))
		}
		var ev agent.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
		if ev.Type == agent.EventAgentEnd {
			ends++
		}
	}
	return out
}

// Aborting mid-stream keeps what the model streamed so far.
func TestAbortKeepsPartial(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	p, err := scripted.New(scripted.WithDeltaSize(4), scripted.WithDeltaInterval(40*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	sw := scripted.NewWorker(p)
	if err := sw.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Close(context.Background()) })
	startSessions(t, e)
	orch := orchestrator.New()
	if err := orch.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = orch.Close(context.Background()) })
	text := "the quick brown fox jumps over the lazy dog and keeps on running for a long while"
	if err := e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "ap", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(text)}}, nil); err != nil {
		t.Fatal(err)
	}
	// Wait until some text has streamed.
	sub, err := e.Conn().SubscribeSync("iii.events.ap")
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(m.Data), `"message_update"`) {
			break
		}
	}
	var ab orchestrator.AbortResult
	if err := e.Trigger(ctx, "run::abort", map[string]string{"session_id": "ap"}, &ab); err != nil || !ab.Aborted {
		t.Fatalf("abort = %+v, %v", ab, err)
	}
	evs := events(t, e, "ap", 10*time.Second)
	var partial string
	for _, ev := range evs {
		if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Role == agent.RoleAssistant {
			for _, c := range ev.Message.Content {
				partial += c.Text
			}
			if ev.Message.StopReason != agent.StopAborted {
				t.Fatalf("partial stop_reason %q", ev.Message.StopReason)
			}
		}
	}
	if partial == "" || partial == text || !strings.HasPrefix(text, partial) {
		t.Fatalf("partial %q is not a proper prefix of the answer (%v)", partial, types(evs))
	}
}

// A client that reconnects resumes from the last stream sequence it saw
// and gets the rest of the events, none twice.
func TestEventsResumeFromStreamSequence(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "rs", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(`/call math::add {"a":1,"b":1}`)}}, nil); err != nil {
		t.Fatal(err)
	}
	all := events(t, s.e, "rs", 20*time.Second)
	stream, err := s.e.JetStream().Stream(ctx, "III_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	read := func(startSeq uint64) ([]agent.Event, []uint64) {
		cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{"iii.events.rs"}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: startSeq,
		})
		if err != nil {
			t.Fatal(err)
		}
		var evs []agent.Event
		var seqs []uint64
		for len(evs) < len(all) {
			m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
			if err != nil {
				break
			}
			meta, _ := m.Metadata()
			var ev agent.Event
			_ = json.Unmarshal(m.Data(), &ev)
			evs = append(evs, ev)
			seqs = append(seqs, meta.Sequence.Stream)
		}
		return evs, seqs
	}
	first, seqs := read(1)
	if len(first) != len(all) {
		t.Fatalf("read %d of %d events", len(first), len(all))
	}
	cut := len(first) / 2
	rest, _ := read(seqs[cut-1] + 1) // reconnect after the cut-th event
	if len(rest) != len(all)-cut {
		t.Fatalf("resumed with %d events, want %d", len(rest), len(all)-cut)
	}
	for i, ev := range rest {
		if ev.Seq != first[cut+i].Seq || ev.Type != first[cut+i].Type {
			t.Fatalf("resumed event %d = %s/%d, want %s/%d", i, ev.Type, ev.Seq, first[cut+i].Type, first[cut+i].Seq)
		}
	}
}

// A run::start that finds the previous run's terminal record with effects
// still listed (its grain died after the terminal write) carries its
// transcript appends and its Finish into the new run, which performs them
// first: the transcript keeps the old run's last message, and the
// follow-ups that Finish requeues are run.
func TestRunStartCarriesLeftEffects(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const sid = "left1"
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("first")}}, nil); err != nil {
		t.Fatal(err)
	}
	events(t, s.e, sid, 20*time.Second)
	kv, err := s.e.JetStream().KeyValue(ctx, subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	// The grain checkpoints the run's end; then a dead grain's leftovers
	// are put back into the record.
	var (
		rec turn.Record
		rev uint64
	)
	enginetest.Eventually(t, 10*time.Second, func() error {
		ent, err := kv.Get(ctx, sid)
		if err != nil {
			return err
		}
		rec, rev = turn.Record{}, ent.Revision()
		if err := json.Unmarshal(ent.Value(), &rec); err != nil {
			return err
		}
		if !rec.State.Terminal() || len(rec.Outbox) > 0 {
			return fmt.Errorf("record %s with %d effects", rec.State, len(rec.Outbox))
		}
		return nil
	})
	left := agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("left behind")}, Timestamp: time.Now().UnixMilli()}
	rec.Outbox = []turn.Effect{
		{Kind: turn.EffectAppendHistory, ID: rec.RunID + ":99:0", Messages: []agent.Message{left}},
		{Kind: turn.EffectEmit, ID: rec.RunID + ":99:1", Event: &agent.Event{Type: agent.EventAgentEnd, SessionID: sid, StopReason: agent.StopEnd}},
		{Kind: turn.EffectFinish, ID: rec.RunID + ":99:2", Finish: &turn.Finish{StopReason: agent.StopEnd, Requeue: []agent.Message{userText("queued")}}},
	}
	data, _ := json.Marshal(rec)
	if _, err := kv.Update(ctx, sid, data, rev); err != nil {
		t.Fatal(err)
	}

	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("second")}}, nil); err != nil {
		t.Fatal(err)
	}
	// Three agent_end: the first run's, the left-behind one (run::start
	// carries a dead grain's events as well, since stop 32), the second
	// run's (the queued follow-up runs in it).
	evs := eventsUntil(t, s.e, sid, 3, 20*time.Second)
	var out struct {
		Messages []struct {
			Message agent.Message `json:"message"`
		} `json:"messages"`
	}
	if err := s.e.Trigger(ctx, "session::messages", map[string]string{"session_id": sid}, &out); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range out.Messages {
		got = append(got, string(m.Message.Role)+":"+m.Message.Content[0].Text)
	}
	want := []string{"user:first", "assistant:first", "assistant:left behind", "user:second", "assistant:second", "user:queued", "assistant:queued"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("transcript %q, want %q (events %v)", got, want, types(evs))
	}
}

// A run started from inside another session (a function call of session
// A calls run::start for B) carries B in its trace baggage, not A's
// message id: every span of B's run was labelled with A's message.
func TestRunStartBaggageIsTheRunsOwn(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := engine.WithSession(context.Background(), "caller", "m-caller")
	var res orchestrator.RunStartResult
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: "callee", Provider: "scripted", Model: "echo",
		Messages: []agent.Message{userText("hi")}}, &res); err != nil || !res.Started {
		t.Fatalf("run::start = %+v, %v", res, err)
	}
	kv, err := s.e.JetStream().KeyValue(context.Background(), subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), "callee")
	if err != nil {
		t.Fatal(err)
	}
	var rec turn.Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	b := rec.Trace["baggage"]
	if !strings.Contains(b, "iii.session.id=callee") || strings.Contains(b, "caller") {
		t.Fatalf("the run's baggage %q, want session callee and nothing of the caller's", b)
	}
	events(t, s.e, "callee", 20*time.Second)
}
