package orchestrator_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/budget"
)

// crashPricedCatalog prices the scripted echo model for the node's models
// worker: $1 per million tokens in (the node offers every function of
// its catalog as a tool: the estimate counts their schemas), $1,000 out,
// at most 100 out.
const crashPricedCatalog = `{"models": [{"provider": "scripted", "id": "echo", "display_name": "echo (priced)",
  "context_window": 1000000, "max_output_tokens": 100, "supports_tools": true,
  "pricing": {"input_per_1m": 1, "output_per_1m": 1000}}]}`

// Killed while a budgeted model call streams, after its reservation: the
// restarted node calls the model again, and the budget counts the dead
// call's hold (its estimate: what it spent is unknown, the provider may
// have charged it) as well as the replayed call's cost. Before, the
// replay reserved under the same id, found the old hold granted and
// settled it with its own cost: the dead call's spend was never counted.
func TestCrashMidStreamBudgeted(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	catalog := filepath.Join(home, "priced.json")
	if err := os.WriteFile(catalog, []byte(crashPricedCatalog), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startCrashNode(t, "models.file="+catalog)
	tl := newCrashTools(t, n.url())
	js := tl.e.JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ws, sid = "ws_crash", "crash_budget"
	if err := tl.e.Trigger(ctx, budget.CreateFunction, budget.CreateRequest{WorkspaceID: ws, CeilingUSD: 100, Period: budget.PeriodDay}, nil); err != nil {
		t.Fatal(err)
	}
	usage := func() (spent, held float64, err error) {
		var u budget.UsageResponse
		uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := tl.e.Trigger(uctx, budget.UsageFunction, budget.UsageRequest{WorkspaceID: ws}, &u); err != nil {
			return 0, 0, err
		}
		if len(u.Budgets) != 1 {
			return 0, 0, fmt.Errorf("budgets %+v", u.Budgets)
		}
		return u.Budgets[0].SpentUSD, u.Budgets[0].ReservedUSD, nil
	}
	var res struct {
		Started bool `json:"started"`
	}
	// The first call sleeps 3 s before it answers, long enough to kill
	// the node with the hold in place; its replay sleeps again.
	if err := tl.e.Trigger(ctx, "run::start", agent.RunStart{
		SessionID: sid, Provider: "scripted", Model: "echo", SystemPrompt: "Be brief.", WorkspaceID: ws,
		Messages: []agent.Message{userText("/sleep 3000\nhello")},
	}, &res); err != nil || !res.Started {
		t.Fatalf("run::start = %+v, %v", res, err)
	}
	var estimate float64
	enginetest.Eventually(t, 15*time.Second, func() error {
		spent, held, err := usage()
		if err != nil {
			return err
		}
		if held == 0 || spent != 0 {
			return fmt.Errorf("spent %v, held %v: no hold yet", spent, held)
		}
		estimate = held
		return nil
	})
	n.restart()

	evs := crashWaitAgentEnds(t, js, sid, 1, 30*time.Second)
	crashCheckEvents(t, sid, evs)
	if sr := crashStopReason(evs); sr != agent.StopEnd {
		t.Fatalf("stop reason %q: %v", sr, crashTypes(evs))
	}
	var cost float64
	for _, ev := range evs {
		if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Usage != nil {
			cost = ev.Message.Usage.CostUSD
		}
	}
	if cost <= 0 {
		t.Fatalf("the replayed call has no cost: %v", crashTypes(evs))
	}
	var spent, held float64
	enginetest.Eventually(t, 10*time.Second, func() error {
		var err error
		if spent, held, err = usage(); err != nil {
			return err
		}
		if held != 0 {
			return fmt.Errorf("still held %v", held)
		}
		return nil
	})
	if want := estimate + cost; math.Abs(spent-want) > 1e-6 {
		t.Fatalf("spent %v, want the dead call's estimate %v + the replay's cost %v = %v", spent, estimate, cost, want)
	}
}
