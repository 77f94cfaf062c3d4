package orchestrator

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
)

// metrics are the orchestrator's instruments, made on the engine's meter
// (engine.WithMeterProvider): turns started and finished, run latency,
// policy decisions, tokens and cost by provider and model, active grains
// and pending approvals.
type metrics struct {
	turnsStarted  metric.Int64Counter
	turnsFinished metric.Int64Counter
	runDuration   metric.Float64Histogram
	stepDuration  metric.Float64Histogram
	policy        metric.Int64Counter
	tokens        metric.Int64Counter
	cost          metric.Float64Counter

	mu     sync.Mutex
	states map[string]stateSince // each session's current state, for step durations
}

// stateSince is the state a session entered and when (Unix ms).
type stateSince struct {
	state agent.TurnState
	atMs  int64
}

func newMetrics(e *engine.Engine) (*metrics, error) {
	m := e.Meter()
	var ms metrics
	var err error
	if ms.turnsStarted, err = m.Int64Counter("iii.turns.started", metric.WithDescription("Runs started by run::start.")); err != nil {
		return nil, err
	}
	if ms.turnsFinished, err = m.Int64Counter("iii.turns.finished", metric.WithDescription("Runs that ended, by stop reason.")); err != nil {
		return nil, err
	}
	if ms.runDuration, err = m.Float64Histogram("iii.turn.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from run::start to the run's end (approval waits included), by stop reason."),
		metric.WithExplicitBucketBoundaries(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)); err != nil {
		return nil, err
	}
	if ms.stepDuration, err = m.Float64Histogram("iii.turn.step.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a run spent in one state of the turn machine (provisioning, assistant_streaming, function_execute, function_awaiting_approval, steering_check), by state."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)); err != nil {
		return nil, err
	}
	ms.states = map[string]stateSince{}
	if ms.policy, err = m.Int64Counter("iii.policy.decisions", metric.WithDescription("Chokepoint policy answers, by decision (allow, deny, needs_approval, unavailable).")); err != nil {
		return nil, err
	}
	if ms.tokens, err = m.Int64Counter("iii.model.tokens", metric.WithDescription("Model tokens by provider, model and type (input, output).")); err != nil {
		return nil, err
	}
	if ms.cost, err = m.Float64Counter("iii.model.cost_usd", metric.WithDescription("Model spend by provider and model, from the catalog's prices.")); err != nil {
		return nil, err
	}
	return &ms, nil
}

// observeGauges registers the gauges read at collection: active grains
// and parked calls waiting for a human.
func (o *Orchestrator) observeGauges() error {
	m := o.e.Meter()
	grains, err := m.Int64ObservableGauge("iii.grains.active", metric.WithDescription("Session grains active on this orchestrator."))
	if err != nil {
		return err
	}
	pending, err := m.Int64ObservableGauge("iii.approvals.pending", metric.WithDescription("Approval records in the approvals bucket (parked calls and decisions not yet applied)."))
	if err != nil {
		return err
	}
	o.gauges, err = m.RegisterCallback(func(ctx context.Context, ob metric.Observer) error {
		if h := o.Host(); h != nil {
			ob.ObserveInt64(grains, int64(h.Active()))
		}
		// The copies of the bucket held in this process's cache (the
		// primary one and those of the regions whose sessions it served).
		var n int64
		for _, r := range o.approvalRegions() {
			if kv, err := o.approvals.kvs.copyOf(ctx, r); err == nil {
				if st, err := kv.Status(ctx); err == nil {
					n += int64(st.Values())
				}
			}
		}
		ob.ObserveInt64(pending, n)
		return nil
	}, grains, pending)
	return err
}

// observe records what a turn_state_changed event tells: how long the run
// spent in the state it leaves and, at its end, the run's stop reason and
// duration.
func (ms *metrics) observe(ctx context.Context, ev agent.Event) {
	if ms == nil || ev.Type != agent.EventTurnStateChanged || ev.View == nil {
		return
	}
	ms.mu.Lock()
	prev, ok := ms.states[ev.SessionID]
	if ev.State.Terminal() {
		delete(ms.states, ev.SessionID)
	} else {
		ms.states[ev.SessionID] = stateSince{state: ev.State, atMs: ev.View.UpdatedAtMs}
	}
	ms.mu.Unlock()
	if ok && prev.state != ev.State && ev.View.UpdatedAtMs >= prev.atMs {
		ms.stepDuration.Record(ctx, float64(ev.View.UpdatedAtMs-prev.atMs)/1000,
			metric.WithAttributes(attribute.String("state", string(prev.state))))
	}
	if !ev.State.Terminal() {
		return
	}
	sr := attribute.String("stop_reason", string(ev.View.StopReason))
	ms.turnsFinished.Add(ctx, 1, metric.WithAttributes(sr))
	if d := ev.View.UpdatedAtMs - ev.View.StartedAtMs; d >= 0 {
		ms.runDuration.Record(ctx, float64(d)/1000, metric.WithAttributes(sr))
	}
}

// forget drops a passivated session's state.
func (ms *metrics) forget(sid string) {
	if ms == nil {
		return
	}
	ms.mu.Lock()
	delete(ms.states, sid)
	ms.mu.Unlock()
}

// model counts a model call's tokens and cost.
func (ms *metrics) model(ctx context.Context, provider, model string, usage *agent.Usage) {
	if ms == nil || usage == nil {
		return
	}
	pm := []attribute.KeyValue{attribute.String("provider", provider), attribute.String("model", model)}
	// A count below zero (a broken server or proxy) counts as none: the
	// counter only goes up.
	in := max(usage.InputTokens, 0) + max(usage.CacheReadTokens, 0) + max(usage.CacheWriteTokens, 0)
	ms.tokens.Add(ctx, in, metric.WithAttributes(append(pm, attribute.String("type", "input"))...))
	ms.tokens.Add(ctx, max(usage.OutputTokens, 0), metric.WithAttributes(append(pm, attribute.String("type", "output"))...))
	if usage.CostUSD > 0 {
		ms.cost.Add(ctx, usage.CostUSD, metric.WithAttributes(pm...))
	}
}

// policyDecision counts one policy answer.
func (ms *metrics) policyDecision(ctx context.Context, decision string) {
	if ms == nil {
		return
	}
	ms.policy.Add(ctx, 1, metric.WithAttributes(attribute.String("decision", decision)))
}
