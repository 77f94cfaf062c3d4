package e2e_test

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
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/approval"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/policy"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// A model's function call whose arguments hold integers past 2^53 (an
// int64 id, a uint64) reaches the function with them exact, through the
// provider, the turn record, the approval a human gives it, the events a
// client reads and the function's result the model quotes back: none of
// them goes through a float64 (1234567890123456789 used to arrive as
// 1234567890123456800). Each worker is on its own connection.
func TestLargeIntegersExact(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	process := func() *node { return &node{t: t, e: enginetest.NewEngine(t, ns)} }
	env := workers.Env{Home: t.TempDir()}
	infra, orch, model, tool, client := process(), process(), process(), process(), process()
	infra.start(policy.NewWorker("", policy.WithFallback([]byte("version: 1\nrules: []\n"))), env) // every call needs a human
	infra.start(approval.NewWorker(), env)
	infra.start(sessiontree.NewWorker(), env)
	p, err := scripted.New()
	if err != nil {
		t.Fatal(err)
	}
	model.start(scripted.NewWorker(p), env)
	var (
		mu  sync.Mutex
		got map[string]any
	)
	w, err := tool.e.Worker("tools")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "ids::echo", Handler: func(_ context.Context, r *engine.Request) (any, error) {
		var args map[string]any
		if err := r.Bind(&args); err != nil {
			return nil, err
		}
		mu.Lock()
		got = args
		mu.Unlock()
		return map[string]any{"echo": args["id"]}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	orch.start(orchestrator.New(), env)

	const (
		sid  = "ids"
		id   = int64(1234567890123456789)
		big  = uint64(18446744073709551615)
		call = `/call ids::echo {"id":1234567890123456789,"nested":{"big":18446744073709551615,"list":[9007199254740993]},"f":0.5}`
	)
	ctx := context.Background()
	var res struct {
		Started bool `json:"started"`
	}
	if err := client.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(call)}}, &res); err != nil || !res.Started {
		t.Fatalf("run::start = %+v, %v", res, err)
	}
	checkArgs := func(where string, args map[string]any) {
		t.Helper()
		nested, _ := args["nested"].(map[string]any)
		list, _ := nested["list"].([]any)
		if fmt.Sprint(args["id"]) != fmt.Sprint(id) || fmt.Sprint(nested["big"]) != fmt.Sprint(big) || len(list) != 1 || fmt.Sprint(list[0]) != "9007199254740993" || args["f"] != 0.5 {
			t.Errorf("%s: args %#v", where, args)
		}
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
	checkArgs("the parked call", parked.Args)
	var pending approval.ListPendingResponse
	if err := client.e.Trigger(ctx, "approval::list_pending", map[string]string{"session_id": sid}, &pending); err != nil || len(pending.Pending) != 1 {
		t.Fatalf("list_pending = %+v, %v", pending, err)
	}
	checkArgs("approval::list_pending", pending.Pending[0].Args)
	if err := client.e.Trigger(ctx, "approval::resolve", map[string]any{"session_id": sid, "function_call_id": parked.FunctionCallID, "decision": "allow"}, nil); err != nil {
		t.Fatal(err)
	}
	evs := client.events(sid, 30*time.Second)
	mu.Lock()
	checkArgs("the function", got)
	mu.Unlock()
	var answer string
	for _, ev := range evs {
		switch {
		case ev.Type == agent.EventFunctionExecutionStart:
			checkArgs("function_execution_start", ev.Args)
		case ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Role == agent.RoleAssistant:
			for _, c := range ev.Message.Content {
				answer += c.Text
			}
		}
	}
	if !strings.Contains(answer, `{"echo":1234567890123456789}`) {
		t.Errorf("the model's answer %q does not quote the exact result", answer)
	}
}
