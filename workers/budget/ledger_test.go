package budget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

func TestReserveSettleUsage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.create(t, CreateRequest{WorkspaceID: "ws1", CeilingUSD: 5, Period: PeriodDay})
	if !strings.HasPrefix(b.BudgetID, "b_") || b.CreatedAt != t0.UnixMilli() || len(b.AlertThresholds) != 3 {
		t.Fatalf("created %+v", b)
	}
	dayStart, dayEnd := PeriodDay.Bounds(t0)

	r := f.mustReserve(t, ReserveRequest{WorkspaceID: "ws1", AgentID: "coder", EstimatedUSD: 1.5, ReservationID: "r1"})
	want := Status{
		BudgetID: b.BudgetID, CeilingUSD: 5, Period: PeriodDay, WorkspaceID: "ws1",
		PeriodStart: dayStart.UnixMilli(), PeriodEnd: dayEnd.UnixMilli(),
		SpentUSD: 0, ReservedUSD: 1.5, RemainingUSD: 3.5,
	}
	if r.ReservationID != "r1" || len(r.Budgets) != 1 || r.Budgets[0] != want {
		t.Fatalf("reserve: %+v\nwant %+v", r, want)
	}
	if got := f.usage(t, b.BudgetID); got != want {
		t.Fatalf("usage after reserve: %+v", got)
	}

	s := f.mustSettle(t, "r1", 1.25)
	want.SpentUSD, want.ReservedUSD, want.RemainingUSD = 1.25, 0, 3.75
	if len(s.Budgets) != 1 || s.Budgets[0] != want {
		t.Fatalf("settle: %+v", s)
	}
	if got := f.usage(t, b.BudgetID); got != want {
		t.Fatalf("usage after settle: %+v", got)
	}
	// The period state is small: no hold left.
	if st := f.state(t, b, t0); len(st.Holds) != 0 || st.SpentUSD != 1.25 {
		t.Fatalf("state %+v", st)
	}

	// check: would 3.75 fit? yes; 3.76? no. Nothing is held.
	ctx := ctxT(t)
	for est, allowed := range map[float64]bool{0: true, 3.75: true, 3.76: false} {
		c, err := engine.Call[CheckResponse](ctx, f.e, CheckFunction, CheckRequest{WorkspaceID: "ws1", EstimatedUSD: est})
		if err != nil || c.Allowed != allowed || len(c.Budgets) != 1 || c.Budgets[0] != want {
			t.Fatalf("check %v: %+v, %v", est, c, err)
		}
	}

	// Refusal names the budget, its ceiling and what remains.
	_, err := f.reserve(t, ReserveRequest{WorkspaceID: "ws1", EstimatedUSD: 4, ReservationID: "r2"})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeBudgetExceeded {
		t.Fatalf("reserve over the ceiling: %v", err)
	}
	for _, part := range []string{b.BudgetID, "workspace ws1", "ceiling $5 per day", "$3.75 remaining", "$4"} {
		if !strings.Contains(we.Message, part) {
			t.Errorf("message %q lacks %q", we.Message, part)
		}
	}
	if we.Details["budget_id"] != b.BudgetID || we.Details["remaining_usd"] != 3.75 {
		t.Errorf("details %+v", we.Details)
	}
	// The refused id left nothing behind and can be retried.
	if _, err := f.kv.Get(ctx, resKey("r2")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("refused reservation record: %v", err)
	}
	if _, err := f.settle(t, "r2", 1); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("settle of a refused reservation: %v", err)
	}
	f.mustReserve(t, ReserveRequest{WorkspaceID: "ws1", EstimatedUSD: 3.75, ReservationID: "r2"})
	// Exhausted: spent + reserved = ceiling, so even a zero estimate is refused.
	if _, err := f.reserve(t, ReserveRequest{WorkspaceID: "ws1", EstimatedUSD: 0, ReservationID: "r3"}); !errors.Is(err, wire.ErrBudgetExceeded) {
		t.Fatalf("zero estimate on an exhausted budget: %v", err)
	}
	// Settling at 0 drops the hold: the call cost nothing.
	f.mustSettle(t, "r2", 0)
	if got := f.usage(t, b.BudgetID); got.RemainingUSD != 3.75 || got.ReservedUSD != 0 {
		t.Fatalf("after a zero settle: %+v", got)
	}
}

func TestNoMatchingBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.create(t, CreateRequest{WorkspaceID: "other", CeilingUSD: 1, Period: PeriodDay})
	r := f.mustReserve(t, ReserveRequest{WorkspaceID: "ws1", EstimatedUSD: 1e6, ReservationID: "r1"})
	if r.ReservationID != "r1" || r.Budgets == nil || len(r.Budgets) != 0 {
		t.Fatalf("reserve with no budget: %+v", r)
	}
	if _, err := f.settle(t, "r1", 1); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("settle with no budget: %v", err)
	}
	c, err := engine.Call[CheckResponse](ctxT(t), f.e, CheckFunction, CheckRequest{AgentID: "a", EstimatedUSD: 1e6})
	if err != nil || !c.Allowed || c.Budgets == nil || len(c.Budgets) != 0 {
		t.Fatalf("check: %+v %v", c, err)
	}
	// A named budget that does not exist is not_found, not "allowed".
	if _, err := f.reserve(t, ReserveRequest{BudgetID: "nope", EstimatedUSD: 1, ReservationID: "r2"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("reserve on a missing budget: %v", err)
	}
}

// Scope: a call for W and A is subject to W's, A's and W+A's budgets, and
// nothing else.
func TestScopeMatching(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	w := f.create(t, CreateRequest{BudgetID: "w", WorkspaceID: "W", CeilingUSD: 10, Period: PeriodDay})
	a := f.create(t, CreateRequest{BudgetID: "a", AgentID: "A", CeilingUSD: 10, Period: PeriodWeek})
	wa := f.create(t, CreateRequest{BudgetID: "wa", WorkspaceID: "W", AgentID: "A", CeilingUSD: 10, Period: PeriodMonth})
	f.create(t, CreateRequest{BudgetID: "x", WorkspaceID: "X", AgentID: "A", CeilingUSD: 10, Period: PeriodDay})
	for i, tc := range []struct {
		ws, agent string
		want      []string
	}{
		{"W", "A", []string{"a", "w", "wa"}},
		{"W", "", []string{"w"}},
		{"", "A", []string{"a"}},
		{"W", "B", []string{"w"}},
		{"Y", "A", []string{"a"}},
	} {
		r := f.mustReserve(t, ReserveRequest{WorkspaceID: tc.ws, AgentID: tc.agent, EstimatedUSD: 1, ReservationID: "r" + string(rune('0'+i))})
		var got []string
		for _, s := range r.Budgets {
			got = append(got, s.BudgetID)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("call (%q, %q) held in %v, want %v", tc.ws, tc.agent, got, tc.want)
		}
	}
	// Reserved per budget: w by calls 0,1,3; a by 0,2,4; wa by 0.
	for id, want := range map[string]float64{w.BudgetID: 3, a.BudgetID: 3, wa.BudgetID: 1} {
		if got := f.usage(t, id); got.ReservedUSD != want {
			t.Errorf("%s reserved %v, want %v", id, got.ReservedUSD, want)
		}
	}
	// usage by scope uses the same rule; usage of nothing lists all four.
	u, err := engine.Call[UsageResponse](ctxT(t), f.e, UsageFunction, UsageRequest{WorkspaceID: "W"})
	if err != nil || len(u.Budgets) != 1 || u.Budgets[0].BudgetID != "w" {
		t.Fatalf("usage W: %+v %v", u, err)
	}
	u, err = engine.Call[UsageResponse](ctxT(t), f.e, UsageFunction, UsageRequest{})
	if err != nil || len(u.Budgets) != 4 {
		t.Fatalf("usage all: %+v %v", u, err)
	}
	// A reserve by budget id holds in that budget only.
	r := f.mustReserve(t, ReserveRequest{BudgetID: "wa", EstimatedUSD: 2, ReservationID: "byid"})
	if len(r.Budgets) != 1 || r.Budgets[0].BudgetID != "wa" || r.Budgets[0].ReservedUSD != 3 {
		t.Fatalf("reserve by id: %+v", r)
	}
}

