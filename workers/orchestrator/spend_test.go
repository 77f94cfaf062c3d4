package orchestrator_test

// Models and money in the turn loop: capability checks at run::start,
// budgets reserved before every model call and settled after, a run that
// runs out of budget mid-conversation, and many sessions against one
// budget.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/budget"
	"github.com/iii-on-nats/iii/workers/models"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// pricedEcho is the scripted echo model with a price: $1,000 per million
// tokens in and out, at most 100 output tokens.
var pricedEcho = agent.Model{
	ID: "echo", Provider: "scripted", DisplayName: "echo (priced)", ContextWindow: 1_000_000, MaxOutputTokens: 100,
	SupportsTools: true, Pricing: agent.Pricing{InputPer1M: 1000, OutputPer1M: 1000},
}

// startMoney is a stack (allow-all policy) with a model catalog of catalog
// and the budget worker.
func startMoney(t *testing.T, ns *server.Server, catalog ...agent.Model) *stack {
	t.Helper()
	s := startStack(t, ns)
	ctx := context.Background()
	mw := models.NewWorker(models.WithCatalog(catalog))
	if err := mw.Start(ctx, s.e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mw.Close(context.Background()) })
	bw := budget.NewWorker()
	if err := bw.Start(ctx, s.e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bw.Close(context.Background()) })
	return s
}

func createBudget(t *testing.T, s *stack, ws string, ceiling float64) string {
	t.Helper()
	var b budget.Budget
	if err := s.e.Trigger(context.Background(), "budget::create", map[string]any{"ceiling_usd": ceiling, "period": "day", "workspace_id": ws}, &b); err != nil {
		t.Fatal(err)
	}
	return b.BudgetID
}

func spent(t *testing.T, s *stack, ws string) (spent, reserved float64) {
	t.Helper()
	var u budget.UsageResponse
	if err := s.e.Trigger(context.Background(), "budget::usage", map[string]any{"workspace_id": ws}, &u); err != nil || len(u.Budgets) != 1 {
		t.Fatalf("budget::usage = %+v, %v", u, err)
	}
	return u.Budgets[0].SpentUSD, u.Budgets[0].ReservedUSD
}

func TestBudgetRunsOutMidConversation(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startMoney(t, ns, pricedEcho)
	// The runs bring a short system prompt (the assembled one would change
	// the estimates). The first call holds ~$0.17 (100 output tokens and the prompt at
	// $1,000 per million) and costs $0.02; the second holds more than the
	// $0.17 left.
	createBudget(t, s, "ws1", 0.19)
	ctx := context.Background()
	var res orchestrator.RunStartResult
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{
		SessionID: "money1", Provider: "scripted", Model: "echo", SystemPrompt: "Be brief.", WorkspaceID: "ws1", Tools: []string{"math::*"},
		Messages: []agent.Message{userText(`/call math::add {"a":1,"b":2}`)},
	}, &res); err != nil || !res.Started {
		t.Fatalf("run::start = %+v, %v", res, err)
	}
	evs := events(t, s.e, "money1", 20*time.Second)
	last := evs[len(evs)-1]
	if last.StopReason != agent.StopBudgetExceeded {
		t.Fatalf("stop reason %q: %v", last.StopReason, types(evs))
	}
	if s.calls.Load() != 1 {
		t.Fatalf("the function ran %d times; the first model call fits the budget", s.calls.Load())
	}
	var firstCost float64
	for _, ev := range evs {
		if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Role == agent.RoleAssistant && ev.Message.Usage != nil {
			firstCost = ev.Message.Usage.CostUSD
			break
		}
	}
	sp, held := spent(t, s, "ws1")
	if firstCost <= 0 || fmt.Sprintf("%.6f", sp) != fmt.Sprintf("%.6f", firstCost) || held != 0 {
		t.Fatalf("spent %v (held %v), the first call cost %v", sp, held, firstCost)
	}
}

