package budget

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

func TestAlertsOncePerThresholdPerPeriod(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.create(t, CreateRequest{BudgetID: "b1", WorkspaceID: "W", AgentID: "A", CeilingUSD: 10, Period: PeriodDay})
	n := 0
	spend := func(est, actual float64) {
		t.Helper()
		n++
		rid := fmt.Sprintf("r%d", n)
		f.mustReserve(t, ReserveRequest{BudgetID: b.BudgetID, EstimatedUSD: est, ReservationID: rid})
		f.mustSettle(t, rid, actual)
	}
	refuse := func(est float64) {
		t.Helper()
		n++
		if _, err := f.reserve(t, ReserveRequest{BudgetID: b.BudgetID, EstimatedUSD: est, ReservationID: fmt.Sprintf("r%d", n)}); !errors.Is(err, wire.ErrBudgetExceeded) {
			t.Fatalf("reserve %v: %v", est, err)
		}
	}
	type fired struct {
		threshold, spent float64
	}
	expect := func(want ...fired) {
		t.Helper()
		got := alerts(t, f.e)
		if len(got) != len(want) {
			t.Fatalf("%d alerts %+v, want %+v", len(got), got, want)
		}
		for i, a := range got {
			if a.Threshold != want[i].threshold || a.SpentUSD != want[i].spent {
				t.Fatalf("alert %d: %+v, want %+v", i, a, want[i])
			}
		}
	}

	spend(4, 4)
	expect()
	spend(2, 1.5) // 5.5: crosses 0.5
	expect(fired{0.5, 5.5})
	spend(1, 0.5) // 6: nothing new
	expect(fired{0.5, 5.5})
	spend(3, 3) // 9: crosses 0.8
	expect(fired{0.5, 5.5}, fired{0.8, 9})
	refuse(2) // at 100 %: the refusal announces threshold 1, once
	expect(fired{0.5, 5.5}, fired{0.8, 9}, fired{1, 9})
	spend(1, 1) // 10: threshold 1 already announced this period
	refuse(0.1)
	expect(fired{0.5, 5.5}, fired{0.8, 9}, fired{1, 9})

	a := alerts(t, f.e)[0]
	dayStart, _ := PeriodDay.Bounds(t0)
	want := Alert{Type: AlertType, BudgetID: "b1", Threshold: 0.5, SpentUSD: 5.5, CeilingUSD: 10,
		PeriodStart: dayStart.UnixMilli(), Period: PeriodDay, WorkspaceID: "W", AgentID: "A"}
	if a != want {
		t.Fatalf("alert %+v\nwant  %+v", a, want)
	}
	if a.MsgID() != fmt.Sprintf("b1:%d:0.5", dayStart.UnixMilli()) {
		t.Fatalf("msg id %s", a.MsgID())
	}

	// A new period announces again; one settle crossing two thresholds
	// announces both.
	f.clk.Add(24 * time.Hour)
	spend(9, 8.5)
	got := alerts(t, f.e)
	if len(got) != 5 || got[3].Threshold != 0.5 || got[4].Threshold != 0.8 || got[4].PeriodStart != dayStart.AddDate(0, 0, 1).UnixMilli() {
		t.Fatalf("next day's alerts: %+v", got[3:])
	}
}

// Nats-Msg-Id makes a repeated publish of one alert a no-op, and the
// stream is the one the brief names.
func TestAlertStreamDedupes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := Budget{BudgetID: "b1", CeilingUSD: 1, Period: PeriodWeek, AgentID: "A"}
	start, _ := PeriodWeek.Bounds(t0)
	ctx := ctxT(t)
	f.l.publishAlerts(ctx, b, start, 0.9, []float64{0.8})
	f.l.publishAlerts(ctx, b, start, 0.95, []float64{0.8})
	if got := alerts(t, f.e); len(got) != 1 || got[0].SpentUSD != 0.9 {
		t.Fatalf("alerts %+v", got)
	}
	s, err := f.e.JetStream().Stream(ctx, subjects.BudgetAlertStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if cfg.MaxAge != 30*24*time.Hour || len(cfg.Subjects) != 1 || cfg.Subjects[0] != "iii.budget.alert.>" {
		t.Fatalf("stream config %+v", cfg)
	}
}
