package budget

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

func TestCreateRequestValidate(t *testing.T) {
	t.Parallel()
	ok := CreateRequest{WorkspaceID: "ws1", CeilingUSD: 5, Period: PeriodDay}
	with := func(fn func(*CreateRequest)) CreateRequest { r := ok; fn(&r); return r }
	for _, tc := range []struct {
		name string
		req  CreateRequest
		want string // "" valid, else a piece of the message
	}{
		{"workspace", ok, ""},
		{"agent", CreateRequest{AgentID: "coder", CeilingUSD: 0.01, Period: PeriodWeek}, ""},
		{"both, id, thresholds", with(func(r *CreateRequest) {
			r.AgentID, r.BudgetID, r.AlertThresholds, r.Period = "a", "my-budget_1", []float64{1, 0.25}, PeriodMonth
		}), ""},
		{"no alerts", with(func(r *CreateRequest) { r.AlertThresholds = []float64{} }), ""},
		{"max ceiling", with(func(r *CreateRequest) { r.CeilingUSD = MaxUSD }), ""},
		{"no scope", CreateRequest{CeilingUSD: 5, Period: PeriodDay}, "workspace_id, an agent_id"},
		{"zero ceiling", with(func(r *CreateRequest) { r.CeilingUSD = 0 }), "greater than 0"},
		{"negative ceiling", with(func(r *CreateRequest) { r.CeilingUSD = -1 }), "ceiling_usd"},
		{"NaN ceiling", with(func(r *CreateRequest) { r.CeilingUSD = math.NaN() }), "ceiling_usd"},
		{"Inf ceiling", with(func(r *CreateRequest) { r.CeilingUSD = math.Inf(1) }), "ceiling_usd"},
		{"huge ceiling", with(func(r *CreateRequest) { r.CeilingUSD = 2e9 }), "ceiling_usd"},
		{"no period", with(func(r *CreateRequest) { r.Period = "" }), "period"},
		{"bad period", with(func(r *CreateRequest) { r.Period = "year" }), "period"},
		{"bad workspace", with(func(r *CreateRequest) { r.WorkspaceID = "a.b" }), "workspace_id"},
		{"bad agent", with(func(r *CreateRequest) { r.AgentID = "a b" }), "agent_id"},
		{"bad budget id", with(func(r *CreateRequest) { r.BudgetID = "b*" }), "budget_id"},
		{"long budget id", with(func(r *CreateRequest) { r.BudgetID = strings.Repeat("b", 129) }), "budget_id"},
		{"threshold 0", with(func(r *CreateRequest) { r.AlertThresholds = []float64{0} }), "threshold"},
		{"threshold over 1", with(func(r *CreateRequest) { r.AlertThresholds = []float64{1.5} }), "threshold"},
		{"threshold NaN", with(func(r *CreateRequest) { r.AlertThresholds = []float64{math.NaN()} }), "threshold"},
		{"too many thresholds", with(func(r *CreateRequest) { r.AlertThresholds = make([]float64, 17) }), "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkValidation(t, tc.req.Validate(), tc.want)
		})
	}
}

func checkValidation(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("%v is not invalid_payload", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("%q does not mention %q", err, want)
	}
}

func TestThresholdsNormalised(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want []float64
	}{
		{nil, DefaultThresholds},
		{[]float64{}, []float64{}},
		{[]float64{1, 0.5, 0.5, 0.9}, []float64{0.5, 0.9, 1}},
	} {
		got := CreateRequest{AlertThresholds: tc.in}.thresholds()
		if got == nil || !slices.Equal(got, tc.want) {
			t.Errorf("%v → %v, want %v", tc.in, got, tc.want)
		}
	}
	// The default is copied, never shared.
	d := CreateRequest{}.thresholds()
	d[0] = 0.1
	if DefaultThresholds[0] != 0.5 {
		t.Fatal("default thresholds were modified")
	}
}

func TestSelectorRequestsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"reserve ws", ReserveRequest{WorkspaceID: "w", EstimatedUSD: 1, ReservationID: "r"}.Validate(), ""},
		{"reserve budget", ReserveRequest{BudgetID: "b", ReservationID: "r"}.Validate(), ""},
		{"reserve ttl", ReserveRequest{AgentID: "a", ReservationID: "r", TTLMs: 1000}.Validate(), ""},
		{"reserve no selector", ReserveRequest{EstimatedUSD: 1, ReservationID: "r"}.Validate(), "name a budget_id"},
		{"reserve budget and scope", ReserveRequest{BudgetID: "b", WorkspaceID: "w", ReservationID: "r"}.Validate(), "either budget_id"},
		{"reserve no id", ReserveRequest{WorkspaceID: "w", EstimatedUSD: 1}.Validate(), "reservation_id"},
		{"reserve bad id", ReserveRequest{WorkspaceID: "w", ReservationID: "r.1"}.Validate(), "reservation_id"},
		{"reserve negative", ReserveRequest{WorkspaceID: "w", ReservationID: "r", EstimatedUSD: -0.1}.Validate(), "estimated_usd"},
		{"reserve NaN", ReserveRequest{WorkspaceID: "w", ReservationID: "r", EstimatedUSD: math.NaN()}.Validate(), "estimated_usd"},
		{"reserve ttl short", ReserveRequest{WorkspaceID: "w", ReservationID: "r", TTLMs: 999}.Validate(), "ttl_ms"},
		{"reserve ttl long", ReserveRequest{WorkspaceID: "w", ReservationID: "r", TTLMs: MaxReservationTTL + 1}.Validate(), "ttl_ms"},
		{"reserve ttl negative", ReserveRequest{WorkspaceID: "w", ReservationID: "r", TTLMs: -5}.Validate(), "ttl_ms"},
		{"reserve bad workspace", ReserveRequest{WorkspaceID: "w>", ReservationID: "r"}.Validate(), "workspace_id"},
		{"settle", SettleRequest{ReservationID: "r", ActualUSD: 0}.Validate(), ""},
		{"settle no id", SettleRequest{ActualUSD: 1}.Validate(), "reservation_id"},
		{"settle negative", SettleRequest{ReservationID: "r", ActualUSD: -1}.Validate(), "actual_usd"},
		{"settle Inf", SettleRequest{ReservationID: "r", ActualUSD: math.Inf(1)}.Validate(), "actual_usd"},
		{"check", CheckRequest{AgentID: "a"}.Validate(), ""},
		{"check nothing", CheckRequest{}.Validate(), "name a budget_id"},
		{"check bad agent", CheckRequest{AgentID: "é"}.Validate(), "agent_id"},
		{"check negative", CheckRequest{AgentID: "a", EstimatedUSD: -1}.Validate(), "estimated_usd"},
		{"usage all", UsageRequest{}.Validate(), ""},
		{"usage budget and agent", UsageRequest{BudgetID: "b", AgentID: "a"}.Validate(), "either budget_id"},
		{"usage bad budget", UsageRequest{BudgetID: "b/1"}.Validate(), "budget_id"},
		{"delete", DeleteRequest{BudgetID: "b"}.Validate(), ""},
		{"delete empty", DeleteRequest{}.Validate(), "budget_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkValidation(t, tc.err, tc.want)
		})
	}
}

func TestMatches(t *testing.T) {
	t.Parallel()
	w := Budget{WorkspaceID: "W"}
	a := Budget{AgentID: "A"}
	wa := Budget{WorkspaceID: "W", AgentID: "A"}
	none := Budget{}
	for _, tc := range []struct {
		ws, agent string
		want      [4]bool // w, a, wa, none
	}{
		{"W", "A", [4]bool{true, true, true, false}},
		{"W", "", [4]bool{true, false, false, false}},
		{"", "A", [4]bool{false, true, false, false}},
		{"W", "B", [4]bool{true, false, false, false}},
		{"X", "A", [4]bool{false, true, false, false}},
		{"", "", [4]bool{false, false, false, false}},
	} {
		got := [4]bool{w.Matches(tc.ws, tc.agent), a.Matches(tc.ws, tc.agent), wa.Matches(tc.ws, tc.agent), none.Matches(tc.ws, tc.agent)}
		if got != tc.want {
			t.Errorf("call (%q, %q): %v, want %v", tc.ws, tc.agent, got, tc.want)
		}
	}
}

func TestAdmits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ceiling, spent, reserved, est float64
		want                          bool
	}{
		{1, 0, 0, 1, true},
		{1, 0, 0, 1.0000001, false},
		{1, 0.7, 0.2, 0.1, true}, // float sums within a nano-dollar
		{1, 0.9, 0, 0.2, false},
		{1, 1, 0, 0, false}, // exhausted: even nothing is refused
		{1, 1.5, 0, 0, false},
		{1, 0.5, 0.5, 0, false},
		{1, 0.5, 0.4, 0, true},
	} {
		if got := admits(tc.ceiling, tc.spent, tc.reserved, tc.est); got != tc.want {
			t.Errorf("%+v: %v", tc, got)
		}
	}
	if round(0.1+0.2) != 0.3 {
		t.Fatalf("round(0.1+0.2) = %v", round(0.1+0.2))
	}
	if usd(0.1234567) != "$0.123457" || usd(5) != "$5" {
		t.Fatalf("usd: %s %s", usd(0.1234567), usd(5))
	}
}
