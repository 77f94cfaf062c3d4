package orchestrator

import (
	"context"

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
	policy        metric.Int64Counter
	tokens        metric.Int64Counter
	cost          metric.Float64Counter
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
		if o.host != nil {
			ob.ObserveInt64(grains, int64(o.host.Active()))
		}
		if st, err := o.approvals.kv.Status(ctx); err == nil {
			ob.ObserveInt64(pending, int64(st.Values()))
		}
		return nil
	}, grains, pending)
	return err
}

// finished counts a run's end from its final turn_state_changed event.
func (ms *metrics) finished(ctx context.Context, ev agent.Event) {
	if ms == nil || ev.Type != agent.EventTurnStateChanged || !ev.State.Terminal() || ev.View == nil {
		return
	}
	sr := attribute.String("stop_reason", string(ev.View.StopReason))
	ms.turnsFinished.Add(ctx, 1, metric.WithAttributes(sr))
	if d := ev.View.UpdatedAtMs - ev.View.StartedAtMs; d >= 0 {
		ms.runDuration.Record(ctx, float64(d)/1000, metric.WithAttributes(sr))
	}
}

// model counts a model call's tokens and cost.
func (ms *metrics) model(ctx context.Context, provider, model string, usage *agent.Usage) {
	if ms == nil || usage == nil {
		return
	}
	pm := []attribute.KeyValue{attribute.String("provider", provider), attribute.String("model", model)}
	ms.tokens.Add(ctx, usage.InputTokens+usage.CacheReadTokens+usage.CacheWriteTokens, metric.WithAttributes(append(pm, attribute.String("type", "input"))...))
	ms.tokens.Add(ctx, usage.OutputTokens, metric.WithAttributes(append(pm, attribute.String("type", "output"))...))
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
