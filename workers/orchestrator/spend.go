package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// The model layer's functions the orchestrator calls.
const (
	modelsGetFunction     = "models::get"
	budgetReserveFunction = "budget::reserve"
	budgetSettleFunction  = "budget::settle"
	budgetCheckFunction   = "budget::check"
	// modelInfoTTL is how long a catalog entry is reused.
	modelInfoTTL = time.Minute
	// defaultMaxOutput is the output bound of an estimate when neither
	// the run nor the catalog gives one.
	defaultMaxOutput = 4096
)

// spend prices model calls from the model catalog and holds their
// estimated cost in the run's budgets while they stream (reserve before,
// settle with the actual cost after).
type spend struct {
	e      *engine.Engine
	logger *slog.Logger

	mu     sync.Mutex
	models map[string]modelInfo
}

type modelInfo struct {
	model agent.Model
	known bool
	at    time.Time
}

func newSpend(e *engine.Engine, logger *slog.Logger) *spend {
	return &spend{e: e, logger: logger, models: map[string]modelInfo{}}
}

// model is the catalog entry of provider/id; known is false when the
// catalog has no entry or no catalog worker runs.
func (s *spend) model(ctx context.Context, provider, id string) (agent.Model, bool, error) {
	key := provider + "/" + id
	s.mu.Lock()
	mi, ok := s.models[key]
	s.mu.Unlock()
	if ok && time.Since(mi.at) < modelInfoTTL {
		return mi.model, mi.known, nil
	}
	var m *agent.Model
	err := s.e.Trigger(ctx, modelsGetFunction, map[string]string{"provider": provider, "model_id": id}, &m)
	switch {
	case errors.Is(err, wire.ErrFunctionNotFound):
		m = nil
	case err != nil:
		return agent.Model{}, false, err
	}
	mi = modelInfo{known: m != nil, at: time.Now()}
	if m != nil {
		mi.model = *m
	}
	s.mu.Lock()
	s.models[key] = mi
	s.mu.Unlock()
	return mi.model, mi.known, nil
}

// budgeted reports whether a run is subject to budgets: it names a
// workspace or an agent.
func budgeted(run agent.RunStart) bool { return run.WorkspaceID != "" || run.AgentID != "" }

type reserveRequest struct {
	WorkspaceID   string  `json:"workspace_id,omitempty"`
	AgentID       string  `json:"agent_id,omitempty"`
	EstimatedUSD  float64 `json:"estimated_usd"`
	ReservationID string  `json:"reservation_id"`
}

type budgetsAnswer struct {
	Budgets []struct {
		BudgetID string `json:"budget_id"`
	} `json:"budgets"`
	// Existing: an earlier reserve of the id granted it (see reserve).
	Existing     bool    `json:"existing"`
	EstimatedUSD float64 `json:"estimated_usd"`
}

// maxReserveRounds bounds how many reservation ids reserve walks past
// that earlier activations of the step left behind (one a crash).
const maxReserveRounds = 16

// reserve holds estimate in the run's budgets for a reservation named
// after base (the run and step), and returns the id it holds (held: any
// budget matched; only then is there something to settle). It returns a
// non-nil stop when the model must not be called: BudgetExceeded when a
// budget refuses (or has no price to enforce), a failure when the budget
// worker cannot be asked (fail closed on money).
//
// A reservation of base granted before was made by an earlier call of
// this step: an activation killed after it reserved (whose call's spend
// is unknown: the provider may have charged it in part or whole) or one
// that settled and died before its record moved on. Its hold is settled
// at its own estimate, an upper bound of what it spent (a no-op when it
// was settled already), and this call reserves the next id, base-2,
// base-3 and so on: before, the replay's reserve found the old hold
// granted, the replayed call settled it, and the dead call's spend was
// never counted. Within one activation a step reserves once, so an
// existing reservation always belongs to an earlier one.
func (s *spend) reserve(ctx context.Context, req session.ModelRequest, base string, estimate float64, priced bool) (id string, held bool, stop turn.Input) {
	for round := 1; ; round++ {
		id = base
		if round > 1 {
			id = fmt.Sprintf("%s-%d", base, round)
		}
		var ans budgetsAnswer
		err := s.e.Trigger(ctx, budgetReserveFunction, reserveRequest{
			WorkspaceID: req.Run.WorkspaceID, AgentID: req.Run.AgentID, EstimatedUSD: estimate, ReservationID: id,
		}, &ans)
		if errors.Is(err, wire.ErrBudgetExceeded) {
			return "", false, turn.BudgetExceeded{Message: wire.From(err).Message}
		}
		if err != nil {
			return "", false, turn.ModelFailed{Kind: agent.ErrorTransient, Message: "the budget gate did not answer, so the model was not called: " + wire.From(err).Error()}
		}
		if ans.Existing {
			if round == maxReserveRounds {
				return "", false, turn.ModelFailed{Kind: agent.ErrorTransient, Message: fmt.Sprintf("%d earlier calls of this step hold reservations; the model was not called again", round)}
			}
			s.logger.WarnContext(ctx, "an earlier call of this step held a budget reservation; counting its estimate as spent", "reservation_id", id, "estimated_usd", ans.EstimatedUSD)
			s.settle(ctx, id, ans.EstimatedUSD)
			continue
		}
		if len(ans.Budgets) > 0 && !priced {
			s.settle(ctx, id, 0)
			return "", false, turn.BudgetExceeded{Message: fmt.Sprintf("model %s/%s has no price in the catalog, so budget %s cannot be enforced", req.Provider, req.Model, ans.Budgets[0].BudgetID)}
		}
		return id, len(ans.Budgets) > 0, nil
	}
}