// All or nothing: when the second of two matching budgets refuses, the
// first one's hold is released.
func TestAllOrNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ws := f.create(t, CreateRequest{BudgetID: "a-ws", WorkspaceID: "W", CeilingUSD: 10, Period: PeriodDay})
	ag := f.create(t, CreateRequest{BudgetID: "b-agent", AgentID: "A", CeilingUSD: 1, Period: PeriodDay})

	_, err := f.reserve(t, ReserveRequest{WorkspaceID: "W", AgentID: "A", EstimatedUSD: 2, ReservationID: "r1"})
	if !errors.Is(err, wire.ErrBudgetExceeded) || !strings.Contains(err.Error(), "b-agent") {
		t.Fatalf("reserve: %v", err)
	}
	if got := f.usage(t, ws.BudgetID); got.ReservedUSD != 0 || got.RemainingUSD != 10 {
		t.Fatalf("the workspace budget kept a hold: %+v", got)
	}
	if st := f.state(t, ws, t0); len(st.Holds) != 0 {
		t.Fatalf("workspace state %+v", st)
	}
	if got := f.usage(t, ag.BudgetID); got.ReservedUSD != 0 {
		t.Fatalf("agent budget %+v", got)
	}
	// Within both ceilings, both hold; settle spends in both.
	r := f.mustReserve(t, ReserveRequest{WorkspaceID: "W", AgentID: "A", EstimatedUSD: 0.5, ReservationID: "r1"})
	if len(r.Budgets) != 2 || r.Budgets[0].BudgetID != "a-ws" || r.Budgets[1].BudgetID != "b-agent" {
		t.Fatalf("reserve: %+v", r)
	}
	s := f.mustSettle(t, "r1", 0.75)
	if len(s.Budgets) != 2 || s.Budgets[0].SpentUSD != 0.75 || s.Budgets[1].SpentUSD != 0.75 || s.Budgets[1].RemainingUSD != 0.25 {
		t.Fatalf("settle: %+v", s)
	}
	// Now the agent budget refuses 0.5 while the workspace one would not.
	if _, err := f.reserve(t, ReserveRequest{WorkspaceID: "W", AgentID: "A", EstimatedUSD: 0.5, ReservationID: "r2"}); !errors.Is(err, wire.ErrBudgetExceeded) {
		t.Fatalf("reserve: %v", err)
	}
	if got := f.usage(t, ws.BudgetID); got.ReservedUSD != 0 || got.SpentUSD != 0.75 {
		t.Fatalf("workspace budget %+v", got)
	}
}

func TestIdempotentReserve(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.create(t, CreateRequest{WorkspaceID: "W", CeilingUSD: 1, Period: PeriodDay})
	first := f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.6, ReservationID: "r1"})
	// A retry (even with another estimate) answers as the first did and
	// holds nothing more: without idempotency 0.6 + 0.6 would be refused.
	for range 3 {
		again := f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.6, ReservationID: "r1"})
		if len(again.Budgets) != 1 || again.Budgets[0] != first.Budgets[0] {
			t.Fatalf("retry: %+v, first %+v", again, first)
		}
		// The retry says it holds nothing of its own, and what the
		// first holds.
		if first.Existing || !again.Existing || again.EstimatedUSD != 0.6 || again.State != "held" {
			t.Fatalf("retry: existing %v, estimated %v, state %q; first existing %v", again.Existing, again.EstimatedUSD, again.State, first.Existing)
		}
	}
	if st := f.state(t, b, t0); len(st.Holds) != 1 || st.Holds["r1"].USD != 0.6 {
		t.Fatalf("state %+v", st)
	}
	// After settling, a late retry of the reserve still answers, and
	// holds nothing.
	f.mustSettle(t, "r1", 0.5)
	again := f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.6, ReservationID: "r1"})
	if len(again.Budgets) != 1 || again.Budgets[0].SpentUSD != 0.5 || again.Budgets[0].ReservedUSD != 0 || !again.Existing || again.State != "settled" {
		t.Fatalf("retry after settle: %+v", again)
	}
	// Even if the budget no longer matches the request (deleted), the
	// record answers.
	if _, err := engine.Call[DeleteResponse](ctxT(t), f.e, DeleteFunction, DeleteRequest{BudgetID: b.BudgetID}); err != nil {
		t.Fatal(err)
	}
	again = f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.6, ReservationID: "r1"})
	if again.ReservationID != "r1" || len(again.Budgets) != 0 {
		t.Fatalf("retry after delete: %+v", again)
	}
}

