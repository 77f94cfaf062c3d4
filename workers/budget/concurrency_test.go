package budget

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// 50 goroutines on two engines (two connections, two workers sharing the
// ledger) reserve and settle against one budget: the budget is never
// overspent by more than one call's estimate, and refusals happen.
func TestConcurrentReserveNeverOverspends(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e1, w1 := startWorker(t, ns)
	e2, w2 := startWorker(t, ns)
	engines := []*engine.Engine{e1, e2}
	const (
		ceiling    = 3.0
		goroutines = 50
		rounds     = 4
		maxEst     = 0.2
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := engine.Call[Budget](ctx, e1, CreateFunction, CreateRequest{WorkspaceID: "W", CeilingUSD: ceiling, Period: PeriodDay})
	if err != nil {
		t.Fatal(err)
	}
	// Calls reach either worker (one queue group): both must know the budget.
	enginetest.Eventually(t, 5*time.Second, func() error {
		for _, w := range []*Worker{w1, w2} {
			if _, ok := w.Ledger().defs.get(b.BudgetID); !ok {
				return errors.New("a worker has not seen the budget")
			}
		}
		return nil
	})

	var (
		granted, refused atomic.Int64
		mu               sync.Mutex
		spent            float64
		wg               sync.WaitGroup
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range rounds {
				est := 0.05 + rng.Float64()*(maxEst-0.05)
				rid := fmt.Sprintf("g%d-r%d", g, i)
				_, err := engine.Call[ReserveResponse](ctx, engines[g%2], ReserveFunction,
					ReserveRequest{WorkspaceID: "W", AgentID: "A", EstimatedUSD: est, ReservationID: rid})
				if errors.Is(err, wire.ErrBudgetExceeded) {
					refused.Add(1)
					continue
				}
				if err != nil {
					t.Errorf("reserve %s: %v", rid, err)
					return
				}
				granted.Add(1)
				actual := round(est * (0.5 + rng.Float64()/2))
				// Settle through the other engine: any node may settle.
				if _, err := engine.Call[SettleResponse](ctx, engines[(g+1)%2], SettleFunction,
					SettleRequest{ReservationID: rid, ActualUSD: actual}); err != nil {
					t.Errorf("settle %s: %v", rid, err)
					return
				}
				mu.Lock()
				spent += actual
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	u, err := engine.Call[UsageResponse](ctx, e2, UsageFunction, UsageRequest{BudgetID: b.BudgetID})
	if err != nil {
		t.Fatal(err)
	}
	s := u.Budgets[0]
	t.Logf("granted %d, refused %d, spent %v of %v", granted.Load(), refused.Load(), s.SpentUSD, ceiling)
	if s.SpentUSD > ceiling+maxEst {
		t.Fatalf("overspent: %v > %v + %v", s.SpentUSD, ceiling, maxEst)
	}
	if !near(s.SpentUSD, round(spent)) || s.ReservedUSD != 0 {
		t.Fatalf("ledger says spent %v reserved %v; the callers settled %v", s.SpentUSD, s.ReservedUSD, spent)
	}
	if refused.Load() == 0 || granted.Load() == 0 {
		t.Fatalf("granted %d, refused %d: the test did not reach the ceiling", granted.Load(), refused.Load())
	}
}

// Concurrent duplicates of one reservation (an orchestrator retrying while
// its first attempt still runs) hold once across two budgets: every caller
// gets the granted answer or a retryable conflict, never a second hold.
func TestConcurrentDuplicateReserve(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	bw := f.create(t, CreateRequest{BudgetID: "bw", WorkspaceID: "W", CeilingUSD: 1, Period: PeriodDay})
	ba := f.create(t, CreateRequest{BudgetID: "ba", AgentID: "A", CeilingUSD: 1, Period: PeriodDay})
	var (
		wg                sync.WaitGroup
		granted, conflict atomic.Int64
	)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := f.reserve(t, ReserveRequest{WorkspaceID: "W", AgentID: "A", EstimatedUSD: 0.6, ReservationID: "dup"})
			switch {
			case errors.Is(err, wire.ErrConflict):
				conflict.Add(1)
			case err != nil:
				t.Errorf("reserve: %v", err)
			case len(r.Budgets) != 2:
				t.Errorf("answer %+v", r)
			default:
				granted.Add(1)
			}
		}()
	}
	wg.Wait()
	if granted.Load() == 0 {
		t.Fatalf("no caller was granted (%d conflicts)", conflict.Load())
	}
	for _, b := range []Budget{bw, ba} {
		if st := f.state(t, b, t0); len(st.Holds) != 1 || st.Holds["dup"].USD != 0.6 {
			t.Fatalf("%s holds %+v", b.BudgetID, st.Holds)
		}
	}
	f.mustSettle(t, "dup", 0.5)
	f.mustSettle(t, "dup", 0.5)
	for _, b := range []Budget{bw, ba} {
		if s := f.usage(t, b.BudgetID); s.SpentUSD != 0.5 || s.ReservedUSD != 0 {
			t.Fatalf("%s %+v", b.BudgetID, s)
		}
	}
}
