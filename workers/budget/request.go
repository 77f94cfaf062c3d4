package budget

import (
	"math"
	"slices"

	"github.com/iii-on-nats/iii/agent"
)

// Bounds of the requests.
const (
	// MaxUSD bounds every amount: a ceiling, an estimate, an actual cost.
	MaxUSD = 1e9
	// MaxThresholds bounds the alert thresholds of one budget.
	MaxThresholds = 16
	// MinReservationTTL and MaxReservationTTL bound a reservation's ttl_ms.
	MinReservationTTL = 1000 // ms
	MaxReservationTTL = 24 * 60 * 60 * 1000
)

// DefaultThresholds are the alert thresholds of a budget created without
// any: half, 80 % and all of the ceiling.
var DefaultThresholds = []float64{0.5, 0.8, 1.0}

// Budget is a spend ceiling in USD per period for a workspace, an agent,
// or an agent within a workspace.
type Budget struct {
	BudgetID    string  `json:"budget_id"`
	CeilingUSD  float64 `json:"ceiling_usd"`
	Period      Period  `json:"period"`
	WorkspaceID string  `json:"workspace_id,omitempty"`
	AgentID     string  `json:"agent_id,omitempty"`
	// AlertThresholds are fractions of the ceiling in (0,1], ascending.
	AlertThresholds []float64 `json:"alert_thresholds"`
	// CreatedAt is Unix milliseconds.
	CreatedAt int64 `json:"created_at"`
}

// Matches reports whether a call made for workspace ws and agent agentID
// is subject to b: every scope field b sets equals the call's.
func (b Budget) Matches(ws, agentID string) bool {
	if b.WorkspaceID == "" && b.AgentID == "" {
		return false
	}
	return (b.WorkspaceID == "" || b.WorkspaceID == ws) && (b.AgentID == "" || b.AgentID == agentID)
}

// Status is where a budget stands in one period. Amounts are USD;
// PeriodStart and PeriodEnd are Unix milliseconds.
type Status struct {
	BudgetID    string  `json:"budget_id"`
	CeilingUSD  float64 `json:"ceiling_usd"`
	Period      Period  `json:"period"`
	WorkspaceID string  `json:"workspace_id,omitempty"`
	AgentID     string  `json:"agent_id,omitempty"`
	PeriodStart int64   `json:"period_start"`
	PeriodEnd   int64   `json:"period_end"`
	SpentUSD    float64 `json:"spent_usd"`
	// ReservedUSD is the sum of the live (unexpired, unsettled) holds.
	ReservedUSD float64 `json:"reserved_usd"`
	// RemainingUSD is ceiling − spent − reserved, never negative.
	RemainingUSD float64 `json:"remaining_usd"`
}

// CreateRequest is the request of budget::create.
type CreateRequest struct {
	// BudgetID is optional ("b_<nuid>" when empty); creating an id that
	// exists is a conflict.
	BudgetID   string  `json:"budget_id,omitempty"`
	CeilingUSD float64 `json:"ceiling_usd"`
	Period     Period  `json:"period"`
	// WorkspaceID and AgentID scope the budget; at least one is set.
	WorkspaceID string `json:"workspace_id,omitempty"`
	AgentID     string `json:"agent_id,omitempty"`
	// AlertThresholds: nil (or absent) means [DefaultThresholds]; an empty
	// list means no alerts.
	AlertThresholds []float64 `json:"alert_thresholds"`
}

// Validate checks the request; every error is invalid_payload.
func (r CreateRequest) Validate() error {
	if r.BudgetID != "" {
		if err := agent.ValidateID("budget_id", r.BudgetID); err != nil {
			return invalidWrap(err)
		}
	}
	if err := checkAmount("ceiling_usd", r.CeilingUSD); err != nil {
		return err
	}
	if r.CeilingUSD == 0 {
		return invalid("ceiling_usd must be greater than 0")
	}
	if !r.Period.Valid() {
		return invalid("period %.32q is not day, week or month", string(r.Period))
	}
	if r.WorkspaceID == "" && r.AgentID == "" {
		return invalid("a budget needs a workspace_id, an agent_id or both")
	}
	if err := checkScope(r.WorkspaceID, r.AgentID); err != nil {
		return err
	}
	if len(r.AlertThresholds) > MaxThresholds {
		return invalid("at most %d alert_thresholds (got %d)", MaxThresholds, len(r.AlertThresholds))
	}
	for _, t := range r.AlertThresholds {
		if math.IsNaN(t) || t <= 0 || t > 1 {
			return invalid("alert threshold %v is not in (0, 1]", t)
		}
	}
	return nil
}