func TestIdempotentSettle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.create(t, CreateRequest{AgentID: "A", CeilingUSD: 10, Period: PeriodMonth})
	f.mustReserve(t, ReserveRequest{AgentID: "A", EstimatedUSD: 1, ReservationID: "r1"})
	first := f.mustSettle(t, "r1", 0.8)
	for _, actual := range []float64{0.8, 5} {
		again := f.mustSettle(t, "r1", actual)
		if len(again.Budgets) != 1 || again.Budgets[0] != first.Budgets[0] {
			t.Fatalf("settle again (%v): %+v, first %+v", actual, again, first)
		}
	}
	if got := f.usage(t, b.BudgetID); got.SpentUSD != 0.8 {
		t.Fatalf("spent %v, want 0.8 (counted once)", got.SpentUSD)
	}
	var rec reservation
	ent, err := f.kv.Get(ctxT(t), resKey("r1"))
	if err != nil || json.Unmarshal(ent.Value(), &rec) != nil || rec.State != resSettled || rec.ActualUSD != 0.8 {
		t.Fatalf("record %+v, %v", rec, err)
	}
	if _, err := f.settle(t, "never", 1); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("unknown reservation: %v", err)
	}
}

// A settle that died after counting the spend in one budget and before
// marking the record: the retry counts the other budget only.
func TestSettleResumesAfterCrash(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b1 := f.create(t, CreateRequest{BudgetID: "b1", WorkspaceID: "W", CeilingUSD: 10, Period: PeriodDay})
	b2 := f.create(t, CreateRequest{BudgetID: "b2", AgentID: "A", CeilingUSD: 10, Period: PeriodDay})
	f.mustReserve(t, ReserveRequest{WorkspaceID: "W", AgentID: "A", EstimatedUSD: 1, ReservationID: "r1"})
	// The crashed settle's first step, done by hand.
	ref := holdRef{BudgetID: "b1", PeriodStart: mustStart(PeriodDay, t0)}
	if _, _, err := f.l.spend(ctxT(t), ref, "r1", 0.9, t0.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	f.mustSettle(t, "r1", 0.9)
	if s1, s2 := f.usage(t, b1.BudgetID), f.usage(t, b2.BudgetID); s1.SpentUSD != 0.9 || s2.SpentUSD != 0.9 || s1.ReservedUSD != 0 || s2.ReservedUSD != 0 {
		t.Fatalf("after resumed settle: %+v %+v", s1, s2)
	}
}

func mustStart(p Period, at time.Time) int64 {
	s, _ := p.Bounds(at)
	return s.UnixMilli()
}

// A hold lapses at its ttl: it stops counting, and the room is free for
// others. Settling it later still counts the money spent.
func TestHoldExpiry(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithReservationTTL(time.Minute))
	b := f.create(t, CreateRequest{WorkspaceID: "W", CeilingUSD: 1, Period: PeriodDay})
	f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.7, ReservationID: "short", TTLMs: 1000})
	f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.3, ReservationID: "default"})
	if _, err := f.reserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.5, ReservationID: "late"}); !errors.Is(err, wire.ErrBudgetExceeded) {
		t.Fatalf("full budget: %v", err)
	}

	f.clk.Add(1001 * time.Millisecond) // "short" lapsed; "default" (1 min) still holds
	if got := f.usage(t, b.BudgetID); got.ReservedUSD != 0.3 || got.RemainingUSD != 0.7 {
		t.Fatalf("after the short ttl: %+v", got)
	}
	f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.5, ReservationID: "late"})

	// The dead orchestrator's call did happen: its late settle counts.
	s := f.mustSettle(t, "short", 0.2)
	if s.Budgets[0].SpentUSD != 0.2 || s.Budgets[0].ReservedUSD != 0.8 {
		t.Fatalf("late settle: %+v", s)
	}
	f.clk.Add(time.Minute)
	if got := f.usage(t, b.BudgetID); got.ReservedUSD != 0 || got.SpentUSD != 0.2 {
		t.Fatalf("after every ttl: %+v", got)
	}
	// Expired holds stay as settle markers until their records are gone
	// (retention + margin), then the next rewrite drops them: the value
	// stays small.
	if st := f.state(t, b, f.clk.Now()); len(st.Holds) != 2 {
		t.Fatalf("holds before the cutoff: %+v", st.Holds)
	}
	f.clk.Add(DefaultRetention + skewMargin + time.Minute)
	f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.1, ReservationID: "next"})
	if st := f.state(t, b, f.clk.Now()); len(st.Holds) != 1 || st.Holds["next"].USD != 0.1 {
		t.Fatalf("holds after the cutoff: %+v", st.Holds)
	}
}

