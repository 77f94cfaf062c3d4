package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/approval"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/policy"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// One turn — a model call, a function call that waits for a human's
// approval, the model's answer — is one trace, across separate
// connections for the orchestrator, the provider, the tool and the rest:
// every span's parent is in the trace, and every span of the turn carries
// the session and message ids.
func TestOneTracePerTurn(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	process := func() *node { // one connection, one engine, as a process would have
		n := &node{t: t, e: enginetest.NewEngine(t, ns, engine.WithTracerProvider(tp))}
		return n
	}
	env := workers.Env{Home: t.TempDir()}
	infra, orch, model, tool, client := process(), process(), process(), process(), process()
	infra.start(policy.NewWorker("", policy.WithFallback([]byte("version: 1\nrules: []\n"))), env)
	infra.start(approval.NewWorker(), env)
	infra.start(sessiontree.NewWorker(), env)
	p, err := scripted.New()
	if err != nil {
		t.Fatal(err)
	}
	model.start(scripted.NewWorker(p), env)
	w, err := tool.e.Worker("tools")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "math::add", Handler: func(context.Context, *engine.Request) (any, error) {
		return map[string]int{"sum": 3}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	orch.start(orchestrator.New(), env)

	ctx := context.Background()
	const sid = "traced"
	var res orchestrator.HarnessResult
	if err := client.e.Trigger(ctx, "harness::trigger", orchestrator.HarnessTrigger{SessionID: sid, MessageID: "msg-1", Payload: agent.RunStart{
		SessionID: sid, Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(`/call math::add {"a":1,"b":2}`)},
	}}, &res); err != nil || !res.Body.Started {
		t.Fatalf("harness::trigger = %+v, %v", res, err)
	}
	var parked agent.PendingApproval
	enginetest.Eventually(t, 20*time.Second, func() error {
		var view *agent.TurnView
		if err := client.e.Trigger(ctx, "turn::get_state", map[string]string{"session_id": sid}, &view); err != nil {
			return err
		}
		if view == nil || len(view.AwaitingApproval) != 1 {
			return fmt.Errorf("turn %+v", view)
		}
		parked = view.AwaitingApproval[0]
		return nil
	})
	if err := client.e.Trigger(ctx, "approval::resolve", map[string]any{"session_id": sid, "function_call_id": parked.FunctionCallID, "decision": "allow"}, nil); err != nil {
		t.Fatal(err)
	}
	if evs := client.events(sid, 30*time.Second); evs[len(evs)-1].StopReason != agent.StopEnd {
		t.Fatalf("stop reason %q", evs[len(evs)-1].StopReason)
	}
	_ = tp.ForceFlush(ctx)

	spans := rec.Ended()
	var root sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "harness::trigger" {
			root = s
		}
	}
	if root == nil {
		t.Fatal("no harness::trigger span")
	}
	trace := root.SpanContext().TraceID()
	inTrace := map[string]bool{}
	ids := map[string]bool{}
	for _, s := range spans {
		if s.SpanContext().TraceID() == trace {
			inTrace[s.Name()] = true
			ids[s.SpanContext().SpanID().String()] = true
		}
	}
	// The resumed work links to the human's approval::resolve.
	var resolveTrace string
	for _, s := range spans {
		if s.Name() == "approval::resolve" {
			resolveTrace = s.SpanContext().TraceID().String()
		}
	}
	linked := false
	for _, s := range spans {
		if s.Name() == "approval resumed math::add" && s.SpanContext().TraceID() == trace {
			for _, l := range s.Links() {
				linked = linked || l.SpanContext.TraceID().String() == resolveTrace
			}
		}
	}
	if resolveTrace == "" || !linked {
		t.Errorf("no span of the run links to approval::resolve's trace %q", resolveTrace)
	}
	for _, want := range []string{"harness::trigger", "run::start", "chat echo", "provider::scripted::stream", "policy::check_permissions", "math::add", "session::append_batch", "approval resumed math::add"} {
		if !inTrace[want] {
			t.Errorf("the turn's trace lacks %s; it has %v", want, keys(inTrace))
		}
	}
	for _, s := range spans {
		if s.SpanContext().TraceID() != trace || s == root {
			continue
		}
		if p := s.Parent().SpanID().String(); !ids[p] {
			t.Errorf("span %s: parent %s is not in the trace", s.Name(), p)
		}
		attrs := map[attribute.Key]string{}
		for _, a := range s.Attributes() {
			attrs[a.Key] = a.Value.Emit()
		}
		if attrs[engine.AttrSessionID] != sid || attrs[engine.AttrMessageID] != "msg-1" {
			t.Errorf("span %s: session %q, message %q", s.Name(), attrs[engine.AttrSessionID], attrs[engine.AttrMessageID])
		}
		if s.Name() == "chat echo" {
			// The model call follows the GenAI semantic conventions.
			if attrs["gen_ai.operation.name"] != "chat" || attrs["gen_ai.provider.name"] != "scripted" || attrs["gen_ai.request.model"] != "echo" ||
				attrs["gen_ai.usage.output_tokens"] == "" || attrs["gen_ai.usage.output_tokens"] == "0" || attrs["gen_ai.response.finish_reasons"] == "" {
				t.Errorf("model span attributes %v", attrs)
			}
		}
	}
}

func keys(m map[string]bool) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return strings.Join(out, ", ")
}