// thresholds is the request's list, defaulted, sorted and without
// duplicates; never nil.
func (r CreateRequest) thresholds() []float64 {
	if r.AlertThresholds == nil {
		return slices.Clone(DefaultThresholds)
	}
	out := slices.Clone(r.AlertThresholds)
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []float64{}
	}
	return out
}

// DeleteRequest is the request of budget::delete.
type DeleteRequest struct {
	BudgetID string `json:"budget_id"`
}

// Validate checks the request.
func (r DeleteRequest) Validate() error {
	if err := agent.ValidateID("budget_id", r.BudgetID); err != nil {
		return invalidWrap(err)
	}
	return nil
}

// DeleteResponse is the response of budget::delete: Deleted is false when
// no budget had the id.
type DeleteResponse struct {
	Deleted bool `json:"deleted"`
}

// ListRequest is the request of budget::list.
type ListRequest struct {
	// After continues a truncated list: the budget_id of the last budget
	// of the previous page.
	After string `json:"after,omitempty"`
}

// Validate checks the request.
func (r ListRequest) Validate() error { return checkAfter(r.After) }

// ListResponse lists the budgets by id; never null.
type ListResponse struct {
	Budgets []Budget `json:"budgets"`
	// Truncated is set when the server's max payload cut the list short:
	// ask again with After set to the last budget's id.
	Truncated bool `json:"truncated,omitempty"`
}

// selector picks budgets: one by budgetID, or every budget a call for
// workspaceID and agentID is subject to ([Budget.Matches]). budgetID
// excludes the other two.
type selector struct {
	BudgetID, WorkspaceID, AgentID string
}

func (s selector) empty() bool { return s.BudgetID == "" && s.WorkspaceID == "" && s.AgentID == "" }

// validate checks the ids; required says one of them must be set.
func (s selector) validate(required bool) error {
	if s.BudgetID != "" {
		if s.WorkspaceID != "" || s.AgentID != "" {
			return invalid("give either budget_id or workspace_id/agent_id, not both")
		}
		if err := agent.ValidateID("budget_id", s.BudgetID); err != nil {
			return invalidWrap(err)
		}
		return nil
	}
	if required && s.empty() {
		return invalid("name a budget_id, a workspace_id or an agent_id")
	}
	return checkScope(s.WorkspaceID, s.AgentID)
}

// CheckRequest is the request of budget::check.
type CheckRequest struct {
	// BudgetID selects one budget; WorkspaceID and AgentID select every
	// budget a call for them is subject to. BudgetID excludes the others.
	BudgetID    string `json:"budget_id,omitempty"`
	WorkspaceID string `json:"workspace_id,omitempty"`
	AgentID     string `json:"agent_id,omitempty"`
	// EstimatedUSD is the cost the caller is about to incur (default 0).
	EstimatedUSD float64 `json:"estimated_usd,omitempty"`
}

// Validate checks the request.
func (r CheckRequest) Validate() error {
	if err := r.selector().validate(true); err != nil {
		return err
	}
	return checkAmount("estimated_usd", r.EstimatedUSD)
}

// CheckResponse says whether every selected budget would admit the
// estimate now (Allowed; true when none is selected) and where each
// stands.
type CheckResponse struct {
	Allowed bool     `json:"allowed"`
	Budgets []Status `json:"budgets"`
}

// ReserveRequest is the request of budget::reserve.
type ReserveRequest struct {
	// BudgetID selects one budget; WorkspaceID and AgentID select every
	// budget a call for them is subject to. BudgetID excludes the others.
	BudgetID    string `json:"budget_id,omitempty"`
	WorkspaceID string `json:"workspace_id,omitempty"`
	AgentID     string `json:"agent_id,omitempty"`
	// EstimatedUSD is held in every selected budget until settled or
	// expired.
	EstimatedUSD float64 `json:"estimated_usd"`
	// ReservationID makes the call idempotent and names the reservation
	// for budget::settle.
	ReservationID string `json:"reservation_id"`
	// TTLMs is how long the hold lasts unsettled (default: the worker's,
	// 15 minutes), between [MinReservationTTL] and [MaxReservationTTL].
	TTLMs int64 `json:"ttl_ms,omitempty"`
}

