package orchestrator_test

// The function-call chokepoint end to end: policy (allow, deny,
// needs_approval, fail closed), the approval gate (park, resolve, bound to
// the arguments, consumed once, settings, human-only), hooks from plain
// NATS clients (block, rewrite, redact) and agent::trigger.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/approval"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// noRules is a policy with no rules: every call needs approval.
const noRules = "version: 1\nrules: []\n"

// startGated is a stack with policyYAML and the approval worker.
func startGated(t *testing.T, ns *server.Server, policyYAML string, opts ...orchestrator.Option) *stack {
	t.Helper()
	s := startStackPolicy(t, ns, policyYAML, opts...)
	aw := approval.NewWorker()
	if err := aw.Start(context.Background(), s.e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = aw.Close(context.Background()) })
	return s
}

func startRun(t *testing.T, e *engine.Engine, sid, text string) {
	t.Helper()
	var res orchestrator.RunStartResult
	if err := e.Trigger(context.Background(), "run::start", agent.RunStart{
		SessionID: sid, Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(text)},
	}, &res); err != nil || !res.Started {
		t.Fatalf("run::start %s = %+v, %v", sid, res, err)
	}
}

// waitState waits until the session's turn is in state.
func waitState(t *testing.T, e *engine.Engine, sid string, state agent.TurnState) *agent.TurnView {
	t.Helper()
	var view *agent.TurnView
	enginetest.Eventually(t, 15*time.Second, func() error {
		view = nil
		if err := e.Trigger(context.Background(), "turn::get_state", map[string]string{"session_id": sid}, &view); err != nil {
			return err
		}
		if view == nil || view.State != state {
			return fmt.Errorf("turn state %+v, want %s", view, state)
		}
		return nil
	})
	return view
}

// results returns the function_execution_end events of evs by call id.
func results(evs []agent.Event) map[string]agent.Event {
	out := map[string]agent.Event{}
	for _, ev := range evs {
		if ev.Type == agent.EventFunctionExecutionEnd {
			out[ev.FunctionCallID] = ev
		}
	}
	return out
}

// onlyResult returns the one function result of evs.
func onlyResult(t *testing.T, evs []agent.Event) agent.Event {
	t.Helper()
	rs := results(evs)
	if len(rs) != 1 {
		t.Fatalf("%d function results, want 1: %v", len(rs), types(evs))
	}
	for _, r := range rs {
		return r
	}
	panic("unreachable")
}

// denial decodes a result's details as a denial.
func denial(t *testing.T, ev agent.Event) agent.Denial {
	t.Helper()
	if ev.Result == nil || !ev.Result.IsError {
		t.Fatalf("result %+v is not an error", ev.Result)
	}
	b, _ := json.Marshal(ev.Result.Details)
	var d agent.Denial
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func resolve(ctx context.Context, nc *nats.Conn, req map[string]any) (map[string]any, error) {
	b, _ := json.Marshal(req)
	m, err := nc.RequestWithContext(ctx, "iii.fn.approval.resolve", b)
	if err != nil {
		return nil, err
	}
	if we := wire.Decode(m); we != nil {
		return nil, we
	}
	var out map[string]any
	return out, json.Unmarshal(m.Data, &out)
}

func TestChokepointPolicyDecides(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startGated(t, ns, "version: 1\nrules:\n  - \"!math::add\"\n  - function: \"secret::use\"\n    action: deny\n    args: { mode: { equals: \"raw\" } }\n")
	startRun(t, s.e, "deny1", `/call math::add {"a":1,"b":2}`)
	evs := events(t, s.e, "deny1", 20*time.Second)
	d := denial(t, onlyResult(t, evs))
	if d.Status != agent.StatusDenied || d.DeniedBy != agent.DeniedByPermissions || d.FunctionID != "math::add" || d.RuleID == "" {
		t.Fatalf("denial %+v", d)
	}
	if s.calls.Load() != 0 {
		t.Fatal("a denied call ran")
	}
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
		t.Fatalf("the turn did not go on after the denial: %v", types(evs))
	}

	// The denial's args excerpt redacts secrets.
	startRun(t, s.e, "deny2", `/call secret::use {"mode":"raw","api_key":"sk-ant-abcdefghijklmnopqrstuvwxyz012345","nested":{"password":"hunter2"}}`)
	d = denial(t, onlyResult(t, events(t, s.e, "deny2", 20*time.Second)))
	if d.ArgsExcerpt == "" || strings.Contains(d.ArgsExcerpt, "sk-ant") || strings.Contains(d.ArgsExcerpt, "hunter2") || !strings.Contains(d.ArgsExcerpt, "api_key") {
		t.Fatalf("args_excerpt %q", d.ArgsExcerpt)
	}
}

