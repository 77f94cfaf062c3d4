package budget

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

var codecs = []wire.Codec{wire.JSON, wire.Msgpack}

// validator is what every request type is.
type validator interface{ Validate() error }

// FuzzRequests decodes arbitrary bytes as every request type with both
// codecs: no panic, every refusal is invalid_payload, and a request that
// validates has finite amounts in range and ids that make ledger keys.
func FuzzRequests(f *testing.F) {
	for _, s := range []string{
		`{"budget_id":"b1","ceiling_usd":5,"period":"day","workspace_id":"ws1","alert_thresholds":[0.5,1]}`,
		`{"ceiling_usd":1e-9,"period":"week","agent_id":"a","alert_thresholds":null}`,
		`{"ceiling_usd":0,"period":"month"}`,
		`{"workspace_id":"w","agent_id":"a","estimated_usd":0.3,"reservation_id":"r-1","ttl_ms":1000}`,
		`{"budget_id":"b","workspace_id":"w","estimated_usd":1}`,
		`{"reservation_id":"r","actual_usd":1e9}`,
		`{"reservation_id":"r","actual_usd":-0}`,
		`{"estimated_usd":1e308}`, `{"ttl_ms":-1}`, `{"alert_thresholds":[0,2]}`,
		`null`, `[]`, ``, "\xff", `{"budget_id":"a.b"}`,
	} {
		f.Add([]byte(s))
	}
	for _, v := range []any{
		CreateRequest{CeilingUSD: math.NaN(), Period: PeriodDay, AgentID: "a"},
		CreateRequest{CeilingUSD: math.Inf(1), Period: PeriodDay, AgentID: "a", AlertThresholds: []float64{math.Inf(-1)}},
		ReserveRequest{WorkspaceID: "w", EstimatedUSD: math.NaN(), ReservationID: "r"},
		SettleRequest{ReservationID: "r", ActualUSD: math.Inf(1)},
	} {
		if b, err := wire.Msgpack.Marshal(v); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range codecs {
			reqs := []validator{&CreateRequest{}, &DeleteRequest{}, &CheckRequest{}, &ReserveRequest{}, &SettleRequest{}, &UsageRequest{}}
			for _, r := range reqs {
				if c.Unmarshal(data, r) != nil {
					continue
				}
				err := r.Validate()
				if err != nil {
					if !errors.Is(err, wire.ErrInvalidPayload) {
						t.Fatalf("%T %+v: %v is not invalid_payload", r, r, err)
					}
					continue
				}
				checkValid(t, r)
			}
		}
	})
}

func inRange(t *testing.T, what string, v float64) {
	t.Helper()
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxUSD {
		t.Fatalf("%s %v passed validation", what, v)
	}
}

func validKey(t *testing.T, key string) {
	t.Helper()
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') || key[len(key)-1] == '.' {
			t.Fatalf("key %q is not a plain KV key", key)
		}
	}
}

func checkValid(t *testing.T, r validator) {
	t.Helper()
	switch r := r.(type) {
	case *CreateRequest:
		inRange(t, "ceiling", r.CeilingUSD)
		if r.CeilingUSD == 0 || !r.Period.Valid() || (r.WorkspaceID == "" && r.AgentID == "") {
			t.Fatalf("create %+v passed", r)
		}
		th := r.thresholds()
		for i, x := range th {
			if !(x > 0 && x <= 1) || (i > 0 && th[i-1] >= x) {
				t.Fatalf("thresholds %v", th)
			}
		}
		if r.BudgetID != "" {
			validKey(t, defKey(r.BudgetID))
		}
		b := Budget{BudgetID: "x", CeilingUSD: r.CeilingUSD, Period: r.Period, WorkspaceID: r.WorkspaceID, AgentID: r.AgentID}
		if !b.Matches(r.WorkspaceID, r.AgentID) {
			t.Fatalf("budget %+v does not match its own scope", b)
		}
	case *ReserveRequest:
		inRange(t, "estimate", r.EstimatedUSD)
		validKey(t, resKey(r.ReservationID))
		if r.selector().empty() || (r.BudgetID != "" && (r.WorkspaceID != "" || r.AgentID != "")) {
			t.Fatalf("reserve selector %+v passed", r)
		}
		if r.TTLMs != 0 && (r.TTLMs < MinReservationTTL || r.TTLMs > MaxReservationTTL) {
			t.Fatalf("ttl %d passed", r.TTLMs)
		}
	case *SettleRequest:
		inRange(t, "actual", r.ActualUSD)
		validKey(t, resKey(r.ReservationID))
	case *CheckRequest:
		inRange(t, "estimate", r.EstimatedUSD)
	case *DeleteRequest:
		validKey(t, spendKey(r.BudgetID, time.Unix(0, 0)))
	case *UsageRequest:
		for _, id := range []string{r.BudgetID, r.WorkspaceID, r.AgentID} {
			if id != "" && agent.ValidateID("id", id) != nil {
				t.Fatalf("id %q passed", id)
			}
		}
	}
}