// Validate checks the request.
func (r ReserveRequest) Validate() error {
	if err := agent.ValidateID("reservation_id", r.ReservationID); err != nil {
		return invalidWrap(err)
	}
	if err := r.selector().validate(true); err != nil {
		return err
	}
	if err := checkAmount("estimated_usd", r.EstimatedUSD); err != nil {
		return err
	}
	if r.TTLMs != 0 && (r.TTLMs < MinReservationTTL || r.TTLMs > MaxReservationTTL) {
		return invalid("ttl_ms %d is not between %d and %d", r.TTLMs, MinReservationTTL, MaxReservationTTL)
	}
	return nil
}

// ReserveResponse is the answer of a granted reservation: the status of
// every budget holding it (empty when no budget applies).
type ReserveResponse struct {
	ReservationID string   `json:"reservation_id"`
	Budgets       []Status `json:"budgets"`
	// Existing is set when the reservation was granted by an earlier
	// reserve of the id (a retry, or a caller that died holding it and
	// whose successor asks again); EstimatedUSD is then that earlier
	// reserve's estimate and State its record's state ("held",
	// "settling" or "settled"). A caller that cannot tell whether the
	// earlier holder spent can settle it at EstimatedUSD (a no-op once
	// settled) and reserve its own call under a new id.
	Existing     bool    `json:"existing,omitempty"`
	EstimatedUSD float64 `json:"estimated_usd,omitempty"`
	State        string  `json:"state,omitempty"`
}

// SettleRequest is the request of budget::settle. ActualUSD 0 just drops
// the hold (the call cost nothing).
type SettleRequest struct {
	ReservationID string  `json:"reservation_id"`
	ActualUSD     float64 `json:"actual_usd"`
}

// Validate checks the request.
func (r SettleRequest) Validate() error {
	if err := agent.ValidateID("reservation_id", r.ReservationID); err != nil {
		return invalidWrap(err)
	}
	return checkAmount("actual_usd", r.ActualUSD)
}

// SettleResponse is the status of every budget of the reservation, in the
// period it was made in.
type SettleResponse struct {
	Budgets []Status `json:"budgets"`
}

// UsageRequest is the request of budget::usage; an empty selector means
// every budget.
type UsageRequest struct {
	// BudgetID selects one budget; WorkspaceID and AgentID select every
	// budget a call for them is subject to. BudgetID excludes the others.
	BudgetID    string `json:"budget_id,omitempty"`
	WorkspaceID string `json:"workspace_id,omitempty"`
	AgentID     string `json:"agent_id,omitempty"`
	// After continues a truncated answer: the budget_id of the last
	// status of the previous page.
	After string `json:"after,omitempty"`
}

// Validate checks the request.
func (r UsageRequest) Validate() error {
	if err := r.selector().validate(false); err != nil {
		return err
	}
	return checkAfter(r.After)
}

func (r CheckRequest) selector() selector   { return selector{r.BudgetID, r.WorkspaceID, r.AgentID} }
func (r ReserveRequest) selector() selector { return selector{r.BudgetID, r.WorkspaceID, r.AgentID} }
func (r UsageRequest) selector() selector   { return selector{r.BudgetID, r.WorkspaceID, r.AgentID} }

// UsageResponse is the current status of the selected budgets, by id.
type UsageResponse struct {
	Budgets []Status `json:"budgets"`
	// Truncated is set when the server's max payload cut the answer
	// short: ask again with After set to the last status's budget_id.
	Truncated bool `json:"truncated,omitempty"`
}

func checkAmount(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxUSD {
		return invalid("%s %v is not a finite amount between 0 and %g", field, v, float64(MaxUSD))
	}
	return nil
}

func checkAfter(after string) error {
	if after == "" {
		return nil
	}
	if err := agent.ValidateID("after", after); err != nil {
		return invalidWrap(err)
	}
	return nil
}

func checkScope(ws, agentID string) error {
	if ws != "" {
		if err := agent.ValidateID("workspace_id", ws); err != nil {
			return invalidWrap(err)
		}
	}
	if agentID != "" {
		if err := agent.ValidateID("agent_id", agentID); err != nil {
			return invalidWrap(err)
		}
	}
	return nil
}