// A reserve that died while placing holds leaves a pending record: a
// retry within the lease is told to retry, after it takes over, undoing
// the dead attempt's holds so nothing is held twice.
func TestPendingTakeover(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.create(t, CreateRequest{BudgetID: "b1", WorkspaceID: "W", CeilingUSD: 1, Period: PeriodDay})
	ctx := ctxT(t)
	ref := holdRef{BudgetID: "b1", PeriodStart: mustStart(PeriodDay, t0)}
	dead := reservation{
		ReservationID: "r1", State: resPending, EstimatedUSD: 0.6, Budgets: []holdRef{ref},
		CreatedAt: t0.UnixMilli(), UpdatedAt: t0.UnixMilli(), ExpiresAt: t0.Add(time.Hour).UnixMilli(),
	}
	if _, err := f.l.putRecord(ctx, resKey("r1"), dead, 0, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.l.hold(ctx, b, ref, "r1", 0.6, t0.UnixMilli(), dead.ExpiresAt); err != nil {
		t.Fatal(err)
	}

	if _, err := f.reserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.6, ReservationID: "r1"}); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("within the lease: %v", err)
	}
	if _, err := f.settle(t, "r1", 1); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("settle within the lease: %v", err)
	}
	f.clk.Add(pendingLease)
	r := f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.6, ReservationID: "r1"})
	if len(r.Budgets) != 1 || r.Budgets[0].ReservedUSD != 0.6 {
		t.Fatalf("takeover: %+v", r)
	}
	st := f.state(t, b, f.clk.Now())
	if len(st.Holds) != 1 || st.Holds["r1"].Exp != f.clk.Now().Add(DefaultReservationTTL).UnixMilli() {
		t.Fatalf("holds after takeover: %+v", st.Holds)
	}
	f.mustSettle(t, "r1", 0.6)
	if got := f.usage(t, b.BudgetID); got.SpentUSD != 0.6 || got.ReservedUSD != 0 {
		t.Fatalf("after settle: %+v", got)
	}
}