// No policy worker: every call is denied gate_unavailable at once, and the
// turn finishes.
func TestChokepointFailsClosedWithoutPolicy(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStackPolicy(t, ns, "")
	startRun(t, s.e, "nopol", `/call math::add {"a":1,"b":2}`)
	evs := events(t, s.e, "nopol", 20*time.Second)
	if d := denial(t, onlyResult(t, evs)); d.DeniedBy != agent.DeniedByGateUnavailable {
		t.Fatalf("denial %+v", d)
	}
	if s.calls.Load() != 0 {
		t.Fatal("a call ran without a policy")
	}
}

// A policy that never answers: the call is denied gate_unavailable after
// the 5 s budget, and the turn finishes.
func TestChokepointFailsClosedOnPolicyTimeout(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStackPolicy(t, ns, "")
	w, err := s.e.Worker("stuck-policy")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "policy::check_permissions", Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	startRun(t, s.e, "stuck", `/call math::add {"a":1,"b":2}`)
	evs := events(t, s.e, "stuck", 30*time.Second)
	if d := denial(t, onlyResult(t, evs)); d.DeniedBy != agent.DeniedByGateUnavailable {
		t.Fatalf("denial %+v", d)
	}
	if took := time.Since(start); took < 4*time.Second || took > 20*time.Second {
		t.Fatalf("the turn took %v; the gate's budget is 5 s", took)
	}
	if s.calls.Load() != 0 {
		t.Fatal("a call ran without a policy answer")
	}
}

func TestApprovalAllowResumesTurn(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startGated(t, ns, noRules)
	ctx := context.Background()
	startRun(t, s.e, "ap1", `/call math::add {"a":2,"b":40}`)
	view := waitState(t, s.e, "ap1", agent.StateFunctionAwaitingApproval)
	if len(view.AwaitingApproval) != 1 || !strings.HasPrefix(view.AwaitingApproval[0].ArgsHash, "sha256:") {
		t.Fatalf("view %+v", view)
	}
	p := view.AwaitingApproval[0]
	var list approval.ListPendingResponse
	if err := s.e.Trigger(ctx, "approval::list_pending", map[string]any{"session_id": "ap1"}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Pending) != 1 || list.Pending[0].FunctionCallID != p.FunctionCallID || list.Pending[0].ArgsHash != p.ArgsHash || list.Pending[0].FunctionID != "math::add" {
		t.Fatalf("list_pending %+v, parked %+v", list, p)
	}
	if s.calls.Load() != 0 {
		t.Fatal("a parked call ran")
	}
	// A decision bound to other arguments is refused.
	if _, err := resolve(ctx, s.e.Conn(), map[string]any{"session_id": "ap1", "function_call_id": p.FunctionCallID, "decision": "allow",
		"args_hash": "sha256:" + strings.Repeat("0", 64)}); !errors.Is(err, wire.ErrNotPending) {
		t.Fatalf("resolve with another args hash: %v", err)
	}
	if _, err := resolve(ctx, s.e.Conn(), map[string]any{"session_id": "ap1", "function_call_id": p.FunctionCallID, "decision": "allow", "args_hash": p.ArgsHash}); err != nil {
		t.Fatal(err)
	}
	evs := events(t, s.e, "ap1", 20*time.Second)
	seq := strings.Join(types(evs), " ")
	if !strings.Contains(seq, "approval_requested") || !strings.Contains(seq, "turn_state_changed:function_awaiting_approval") {
		t.Fatalf("events %s", seq)
	}
	if r := onlyResult(t, evs); r.Result == nil || r.Result.IsError || !strings.Contains(r.Result.Content[0].Text, "42") {
		t.Fatalf("result %+v", r.Result)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("the approved call ran %d times", n)
	}
	// Consumed once: the same decision again (a retry after a lost
	// reply) is answered as recorded and runs nothing; another decision
	// is refused.
	if out, err := resolve(ctx, s.e.Conn(), map[string]any{"session_id": "ap1", "function_call_id": p.FunctionCallID, "decision": "allow"}); err != nil || out["already_decided"] != true {
		t.Fatalf("second resolve: %v, %v", out, err)
	}
	if _, err := resolve(ctx, s.e.Conn(), map[string]any{"session_id": "ap1", "function_call_id": p.FunctionCallID, "decision": "deny"}); !errors.Is(err, wire.ErrNotPending) {
		t.Fatalf("another decision: %v", err)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		if err := s.e.Trigger(ctx, "approval::list_pending", map[string]any{}, &list); err != nil {
			return err
		}
		if len(list.Pending) != 0 {
			return fmt.Errorf("still pending: %+v", list.Pending)
		}
		return nil
	})
}

