package budget

import (
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/iii-on-nats/iii/subjects"
)

// Ledger keys (see the package documentation).
const (
	defPrefix   = "def."
	spendPrefix = "spend."
	resPrefix   = "res."
)

func defKey(budgetID string) string { return defPrefix + budgetID }

func spendKey(budgetID string, periodStart time.Time) string {
	return spendPrefix + budgetID + "." + periodToken(periodStart)
}

func resKey(reservationID string) string { return resPrefix + reservationID }

// kvSubject is the stream subject of a ledger key (for compare-and-set
// writes that carry a TTL, which jetstream.KeyValue.Update cannot).
func kvSubject(key string) string { return "$KV." + subjects.BudgetsBucket + "." + key }

// nano is the precision amounts are kept at (a billionth of a dollar), so
// float sums do not drift: 0.1 + 0.2 is stored as 0.3.
const nano = 1e-9

func round(v float64) float64 { return math.Round(v*1e9) / 1e9 }

// usd formats an amount for messages: "$0.125".
func usd(v float64) string { return "$" + strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64) }

// periodState is the value of "spend.<budget>.<period>": what was spent in
// the period and the holds of the reservations made in it.
type periodState struct {
	SpentUSD float64 `json:"spent_usd"`
	// Holds by reservation id. An expired hold no longer counts as
	// reserved but stays (a settle marker: its absence means "settled")
	// until its reservation record is gone, then it is dropped.
	Holds map[string]hold `json:"holds,omitempty"`
	// Alerted are the thresholds already announced this period.
	Alerted []float64 `json:"alerted,omitempty"`
}

// hold is one reservation's claim on a period: USD until Exp (Unix ms).
type hold struct {
	USD float64 `json:"usd"`
	Exp int64   `json:"exp"`
}

// reserved is the sum of the holds still live at nowMs.
func (s *periodState) reserved(nowMs int64) float64 {
	var sum float64
	for _, h := range s.Holds {
		if h.Exp > nowMs {
			sum += h.USD
		}
	}
	return round(sum)
}

// prune drops the holds expired before cutoffMs and reports whether any
// was.
func (s *periodState) prune(cutoffMs int64) bool {
	n := len(s.Holds)
	for id, h := range s.Holds {
		if h.Exp <= cutoffMs {
			delete(s.Holds, id)
		}
	}
	return len(s.Holds) != n
}

func (s *periodState) alerted(t float64) bool {
	for _, a := range s.Alerted {
		if a == t {
			return true
		}
	}
	return false
}

// markAlerted adds t to the announced thresholds.
func (s *periodState) markAlerted(t float64) {
	s.Alerted = append(s.Alerted, t)
	sort.Float64s(s.Alerted)
}

// admits reports whether a budget with ceiling, spent and live reserved
// amounts can hold est more: the total stays within the ceiling and the
// ceiling is not already reached (so a zero estimate is refused once the
// budget is exhausted).
func admits(ceiling, spent, reserved, est float64) bool {
	used := spent + reserved
	return used+est <= ceiling+nano/2 && used < ceiling-nano/2
}

// status is where budget b stands in the period starting at start, given
// its state at nowMs.
func status(b Budget, start time.Time, st periodState, nowMs int64) Status {
	start, end := b.Period.Bounds(start)
	res := st.reserved(nowMs)
	return Status{
		BudgetID:     b.BudgetID,
		CeilingUSD:   b.CeilingUSD,
		Period:       b.Period,
		WorkspaceID:  b.WorkspaceID,
		AgentID:      b.AgentID,
		PeriodStart:  start.UnixMilli(),
		PeriodEnd:    end.UnixMilli(),
		SpentUSD:     round(st.SpentUSD),
		ReservedUSD:  res,
		RemainingUSD: max(0, round(b.CeilingUSD-st.SpentUSD-res)),
	}
}

// Reservation record states.
const (
	resPending  = "pending"  // a reserve is placing the holds
	resHeld     = "held"     // every hold is placed
	resSettling = "settling" // actual_usd is fixed; holds are being counted
	resSettled  = "settled"  // the actual cost is counted
)

// granted reports whether every hold of the reservation was placed.
func (r reservation) granted() bool {
	return r.State == resHeld || r.State == resSettling || r.State == resSettled
}

// reservation is the value of "res.<reservation id>".
type reservation struct {
	ReservationID string    `json:"reservation_id"`
	State         string    `json:"state"`
	EstimatedUSD  float64   `json:"estimated_usd"`
	ActualUSD     float64   `json:"actual_usd,omitempty"`
	Budgets       []holdRef `json:"budgets"`
	CreatedAt     int64     `json:"created_at"`
	UpdatedAt     int64     `json:"updated_at"`
	ExpiresAt     int64     `json:"expires_at"`
	SettledAt     int64     `json:"settled_at,omitempty"`
}

// holdRef names the period state a reservation holds in.
type holdRef struct {
	BudgetID    string `json:"budget_id"`
	PeriodStart int64  `json:"period_start"`
}

func (r holdRef) start() time.Time { return time.UnixMilli(r.PeriodStart).UTC() }

func (r holdRef) key() string { return spendKey(r.BudgetID, r.start()) }
