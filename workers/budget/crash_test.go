package budget

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// A settle that dies between its budgets: a second NATS user may not
// write one budget's spend key, so its settle stops there, the way a
// kill -9 between the two writes would. The retry, with the same or
// another actual cost, counts the first actual cost exactly once in
// every budget.
func TestSettleInterruptedBetweenBudgets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		deny        string  // the budget the crashing settle cannot write
		retryActual float64 // what the retry asks to count
	}{
		{"after the first budget, same actual", "b2", 0.9},
		{"after the first budget, other actual", "b2", 5},
		{"before any budget, other actual", "b1", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			deny := "$KV." + subjects.BudgetsBucket + "." + spendPrefix + tc.deny + ".>"
			ns := enginetest.RunServer(t, func(o *server.Options) {
				o.Users = []*server.User{
					{Username: "ok", Password: "ok"},
					{Username: "crash", Password: "crash", Permissions: &server.Permissions{
						Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{deny}},
					}},
				}
			})
			clk := newClock(t0)
			e, err := engine.New(enginetest.Connect(t, ns, nats.UserInfo("ok", "ok"), quiet))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close(context.Background()) })
			ok := openLedger(t, e, clk)
			crashEngine, err := engine.New(enginetest.Connect(t, ns, nats.UserInfo("crash", "crash"), quiet))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = crashEngine.Close(context.Background()) })
			crashing := openLedger(t, crashEngine, clk)

			ctx := ctxT(t)
			for _, req := range []CreateRequest{
				{BudgetID: "b1", WorkspaceID: "W", CeilingUSD: 10, Period: PeriodDay},
				{BudgetID: "b2", AgentID: "A", CeilingUSD: 10, Period: PeriodDay},
			} {
				if _, err := ok.Create(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := ok.Reserve(ctx, ReserveRequest{WorkspaceID: "W", AgentID: "A", EstimatedUSD: 1, ReservationID: "r1"}); err != nil {
				t.Fatal(err)
			}

			short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err = crashing.Settle(short, SettleRequest{ReservationID: "r1", ActualUSD: 0.9})
			cancel()
			if err == nil {
				t.Fatal("the crashing settle succeeded")
			}

			resp, err := ok.Settle(ctx, SettleRequest{ReservationID: "r1", ActualUSD: tc.retryActual})
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if len(resp.Budgets) != 2 {
				t.Fatalf("retry answered %+v", resp)
			}
			for _, s := range resp.Budgets {
				if !near(s.SpentUSD, 0.9) || s.ReservedUSD != 0 {
					t.Fatalf("budget %s after the retry: spent %v reserved %v, want 0.9 counted once", s.BudgetID, s.SpentUSD, s.ReservedUSD)
				}
			}
			ent, err := ok.kv.Get(ctx, resKey("r1"))
			if err != nil {
				t.Fatal(err)
			}
			var rec reservation
			if err := json.Unmarshal(ent.Value(), &rec); err != nil || rec.State != resSettled || rec.ActualUSD != 0.9 {
				t.Fatalf("record %+v, %v", rec, err)
			}
			// A third settle changes nothing.
			again, err := ok.Settle(ctx, SettleRequest{ReservationID: "r1", ActualUSD: 3})
			if err != nil || len(again.Budgets) != 2 || !near(again.Budgets[0].SpentUSD, 0.9) || !near(again.Budgets[1].SpentUSD, 0.9) {
				t.Fatalf("settle again: %+v, %v", again, err)
			}
		})
	}
}

// quiet drops the asynchronous permission errors of the denied writes.
var quiet = nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})

func openLedger(t *testing.T, e *engine.Engine, clk *fakeClock) *Ledger {
	t.Helper()
	l, err := Open(ctxT(t), e, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}
