package budget_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/budget"
)

// Example caps a workspace at $1 a day, reserves before two model calls,
// settles the first, and is refused on the second.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	e := x.Engine
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	w := budget.NewWorker()
	if err := w.Start(ctx, e); err != nil {
		panic(err)
	}
	defer w.Close(ctx)

	// A human sets the ceiling.
	b, err := engine.Call[budget.Budget](ctx, e, budget.CreateFunction, budget.CreateRequest{
		BudgetID: "ws1-daily", WorkspaceID: "ws1", CeilingUSD: 1, Period: budget.PeriodDay,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("budget:", b.BudgetID, b.CeilingUSD, b.Period, b.AlertThresholds)

	// The orchestrator, around a model call.
	res, err := engine.Call[budget.ReserveResponse](ctx, e, budget.ReserveFunction, budget.ReserveRequest{
		WorkspaceID: "ws1", AgentID: "coder", EstimatedUSD: 0.6, ReservationID: "call-1",
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("reserved: remaining $%v\n", res.Budgets[0].RemainingUSD)
	set, err := engine.Call[budget.SettleResponse](ctx, e, budget.SettleFunction, budget.SettleRequest{
		ReservationID: "call-1", ActualUSD: 0.7,
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("settled: spent $%v, remaining $%v\n", set.Budgets[0].SpentUSD, set.Budgets[0].RemainingUSD)

	_, err = engine.Call[budget.ReserveResponse](ctx, e, budget.ReserveFunction, budget.ReserveRequest{
		WorkspaceID: "ws1", AgentID: "coder", EstimatedUSD: 0.5, ReservationID: "call-2",
	})
	fmt.Println("stop the turn:", errors.Is(err, wire.ErrBudgetExceeded))
	fmt.Println(err)
	// Output:
	// budget: ws1-daily 1 day [0.5 0.8 1]
	// reserved: remaining $0.4
	// settled: spent $0.7, remaining $0.3
	// stop the turn: true
	// budget_exceeded: budget ws1-daily (workspace ws1) cannot hold $0.5: ceiling $1 per day, $0.3 remaining
}
