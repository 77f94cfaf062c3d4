package budget

import (
	"context"
	"testing"
	"time"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestPeriodBounds(t *testing.T) {
	t.Parallel()
	paris := time.FixedZone("UTC+1", 3600)
	for _, tc := range []struct {
		name       string
		p          Period
		at         time.Time
		start, end string
	}{
		{"day mid", PeriodDay, utc("2026-01-07T10:00:00Z"), "2026-01-07T00:00:00Z", "2026-01-08T00:00:00Z"},
		{"day first instant", PeriodDay, utc("2026-01-07T00:00:00Z"), "2026-01-07T00:00:00Z", "2026-01-08T00:00:00Z"},
		{"day last instant", PeriodDay, utc("2026-01-07T23:59:59.999999999Z"), "2026-01-07T00:00:00Z", "2026-01-08T00:00:00Z"},
		{"day Dec 31 to Jan 1", PeriodDay, utc("2025-12-31T23:59:59Z"), "2025-12-31T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"day in another zone is UTC's", PeriodDay, time.Date(2026, 1, 8, 0, 30, 0, 0, paris), "2026-01-07T00:00:00Z", "2026-01-08T00:00:00Z"},
		{"day leap", PeriodDay, utc("2028-02-29T12:00:00Z"), "2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z"},
		{"week Wednesday", PeriodWeek, utc("2026-01-07T10:00:00Z"), "2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z"},
		{"week Monday 00:00", PeriodWeek, utc("2026-01-05T00:00:00Z"), "2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z"},
		{"week Sunday 23:59 is the old week", PeriodWeek, utc("2026-01-04T23:59:59Z"), "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z"},
		{"week Sunday to Monday", PeriodWeek, utc("2026-01-11T23:59:59.999Z"), "2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z"},
		{"week across the new year", PeriodWeek, utc("2026-01-01T08:00:00Z"), "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z"},
		{"month mid", PeriodMonth, utc("2026-01-07T10:00:00Z"), "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"},
		{"month Dec to Jan", PeriodMonth, utc("2025-12-31T23:59:59Z"), "2025-12-01T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"month Jan 1", PeriodMonth, utc("2026-01-01T00:00:00Z"), "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"},
		{"month February leap", PeriodMonth, utc("2028-02-15T00:00:00Z"), "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{"month 31st", PeriodMonth, utc("2026-01-31T12:00:00Z"), "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start, end := tc.p.Bounds(tc.at)
			if !start.Equal(utc(tc.start)) || !end.Equal(utc(tc.end)) {
				t.Fatalf("%s %v: [%v, %v), want [%s, %s)", tc.p, tc.at, start, end, tc.start, tc.end)
			}
			if start.Location() != time.UTC || end.Location() != time.UTC {
				t.Fatal("bounds are not UTC")
			}
			// The window's start maps to itself: one key per window.
			if s2, _ := tc.p.Bounds(start); !s2.Equal(start) {
				t.Fatalf("start %v maps to %v", start, s2)
			}
			if s3, _ := tc.p.Bounds(end); !s3.Equal(end) {
				t.Fatalf("end %v is not the next window's start (%v)", end, s3)
			}
		})
	}
}

func TestPeriodValid(t *testing.T) {
	t.Parallel()
	for p, want := range map[Period]bool{PeriodDay: true, PeriodWeek: true, PeriodMonth: true, "": false, "Day": false, "year": false} {
		if p.Valid() != want {
			t.Errorf("%q valid: %v", p, !want)
		}
	}
	if got := periodToken(utc("2026-01-05T00:00:00Z")); got != "20260105" {
		t.Fatalf("token %s", got)
	}
}

// Spend starts again from zero in every window, at the exact boundary,
// for each period kind.
func TestSpendResetsPerPeriod(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p              Period
		before, after  string
		sameAsBefore   string // still the old window
		nextWindowDate string
	}{
		{PeriodDay, "2026-01-07T23:59:59Z", "2026-01-08T00:00:00Z", "2026-01-07T00:00:01Z", "20260108"},
		{PeriodWeek, "2026-01-11T23:59:59Z", "2026-01-12T00:00:00Z", "2026-01-05T00:00:00Z", "20260112"},
		{PeriodMonth, "2025-12-31T23:59:59Z", "2026-01-01T00:00:00Z", "2025-12-01T00:00:00Z", "20260101"},
	} {
		t.Run(string(tc.p), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.clk.Set(utc(tc.before))
			b := f.create(t, CreateRequest{WorkspaceID: "ws", CeilingUSD: 1, Period: tc.p})
			f.mustReserve(t, ReserveRequest{WorkspaceID: "ws", EstimatedUSD: 1, ReservationID: "r1"})
			f.mustSettle(t, "r1", 1)
			if _, err := f.reserve(t, ReserveRequest{WorkspaceID: "ws", EstimatedUSD: 0.1, ReservationID: "r2"}); err == nil {
				t.Fatal("exhausted budget granted a reservation")
			}
			f.clk.Set(utc(tc.sameAsBefore))
			if s := f.usage(t, b.BudgetID); !near(s.SpentUSD, 1) || s.RemainingUSD != 0 {
				t.Fatalf("same window: %+v", s)
			}
			f.clk.Set(utc(tc.after))
			s := f.usage(t, b.BudgetID)
			if s.SpentUSD != 0 || !near(s.RemainingUSD, 1) || s.PeriodStart != utc(tc.after).UnixMilli() {
				t.Fatalf("next window: %+v", s)
			}
			r := f.mustReserve(t, ReserveRequest{WorkspaceID: "ws", EstimatedUSD: 0.4, ReservationID: "r3"})
			if len(r.Budgets) != 1 || !near(r.Budgets[0].ReservedUSD, 0.4) {
				t.Fatalf("reserve in the new window: %+v", r)
			}
			if _, err := f.kv.Get(context.Background(), "spend."+b.BudgetID+"."+tc.nextWindowDate); err != nil {
				t.Fatalf("no spend key for the new window: %v", err)
			}
		})
	}
}