// settleTimeout bounds settle's tries; settleAttempt one of them.
var settleTimeout, settleAttempt = 30 * time.Second, 5 * time.Second

// settle records the actual cost of reservation id. Settling is
// idempotent by reservation id, so a settle that failed on the way (the
// budget worker restarting: no responders; its store electing a leader:
// unavailable or timeout) is tried again, for up to settleTimeout; before,
// one failed try left the spend uncounted. A failure is logged (the hold
// lapses at its TTL and the spend is not counted).
func (s *spend) settle(ctx context.Context, id string, actual float64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	err := engine.Retry(ctx, settleAttempt, func(ctx context.Context) error {
		return s.e.Trigger(ctx, budgetSettleFunction, map[string]any{"reservation_id": id, "actual_usd": actual}, nil)
	}, func(err error) bool {
		we := wire.From(err)
		return we.Retryable || we.Code == wire.CodeFunctionNotFound
	})
	if err != nil {
		s.logger.Warn("budget settle failed; the spend of this call is not counted", "reservation_id", id, "actual_usd", actual, "error", err)
	}
}

// estimate is an upper bound of a call's cost: every input character a
// token (a generous bound of the ~4 characters per token of English) at
// the input price, plus the output bound at the output price.
func estimate(m agent.Model, req session.ModelRequest, tools []agent.Tool) float64 {
	chars := len(req.System)
	for _, msg := range req.Messages {
		chars += 16
		for _, c := range msg.Content {
			chars += len(c.Text) + len(c.Data)
			if c.Arguments != nil {
				b, _ := json.Marshal(c.Arguments)
				chars += len(b)
			}
		}
	}
	for _, t := range tools {
		b, _ := json.Marshal(t)
		chars += len(b)
	}
	out := req.Run.MaxTokens
	if out == 0 {
		out = m.MaxOutputTokens
	}
	if out == 0 {
		out = defaultMaxOutput
	}
	return (float64(chars)*m.Pricing.InputPer1M + float64(out)*m.Pricing.OutputPer1M) / 1e6
}

// toolList is the catalog's functions as tools, refreshed in the
// background once stale, so a model call never waits for discovery after
// the first; the first takes the catalog the run's start discovered a
// moment before, when there is one (toolsFresh).
type toolList struct {
	catalog *catalogCache
	ttl     time.Duration

	mu         sync.Mutex
	at         time.Time
	tools      []agent.Tool
	ids        map[string]bool // of tools; replaced, never changed
	refreshing bool
}

// toolsFresh is how recent a discovery the catalog cache made must be for
// the tool list to take it rather than discover again.
const toolsFresh = 5 * time.Second

// all returns every function of the catalog as a tool, sorted by id.
func (l *toolList) all(ctx context.Context) []agent.Tool {
	l.mu.Lock()
	tools, at, busy := l.tools, l.at, l.refreshing
	stale := time.Since(at) >= l.ttl
	if stale && !busy && !at.IsZero() {
		l.refreshing = true
		go func() {
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l.refresh(rctx, 0)
		}()
	}
	l.mu.Unlock()
	if at.IsZero() {
		return l.refresh(ctx, toolsFresh)
	}
	return tools
}

// refresh rebuilds the list from a discovery that ended within fresh, or
// a new one.
func (l *toolList) refresh(ctx context.Context, fresh time.Duration) []agent.Tool {
	fns, err := l.catalog.functions(ctx, fresh)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refreshing = false
	if err != nil {
		return l.tools
	}
	tools := make([]agent.Tool, 0, len(fns))
	for _, f := range fns {
		t := agent.Tool{FunctionID: f.ID, Description: f.Description}
		if len(f.RequestSchema) > 0 {
			var schema map[string]any
			if json.Unmarshal(f.RequestSchema, &schema) == nil {
				t.InputSchema = schema
			}
		}
		tools = append(tools, t)
	}
	sort.Slice(tools, func(i, j int) bool { return tools[i].FunctionID < tools[j].FunctionID })
	ids := make(map[string]bool, len(fns))
	for id := range fns {
		ids[id] = true
	}
	l.tools, l.ids, l.at = tools, ids, time.Now()
	return tools
}

// registered is the set of the functions all lists (nil when no
// discovery has answered yet). It is never changed once returned.
func (l *toolList) registered(ctx context.Context) map[string]bool {
	l.all(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ids
}

// offered is the tools run offers the model.
func (l *toolList) offered(ctx context.Context, run agent.RunStart) []agent.Tool {
	if run.ToolMode == agent.ToolsNone {
		return nil
	}
	var out []agent.Tool
	for _, t := range l.all(ctx) {
		if run.Offers(t.FunctionID) {
			out = append(out, t)
		}
	}
	return out
}