// Many sessions in parallel against one budget never overspend it by
// more than one call's estimate.
func TestBudgetManySessions(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startMoney(t, ns, pricedEcho)
	const ceiling = 0.5
	createBudget(t, s, "ws50", ceiling)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		stops = map[agent.StopReason]int{}
	)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := fmt.Sprintf("many%d", i)
			var res orchestrator.RunStartResult
			if err := s.e.Trigger(context.Background(), "run::start", agent.RunStart{
				SessionID: sid, Provider: "scripted", Model: "echo", SystemPrompt: "Be brief.", WorkspaceID: "ws50", ToolMode: agent.ToolsNone,
				Messages: []agent.Message{userText("hello from a session that spends")},
			}, &res); err != nil || !res.Started {
				t.Errorf("run::start %s = %+v, %v", sid, res, err)
				return
			}
			evs := events(t, s.e, sid, 60*time.Second)
			mu.Lock()
			stops[evs[len(evs)-1].StopReason]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	sp, held := spent(t, s, "ws50")
	// One call's estimate: the prompt's characters and 100 output tokens
	// at $1,000 per million.
	maxEstimate := (200.0*1000 + 100*1000) / 1e6
	t.Logf("stops %v, spent %.4f of %.2f, held %.4f", stops, sp, ceiling, held)
	if sp > ceiling+maxEstimate || held != 0 {
		t.Fatalf("spent %v (held %v) over a ceiling of %v", sp, held, ceiling)
	}
	if stops[agent.StopBudgetExceeded] == 0 || stops[agent.StopEnd] == 0 {
		t.Fatalf("stops %v: want some runs to end and some to hit the budget", stops)
	}
}

// run::start refuses what the model cannot do, before any spend.
func TestRunStartChecksCapabilities(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startMoney(t, ns, pricedEcho) // echo: tools, no vision, no thinking
	img := agent.Message{Role: agent.RoleUser, Timestamp: 1, Content: []agent.Content{{Type: agent.ContentImage, Mime: "image/png", Data: "iVBORw0KGgo="}}}
	for _, tt := range []struct {
		name string
		rs   agent.RunStart
		want string
	}{
		{"image to a model without vision", agent.RunStart{Messages: []agent.Message{img}}, "vision"},
		{"thinking", agent.RunStart{ThinkingLevel: "high", Messages: []agent.Message{userText("hi")}}, "thinking"},
	} {
		rs := tt.rs
		rs.SessionID, rs.Provider, rs.Model = "cap", "scripted", "echo"
		err := s.e.Trigger(context.Background(), "run::start", rs, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	var view *agent.TurnView
	if err := s.e.Trigger(context.Background(), "turn::get_state", map[string]string{"session_id": "cap"}, &view); err != nil || view != nil {
		t.Fatalf("a refused run left a record: %+v, %v", view, err)
	}
}

// A settle that finds no budget worker (it restarts while the model
// streams) is tried again until one answers: the call's cost is counted
// and its hold released. Before, one failed try left the spend uncounted
// and the estimate held until its TTL.
func TestSettleWaitsForTheBudgetWorker(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	mw := models.NewWorker(models.WithCatalog([]agent.Model{pricedEcho}))
	if err := mw.Start(ctx, s.e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mw.Close(context.Background()) })
	startBudget := func() *budget.Worker {
		bw := budget.NewWorker()
		if err := bw.Start(ctx, enginetest.NewEngine(t, ns)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bw.Close(context.Background()) })
		return bw
	}
	first := startBudget()
	createBudget(t, s, "ws-settle", 10)
	var res orchestrator.RunStartResult
	if err := s.e.Trigger(ctx, "run::start", agent.RunStart{
		SessionID: "settle1", Provider: "scripted", Model: "echo", SystemPrompt: "Be brief.", WorkspaceID: "ws-settle",
		Messages: []agent.Message{userText("/sleep 1500\nhello")},
	}, &res); err != nil || !res.Started {
		t.Fatalf("run::start = %+v, %v", res, err)
	}
	// The model call holds its estimate; then the budget worker goes away
	// until after the call ended.
	enginetest.Eventually(t, 10*time.Second, func() error {
		if _, held := spent(t, s, "ws-settle"); held == 0 {
			return fmt.Errorf("nothing held yet")
		}
		return nil
	})
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	startBudget()
	evs := events(t, s.e, "settle1", 30*time.Second)
	var cost float64
	for _, ev := range evs {
		if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Usage != nil {
			cost = ev.Message.Usage.CostUSD
		}
	}
	sp, held := spent(t, s, "ws-settle")
	if cost <= 0 || fmt.Sprintf("%.6f", sp) != fmt.Sprintf("%.6f", cost) || held != 0 {
		t.Fatalf("spent %v (held %v), the call cost %v: %v", sp, held, cost, types(evs))
	}
}