// FuzzPeriodBounds: any instant lies in its window, windows start where
// their kind says, and the next window starts where this one ends.
func FuzzPeriodBounds(f *testing.F) {
	f.Add(int64(1767780000), int64(0), uint8(0))
	f.Add(int64(1767571199), int64(999999999), uint8(1)) // Sunday 23:59:59
	f.Add(int64(1767225599), int64(0), uint8(2))         // Dec 31 23:59:59
	f.Add(int64(-62135596800), int64(0), uint8(1))       // year 1
	f.Fuzz(func(t *testing.T, sec, nsec int64, kind uint8) {
		const minSec, maxSec = -62135596800, 253402300799 // years 1 to 9999
		if sec < minSec || sec > maxSec {
			return
		}
		p := []Period{PeriodDay, PeriodWeek, PeriodMonth}[kind%3]
		at := time.Unix(sec, nsec%1e9)
		start, end := p.Bounds(at)
		if at.Before(start) || !at.Before(end) {
			t.Fatalf("%s %v not in [%v, %v)", p, at, start, end)
		}
		if h, m, s := start.Clock(); h != 0 || m != 0 || s != 0 || start.Nanosecond() != 0 {
			t.Fatalf("start %v is not midnight", start)
		}
		switch p {
		case PeriodDay:
			if end.Sub(start) != 24*time.Hour {
				t.Fatalf("day [%v, %v)", start, end)
			}
		case PeriodWeek:
			if start.Weekday() != time.Monday || end.Sub(start) != 7*24*time.Hour {
				t.Fatalf("week [%v, %v)", start, end)
			}
		case PeriodMonth:
			if start.Day() != 1 || end.Day() != 1 || end.AddDate(0, -1, 0) != start {
				t.Fatalf("month [%v, %v)", start, end)
			}
		}
		if s2, e2 := p.Bounds(end); !s2.Equal(end) || !e2.After(end) {
			t.Fatalf("next window of %v: [%v, %v)", end, s2, e2)
		}
		if len(periodToken(start)) != 8 && start.Year() >= 1000 {
			t.Fatalf("token %q", periodToken(start))
		}
	})
}

// FuzzStatus reads arbitrary stored period states: no panic, remaining is
// never negative, and a budget that admits an estimate has room for it.
func FuzzStatus(f *testing.F) {
	f.Add([]byte(`{"spent_usd":1.5,"holds":{"r1":{"usd":0.5,"exp":2000}},"alerted":[0.5]}`), 5.0, 0.5, int64(1000))
	f.Add([]byte(`{"spent_usd":9,"holds":{"r1":{"usd":2,"exp":500}}}`), 10.0, 1.0, int64(1000))
	f.Add([]byte(`{"spent_usd":-1e308,"holds":{"a":{"usd":1e308},"b":{"usd":1e308,"exp":9e18}}}`), 1.0, 0.0, int64(0))
	f.Add([]byte(`null`), 1.0, 0.0, int64(0))
	f.Fuzz(func(t *testing.T, value []byte, ceiling, est float64, nowMs int64) {
		if !(ceiling > 0 && ceiling <= MaxUSD) || checkAmount("e", est) != nil {
			return
		}
		var st periodState
		if json.Unmarshal(value, &st) != nil {
			return
		}
		b := Budget{BudgetID: "b", CeilingUSD: ceiling, Period: PeriodDay, AgentID: "a"}
		s := status(b, time.UnixMilli(nowMs), st, nowMs)
		if s.RemainingUSD < 0 || math.IsNaN(s.RemainingUSD) {
			t.Fatalf("remaining %v of %+v", s.RemainingUSD, st)
		}
		if admits(ceiling, st.SpentUSD, s.ReservedUSD, est) && !(st.SpentUSD+s.ReservedUSD+est <= ceiling+nano) {
			t.Fatalf("admitted %v into %+v (reserved %v) under %v", est, st, s.ReservedUSD, ceiling)
		}
		n := len(st.Holds)
		st.prune(nowMs)
		for _, h := range st.Holds {
			if h.Exp <= nowMs {
				t.Fatalf("prune kept %+v", h)
			}
		}
		if len(st.Holds) > n {
			t.Fatal("prune added holds")
		}
	})
}