func TestCreateDeleteList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	b := f.create(t, CreateRequest{BudgetID: "team", WorkspaceID: "W", AgentID: "A", CeilingUSD: 2.5, Period: PeriodWeek, AlertThresholds: []float64{0.9, 0.25, 0.9}})
	want := Budget{BudgetID: "team", CeilingUSD: 2.5, Period: PeriodWeek, WorkspaceID: "W", AgentID: "A", AlertThresholds: []float64{0.25, 0.9}, CreatedAt: t0.UnixMilli()}
	if b.BudgetID != want.BudgetID || b.CeilingUSD != want.CeilingUSD || b.AlertThresholds[0] != 0.25 || len(b.AlertThresholds) != 2 {
		t.Fatalf("created %+v", b)
	}
	if _, err := engine.Call[Budget](ctx, f.e, CreateFunction, CreateRequest{BudgetID: "team", AgentID: "B", CeilingUSD: 1, Period: PeriodDay}); !errors.Is(err, wire.ErrConflict) || wire.From(err).Retryable {
		t.Fatalf("duplicate id: %+v, want conflict, not retryable", wire.From(err))
	}
	none := f.create(t, CreateRequest{BudgetID: "quiet", AgentID: "B", CeilingUSD: 1, Period: PeriodDay, AlertThresholds: []float64{}})
	if none.AlertThresholds == nil || len(none.AlertThresholds) != 0 {
		t.Fatalf("no thresholds: %+v", none)
	}
	l, err := engine.Call[ListResponse](ctx, f.e, ListFunction, ListRequest{})
	if err != nil || len(l.Budgets) != 2 || l.Budgets[0].BudgetID != "quiet" || l.Budgets[1].BudgetID != "team" {
		t.Fatalf("list %+v %v", l, err)
	}

	f.mustReserve(t, ReserveRequest{BudgetID: "team", EstimatedUSD: 1, ReservationID: "r1"})
	f.mustSettle(t, "r1", 1)
	f.mustReserve(t, ReserveRequest{BudgetID: "team", EstimatedUSD: 1, ReservationID: "r2"})
	d, err := engine.Call[DeleteResponse](ctx, f.e, DeleteFunction, DeleteRequest{BudgetID: "team"})
	if err != nil || !d.Deleted {
		t.Fatalf("delete %+v %v", d, err)
	}
	if d, err := engine.Call[DeleteResponse](ctx, f.e, DeleteFunction, DeleteRequest{BudgetID: "team"}); err != nil || d.Deleted {
		t.Fatalf("delete again %+v %v", d, err)
	}
	if _, err := f.kv.Get(ctx, spendKey("team", mustBounds(PeriodWeek, t0))); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("spend key after delete: %v", err)
	}
	if _, err := engine.Call[UsageResponse](ctx, f.e, UsageFunction, UsageRequest{BudgetID: "team"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("usage of a deleted budget: %v", err)
	}
	// A reservation held in a deleted budget settles without it.
	if s, err := f.settle(t, "r2", 1); err != nil || len(s.Budgets) != 0 {
		t.Fatalf("settle after delete: %+v %v", s, err)
	}
	// The id is free again, and starts from zero.
	f.create(t, CreateRequest{BudgetID: "team", WorkspaceID: "W", CeilingUSD: 1, Period: PeriodWeek})
	if got := f.usage(t, "team"); got.SpentUSD != 0 || got.ReservedUSD != 0 {
		t.Fatalf("recreated: %+v", got)
	}
	l, _ = engine.Call[ListResponse](ctx, f.e, ListFunction, ListRequest{})
	if len(l.Budgets) != 2 {
		t.Fatalf("list %+v", l)
	}
}

func mustBounds(p Period, at time.Time) time.Time {
	s, _ := p.Bounds(at)
	return s
}

// A budget created through one node is seen by another node at once for
// a reserve by id, and within the watch delay for a reserve by scope.
func TestTwoNodesShareDefinitions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, w2 := startWorker(t, f.ns, WithClock(f.clk.Now))
	l2 := w2.Ledger()
	ctx := ctxT(t)
	b, err := f.l.Create(ctx, CreateRequest{BudgetID: "b1", WorkspaceID: "W", CeilingUSD: 1, Period: PeriodDay})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Reserve(ctx, ReserveRequest{BudgetID: b.BudgetID, EstimatedUSD: 0.5, ReservationID: "r1"}); err != nil {
		t.Fatalf("reserve by id on the other node: %v", err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if len(l2.defs.list(nil)) != 1 {
			return errors.New("node 2 has not seen the budget")
		}
		return nil
	})
	if _, err := l2.Reserve(ctx, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.6, ReservationID: "r2"}); !errors.Is(err, wire.ErrBudgetExceeded) {
		t.Fatalf("node 2 over the ceiling: %v", err)
	}
	if _, err := f.l.Delete(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if len(l2.defs.list(nil)) != 0 {
			return errors.New("node 2 still has the budget")
		}
		return nil
	})
}