func TestApprovalDenyAndAbort(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startGated(t, ns, noRules)
	ctx := context.Background()

	startRun(t, s.e, "apd", `/call math::add {"a":1,"b":1}`)
	p := waitState(t, s.e, "apd", agent.StateFunctionAwaitingApproval).AwaitingApproval[0]
	if _, err := resolve(ctx, s.e.Conn(), map[string]any{"session_id": "apd", "function_call_id": p.FunctionCallID, "decision": "deny", "reason": "not now"}); err != nil {
		t.Fatal(err)
	}
	d := denial(t, onlyResult(t, events(t, s.e, "apd", 20*time.Second)))
	if d.DeniedBy != agent.DeniedByUser || d.Reason != "not now" {
		t.Fatalf("denial %+v", d)
	}

	startRun(t, s.e, "apa", `/call math::add {"a":1,"b":1}`)
	p = waitState(t, s.e, "apa", agent.StateFunctionAwaitingApproval).AwaitingApproval[0]
	if _, err := resolve(ctx, s.e.Conn(), map[string]any{"session_id": "apa", "function_call_id": p.FunctionCallID, "decision": "aborted"}); err != nil {
		t.Fatal(err)
	}
	evs := events(t, s.e, "apa", 20*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopAborted {
		t.Fatalf("stop reason %q: %v", last.StopReason, types(evs))
	}
	if s.calls.Load() != 0 {
		t.Fatal("a denied or aborted call ran")
	}
}

// The rest of a batch runs while one call is parked.
func TestApprovalParksOneCallOfABatch(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startGated(t, ns, "version: 1\nrules:\n  - \"echo::*\"\n")
	var echoed atomic.Int64
	w, err := s.e.Worker("echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "echo::ping", Handler: func(context.Context, *engine.Request) (any, error) {
		echoed.Add(1)
		return map[string]string{"pong": "yes"}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	startRun(t, s.e, "batch", "/call math::add {\"a\":1,\"b\":1}\n/call echo::ping {}")
	p := waitState(t, s.e, "batch", agent.StateFunctionAwaitingApproval).AwaitingApproval[0]
	if echoed.Load() != 1 || s.calls.Load() != 0 {
		t.Fatalf("while parked: echo ran %d, add ran %d", echoed.Load(), s.calls.Load())
	}
	if _, err := resolve(context.Background(), s.e.Conn(), map[string]any{"session_id": "batch", "function_call_id": p.FunctionCallID, "decision": "allow"}); err != nil {
		t.Fatal(err)
	}
	evs := events(t, s.e, "batch", 20*time.Second)
	if len(results(evs)) != 2 || s.calls.Load() != 1 || echoed.Load() != 1 {
		t.Fatalf("after approval: %d results, add ran %d, echo ran %d", len(results(evs)), s.calls.Load(), echoed.Load())
	}
	// Results keep the model's order.
	var ends []agent.Event
	for _, ev := range evs {
		if ev.Type == agent.EventTurnEnd {
			ends = append(ends, ev)
		}
	}
	if len(ends) == 0 || len(ends[0].FunctionResults) != 2 || ends[0].FunctionResults[0].FunctionID != "math::add" {
		t.Fatalf("turn_end %+v", ends)
	}
}

// The approval settings: full and always_allow skip the human; auto skips
// it for idempotent functions; the model can never change them.
func TestApprovalSettings(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startGated(t, ns, noRules)
	ctx := context.Background()
	set := func(sid string, req map[string]any) {
		t.Helper()
		req["session_id"] = sid
		if err := s.e.Trigger(ctx, "approval::settings::set", req, nil); err != nil {
			t.Fatal(err)
		}
	}
	set("full", map[string]any{"mode": "full"})
	startRun(t, s.e, "full", `/call math::add {"a":1,"b":1}`)
	if r := onlyResult(t, events(t, s.e, "full", 20*time.Second)); r.Result.IsError {
		t.Fatalf("mode full: %+v", r.Result)
	}
	set("always", map[string]any{"always_allow": []string{"math::*"}})
	startRun(t, s.e, "always", `/call math::add {"a":1,"b":1}`)
	if r := onlyResult(t, events(t, s.e, "always", 20*time.Second)); r.Result.IsError {
		t.Fatalf("always_allow: %+v", r.Result)
	}
	if s.calls.Load() != 2 {
		t.Fatalf("math::add ran %d times, want 2", s.calls.Load())
	}
	// A pattern stored before it was refused ("**" matches every
	// function) pre-approves nothing: the call parks.
	kv, err := s.e.JetStream().KeyValue(ctx, subjects.ApprovalSettingsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "starstar", []byte(`{"session_id":"starstar","mode":"manual","always_allow":["**"]}`)); err != nil {
		t.Fatal(err)
	}
	startRun(t, s.e, "starstar", `/call math::add {"a":1,"b":1}`)
	waitState(t, s.e, "starstar", agent.StateFunctionAwaitingApproval)
	// auto: turn::get_state is idempotent, math::add is not.
	set("auto", map[string]any{"mode": "auto"})
	startRun(t, s.e, "auto", "/call turn::get_state {\"session_id\":\"auto\"}")
	if r := onlyResult(t, events(t, s.e, "auto", 20*time.Second)); r.Result.IsError {
		t.Fatalf("auto, idempotent: %+v", r.Result)
	}
	startRun(t, s.e, "auto", `/call math::add {"a":1,"b":1}`)
	waitState(t, s.e, "auto", agent.StateFunctionAwaitingApproval)

	// Self-escalation: even a policy that allows everything does not let
	// the model change its settings or resolve its approvals.
	s2 := startGated(t, enginetest.RunServer(t), allowAll)
	for i, call := range []string{
		`/call approval::settings::set {"session_id":"esc","mode":"full"}`,
		`/call approval::resolve {"session_id":"esc","function_call_id":"x","decision":"allow"}`,
	} {
		sid := fmt.Sprintf("esc%d", i)
		startRun(t, s2.e, sid, call)
		d := denial(t, onlyResult(t, events(t, s2.e, sid, 20*time.Second)))
		if d.DeniedBy != agent.DeniedByPermissions || d.RuleID != agent.RuleHumanOnly {
			t.Fatalf("%s: denial %+v", call, d)
		}
	}
	var st agent.ApprovalSettings
	if err := s2.e.Trigger(ctx, "approval::settings::get", map[string]any{"session_id": "esc"}, &st); err != nil || st.Mode != agent.ApprovalManual {
		t.Fatalf("settings after the attempt: %+v, %v", st, err)
	}
}

// Hooks are plain NATS subscribers: one blocks a call, one rewrites its
// arguments, one redacts a result.
func TestHooksFromPlainNATSClients(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startGated(t, ns, "version: 1\nrules:\n  - \"math::add\"\n  - function: \"math::*\"\n    action: deny\n")
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	reply := func(m *nats.Msg, v any) {
		b, _ := json.Marshal(v)
		_ = m.Respond(b)
	}
	if _, err := nc.Subscribe("iii.hook.agent.before_function_call", func(m *nats.Msg) {
		var p struct {
			SessionID string         `json:"session_id"`
			Args      map[string]any `json:"args"`
		}
		_ = json.Unmarshal(m.Data, &p)
		switch p.SessionID {
		case "hblock":
			reply(m, map[string]any{"block": true, "reason": "no adding today"})
		case "hblock_str":
			reply(m, map[string]any{"block": "true", "reason": "a string"})
		case "hrewrite":
			reply(m, map[string]any{"args": map[string]any{"a": 40, "b": 2}})
		case "hrewrite_denied":
			reply(m, map[string]any{"args": map[string]any{"a": "x"}, "function_id": "ignored"})
		default:
			reply(m, map[string]any{})
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe("iii.hook.agent.after_function_call", func(m *nats.Msg) {
		var p struct {
			SessionID string `json:"session_id"`
		}
		_ = json.Unmarshal(m.Data, &p)
		if p.SessionID == "hredact" {
			reply(m, map[string]any{"result": map[string]any{"content": []map[string]any{{"type": "text", "text": "[redacted by hook]"}}}})
			return
		}
		reply(m, map[string]any{})
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	startRun(t, s.e, "hblock", `/call math::add {"a":1,"b":1}`)
	d := denial(t, onlyResult(t, events(t, s.e, "hblock", 20*time.Second)))
	if d.DeniedBy != agent.DeniedByHook || d.Reason != "no adding today" {
		t.Fatalf("blocked: %+v", d)
	}
	if s.calls.Load() != 0 {
		t.Fatal("a blocked call ran")
	}

	// A block that is no boolean may have meant one: it blocks (fail
	// closed). Before, it was ignored and the call ran.
	startRun(t, s.e, "hblock_str", `/call math::add {"a":1,"b":1}`)
	if d := denial(t, onlyResult(t, events(t, s.e, "hblock_str", 20*time.Second))); d.DeniedBy != agent.DeniedByHook || !strings.Contains(d.Reason, "not a boolean") {
		t.Fatalf("blocked by a string: %+v", d)
	}
	if s.calls.Load() != 0 {
		t.Fatal("a call blocked by a string block ran")
	}

	startRun(t, s.e, "hrewrite", `/call math::add {"a":1,"b":1}`)
	if r := onlyResult(t, events(t, s.e, "hrewrite", 20*time.Second)); r.Result.IsError || !strings.Contains(r.Result.Content[0].Text, "42") {
		t.Fatalf("rewritten: %+v", r.Result)
	}

	startRun(t, s.e, "hredact", `/call math::add {"a":1,"b":1}`)
	evs := events(t, s.e, "hredact", 20*time.Second)
	if r := onlyResult(t, evs); r.Result.Content[0].Text != "[redacted by hook]" {
		t.Fatalf("redacted: %+v", r.Result)
	}
	for _, ev := range evs {
		if ev.Type == agent.EventMessageComplete && strings.Contains(fmt.Sprint(ev.Message), "sum") {
			t.Fatalf("the model saw the unredacted result: %+v", ev.Message)
		}
	}
	if n := s.calls.Load(); n != 2 {
		t.Fatalf("math::add ran %d times, want 2", n)
	}
}

// agent::trigger goes through the same chokepoint.
func TestAgentTriggerChokepoint(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startGated(t, ns, "version: 1\nrules:\n  - \"math::add\"\n  - \"!echo::*\"\n")
	ctx := context.Background()
	call := func(fn string, payload map[string]any) agent.FunctionResult {
		t.Helper()
		var res agent.FunctionResult
		if err := s.e.Trigger(ctx, "agent::trigger", map[string]any{"session_id": "at", "function": fn, "payload": payload}, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if r := call("math::add", map[string]any{"a": 1, "b": 2}); r.IsError || !strings.Contains(r.Content[0].Text, "3") {
		t.Fatalf("allowed: %+v", r)
	}
	for _, tt := range []struct {
		fn, by, rule string
	}{
		{"echo::ping", agent.DeniedByPermissions, ""},
		{"other::thing", agent.DeniedByPermissions, "needs_approval"},
		{"approval::resolve", agent.DeniedByPermissions, agent.RuleHumanOnly},
	} {
		r := call(tt.fn, map[string]any{"token": "secret-value"})
		b, _ := json.Marshal(r.Details)
		var d agent.Denial
		_ = json.Unmarshal(b, &d)
		if !r.IsError || d.DeniedBy != tt.by || (tt.rule != "" && d.RuleID != tt.rule) || strings.Contains(d.ArgsExcerpt, "secret-value") {
			t.Fatalf("%s: %+v %+v", tt.fn, r, d)
		}
	}
	if s.calls.Load() != 1 {
		t.Fatalf("math::add ran %d times", s.calls.Load())
	}
}

// A decision written while no orchestrator runs is acted on when one
// comes back; the call runs once.
func TestApprovalDecidedWhileOrchestratorDown(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startGated(t, ns, noRules)
	ctx := context.Background()
	startRun(t, s.e, "down", `/call math::add {"a":20,"b":22}`)
	p := waitState(t, s.e, "down", agent.StateFunctionAwaitingApproval).AwaitingApproval[0]
	if err := s.orch.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := resolve(ctx, s.e.Conn(), map[string]any{"session_id": "down", "function_call_id": p.FunctionCallID, "decision": "allow"}); err != nil {
		t.Fatal(err)
	}
	o2 := orchestrator.New()
	if err := o2.Start(ctx, enginetest.NewEngine(t, ns)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o2.Close(context.Background()) })
	if r := onlyResult(t, events(t, s.e, "down", 20*time.Second)); r.Result.IsError || !strings.Contains(r.Result.Content[0].Text, "42") {
		t.Fatalf("result %+v", r.Result)
	}
	if s.calls.Load() != 1 {
		t.Fatalf("the approved call ran %d times", s.calls.Load())
	}
}

// A crash between parking a call and recording it in the approvals bucket
// (simulated by deleting the record) is repaired when an orchestrator
// starts: the call is listed again and can be resolved.
func TestApprovalRecordRestoredAtStart(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startGated(t, ns, noRules)
	ctx := context.Background()
	startRun(t, s.e, "lost", `/call math::add {"a":1,"b":1}`)
	p := waitState(t, s.e, "lost", agent.StateFunctionAwaitingApproval).AwaitingApproval[0]
	if err := s.orch.Close(ctx); err != nil {
		t.Fatal(err)
	}
	kv, err := s.e.JetStream().KeyValue(ctx, "iii-approvals")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "lost."+p.FunctionCallID); err != nil {
		t.Fatal(err)
	}
	o2 := orchestrator.New()
	if err := o2.Start(ctx, enginetest.NewEngine(t, ns)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o2.Close(context.Background()) })
	var list approval.ListPendingResponse
	if err := s.e.Trigger(ctx, "approval::list_pending", map[string]any{"session_id": "lost"}, &list); err != nil || len(list.Pending) != 1 {
		t.Fatalf("list_pending after restart = %+v, %v", list, err)
	}
	if _, err := resolve(ctx, s.e.Conn(), map[string]any{"session_id": "lost", "function_call_id": p.FunctionCallID, "decision": "allow"}); err != nil {
		t.Fatal(err)
	}
	if r := onlyResult(t, events(t, s.e, "lost", 20*time.Second)); r.Result.IsError {
		t.Fatalf("result %+v", r.Result)
	}
}

// Another client overwrites a parked call's approval record with bytes
// that are no record: the orchestrators' approvals watcher writes the
// pending record again from the turn record, so the call is listed and
// can be decided, and the run ends normally.
func TestApprovalRecordOverwrittenWithGarbage(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startGated(t, ns, noRules)
	ctx := context.Background()
	startRun(t, s.e, "garbled", `/call math::add {"a":20,"b":22}`)
	p := waitState(t, s.e, "garbled", agent.StateFunctionAwaitingApproval).AwaitingApproval[0]
	kv, err := s.e.JetStream().KeyValue(ctx, "iii-approvals")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "garbled."+p.FunctionCallID, []byte("\x00garbage")); err != nil {
		t.Fatal(err)
	}
	var list approval.ListPendingResponse
	enginetest.Eventually(t, 10*time.Second, func() error {
		if err := s.e.Trigger(ctx, "approval::list_pending", map[string]any{"session_id": "garbled"}, &list); err != nil {
			return err
		}
		if len(list.Pending) != 1 || list.Pending[0].ArgsHash != p.ArgsHash {
			return fmt.Errorf("pending %+v", list.Pending)
		}
		return nil
	})
	if _, err := resolve(ctx, s.e.Conn(), map[string]any{"session_id": "garbled", "function_call_id": p.FunctionCallID, "decision": "allow", "args_hash": p.ArgsHash}); err != nil {
		t.Fatal(err)
	}
	if r := onlyResult(t, events(t, s.e, "garbled", 20*time.Second)); r.Result == nil || r.Result.IsError || !strings.Contains(r.Result.Content[0].Text, "42") {
		t.Fatalf("result %+v", r.Result)
	}
}

// A call that is not answered in time (its worker's node died, the reply
// was lost, or it overran its declared limit) may have run: its result
// says the outcome is unknown, as after a crash, not only "timeout",
// which a model would take as safe to repeat.
func TestCallTimeoutOutcomeUnknown(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	w, err := enginetest.NewEngine(t, ns).Worker("slow")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "slow::charge", Timeout: 200 * time.Millisecond, Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
		// It did its work; its answer is what is lost.
		time.Sleep(1500 * time.Millisecond)
		return map[string]any{"charged": true}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	startRun(t, s.e, "slow1", `/call slow::charge {}`)
	r := onlyResult(t, events(t, s.e, "slow1", 20*time.Second))
	if r.Result == nil {
		t.Fatal("no result")
	}
	details, _ := r.Result.Details.(map[string]any)
	if !r.Result.IsError || !strings.HasPrefix(r.Result.Content[0].Text, "interrupted: outcome unknown (") ||
		details["outcome"] != "unknown" || details["code"] != "timeout" {
		t.Fatalf("result %+v", r.Result)
	}
}