// A ledger value that does not decode is an internal error, never
// overwritten silently.
func TestCorruptState(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.create(t, CreateRequest{BudgetID: "b1", WorkspaceID: "W", CeilingUSD: 1, Period: PeriodDay})
	ctx := context.Background()
	key := spendKey(b.BudgetID, mustBounds(PeriodDay, t0))
	if _, err := f.kv.Put(ctx, key, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.1, ReservationID: "r1"}); !errors.Is(err, wire.ErrInternal) {
		t.Fatalf("reserve on a corrupt value: %v", err)
	}
	if ent, err := f.kv.Get(ctx, key); err != nil || string(ent.Value()) != "not json" {
		t.Fatalf("corrupt value was touched: %v", err)
	}
	// The refused attempt left no record behind.
	if _, err := f.kv.Get(ctx, resKey("r1")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("record: %v", err)
	}
}

// A delete that failed after the definition left the spend behind (a
// timeout or kill -9 between the two): a budget created again under the
// id starts from zero, not with the old period's spend.
func TestCreateAfterHalfDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.create(t, CreateRequest{BudgetID: "half", WorkspaceID: "W", CeilingUSD: 10, Period: PeriodDay})
	f.mustReserve(t, ReserveRequest{BudgetID: "half", EstimatedUSD: 9, ReservationID: "r1"})
	f.mustSettle(t, "r1", 9)
	// The first half of Delete: the definition only.
	if err := f.kv.Purge(ctx, defKey("half")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.kv.Get(ctx, spendKey("half", mustBounds(PeriodDay, t0))); err != nil {
		t.Fatalf("the spend the half delete left: %v", err)
	}
	f.create(t, CreateRequest{BudgetID: "half", WorkspaceID: "W", CeilingUSD: 10, Period: PeriodDay})
	if got := f.usage(t, "half"); got.SpentUSD != 0 || got.ReservedUSD != 0 || got.RemainingUSD != 10 {
		t.Fatalf("created again: %+v", got)
	}
	f.mustReserve(t, ReserveRequest{BudgetID: "half", EstimatedUSD: 2, ReservationID: "r2"})
}

// A reservation id used again once its record is gone (expired unsettled
// more than the retention ago) while its lapsed hold still sits in the
// period state (the skew margin) is a new reservation: it is admitted
// against the budget and holds its own estimate. It used to keep the
// lapsed hold as "an earlier attempt's", so it was granted without any
// check and held nothing live.
func TestReservationIDReusedAfterRecordExpired(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.create(t, CreateRequest{WorkspaceID: "W", CeilingUSD: 1, Period: PeriodDay})
	f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.6, ReservationID: "r1", TTLMs: 1000})
	// Past the hold's expiry and its record's retention, inside the
	// margin: the record is gone (its KV TTL runs on the server's clock,
	// so purge it here), the lapsed hold is still there.
	f.clk.Add(time.Second + DefaultRetention + time.Minute)
	if err := f.kv.Purge(ctxT(t), resKey("r1")); err != nil {
		t.Fatal(err)
	}
	if st := f.state(t, b, f.clk.Now()); len(st.Holds) != 1 {
		t.Fatalf("lapsed hold gone too early: %+v", st.Holds)
	}
	f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 1, ReservationID: "full"})
	if _, err := f.reserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.6, ReservationID: "r1"}); !errors.Is(err, wire.ErrBudgetExceeded) {
		t.Fatalf("reserve of a reused id on a full budget: %v, want budget_exceeded", err)
	}
	f.mustSettle(t, "full", 0.5)
	r := f.mustReserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 0.3, ReservationID: "r1"})
	if r.Existing || len(r.Budgets) != 1 || r.Budgets[0].ReservedUSD != 0.3 || r.Budgets[0].RemainingUSD != 0.2 {
		t.Fatalf("reserve of a reused id: %+v", r)
	}
	st := f.state(t, b, f.clk.Now())
	if h := st.Holds["r1"]; h.USD != 0.3 || h.Exp != f.clk.Now().Add(DefaultReservationTTL).UnixMilli() {
		t.Fatalf("hold of the reused id: %+v", st.Holds)
	}
	f.mustSettle(t, "r1", 0.25)
	if got := f.usage(t, b.BudgetID); got.SpentUSD != 0.75 || got.ReservedUSD != 0 {
		t.Fatalf("after settle: %+v", got)
	}
}

// budget::list and budget::usage answer within the server's max payload,
// in pages (truncated, then after the last id), in JSON and msgpack
// alike. A list past it used to fail whole (internal: the response
// exceeds the max payload), so an operator with many budgets saw none.
func TestListAndUsagePage(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(32<<10))
	e, w := startWorker(t, ns, WithClock(newClock(t0).Now))
	ctx := ctxT(t)
	long := strings.Repeat("w", 120)
	const n = 120
	var want []string
	for i := range n {
		id := fmt.Sprintf("%s%03d", strings.Repeat("b", 120), i)
		want = append(want, id)
		if _, err := w.Ledger().Create(ctx, CreateRequest{BudgetID: id, WorkspaceID: long, AgentID: long, CeilingUSD: 1, Period: PeriodDay}); err != nil {
			t.Fatal(err)
		}
	}
	for _, fn := range []string{ListFunction, UsageFunction} {
		for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
			var got []string
			pages, after := 0, ""
			for {
				body, err := codec.Marshal(map[string]string{"after": after})
				if err != nil {
					t.Fatal(err)
				}
				data, _, err := e.TriggerRaw(ctx, fn, body, codec)
				if err != nil {
					t.Fatalf("%s %s page %d: %v", fn, codec.ContentType(), pages, err)
				}
				var page struct {
					Budgets []struct {
						BudgetID string `json:"budget_id" msgpack:"budget_id"`
					} `json:"budgets" msgpack:"budgets"`
					Truncated bool `json:"truncated" msgpack:"truncated"`
				}
				if err := codec.Unmarshal(data, &page); err != nil {
					t.Fatal(err)
				}
				pages++
				for _, b := range page.Budgets {
					got = append(got, b.BudgetID)
				}
				if !page.Truncated {
					break
				}
				if len(page.Budgets) == 0 || pages > n {
					t.Fatalf("%s %s: truncated page of %d", fn, codec.ContentType(), len(page.Budgets))
				}
				after = got[len(got)-1]
			}
			if pages < 2 || !slices.Equal(got, want) {
				t.Fatalf("%s %s: %d pages, %d budgets %v", fn, codec.ContentType(), pages, len(got), got)
			}
		}
	}
	if _, _, err := e.TriggerRaw(ctx, ListFunction, []byte(`{"after":"a.b"}`), wire.JSON); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("bad after: %v", err)
	}
}

// Two creates of one budget id at once: the loser must not wipe the
// winner's spend while it clears the leftovers of an earlier budget of
// that id. It used to purge every spend record of the id between its
// check of the definition and its own create, so a winner created and
// spending in that gap lost its spend.
func TestCreateRaceKeepsTheWinnersSpend(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		stage    string
		leftover bool // an earlier budget of the id left spend behind
	}{
		{stage: "defined"},
		{stage: "listed", leftover: true},
	} {
		t.Run(tt.stage, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := ctxT(t)
			req := CreateRequest{BudgetID: "team", WorkspaceID: "W", CeilingUSD: 10, Period: PeriodDay}
			if tt.leftover {
				f.create(t, req)
				f.mustReserve(t, ReserveRequest{BudgetID: "team", EstimatedUSD: 9, ReservationID: "old"})
				f.mustSettle(t, "old", 9)
				if err := f.kv.Purge(ctx, defKey("team")); err != nil { // half a delete
					t.Fatal(err)
				}
			}
			var fired atomic.Bool
			f.l.testStage = func(stage string) {
				if stage != tt.stage || fired.Swap(true) {
					return
				}
				func() {
					// The winner: created, reserving and settling
					// while the loser is between its steps.
					if _, err := f.l.Create(ctx, req); err != nil {
						t.Errorf("winner's create: %v", err)
						return
					}
					f.mustReserve(t, ReserveRequest{BudgetID: "team", EstimatedUSD: 2, ReservationID: "won"})
					f.mustSettle(t, "won", 2)
				}()
			}
			if _, err := f.l.Create(ctx, req); !errors.Is(err, wire.ErrConflict) {
				t.Fatalf("loser's create: %v, want conflict", err)
			}
			f.l.testStage = nil
			if got := f.usage(t, "team"); got.SpentUSD != 2 {
				t.Fatalf("the winner's budget after the race: %+v, want its 2 USD spent", got)
			}
		})
	}
}
