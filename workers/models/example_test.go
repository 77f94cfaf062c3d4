package models_test

import (
	"context"
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/models"
)

// Example serves the embedded catalog, resolves an undated alias, prices a
// turn, and reconciles a provider that lists one model the catalog lacks.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	e := x.Engine
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	w := models.NewWorker()
	if err := w.Start(ctx, e); err != nil {
		panic(err)
	}
	defer w.Close(ctx)

	m, err := engine.Call[*models.Model](ctx, e, models.GetFunction,
		models.GetRequest{Provider: "anthropic", ModelID: "claude-sonnet-4-5"})
	if err != nil {
		panic(err)
	}
	fmt.Println(m.ID, m.ContextWindow, m.MaxOutputTokens, m.Supports(agent.CapabilityTools))
	usage := agent.Usage{InputTokens: 100_000, OutputTokens: 10_000, CacheReadTokens: 50_000}
	fmt.Printf("turn cost: $%.3f\n", m.Pricing.Cost(usage))

	sup, err := engine.Call[models.SupportsResponse](ctx, e, models.SupportsFunction,
		models.SupportsRequest{Provider: "scripted", ModelID: "echo", Capability: agent.CapabilityVision})
	if err != nil {
		panic(err)
	}
	fmt.Println("echo sees images:", sup.Supported)

	// A provider worker lists its models; here a stand-in for "scripted".
	pw, err := e.Worker("provider-example")
	if err != nil {
		panic(err)
	}
	defer pw.Close(ctx)
	err = pw.Register(engine.Function{
		ID: models.ProviderModelsFunction("scripted"),
		Handler: engine.Typed(func(context.Context, struct{}) (models.ProviderModelsResponse, error) {
			return models.ProviderModelsResponse{Models: []models.ProviderModel{{ID: "echo"}, {ID: "parrot", DisplayName: "Parrot"}}}, nil
		}),
	})
	if err != nil {
		panic(err)
	}
	r, err := engine.Call[models.ReconcileResponse](ctx, e, models.ReconcileFunction, models.ReconcileRequest{Provider: "scripted"})
	if err != nil {
		panic(err)
	}
	fmt.Println("known", r.Known, "added", r.Added, "missing", r.Missing)
	p, _ := engine.Call[*models.Model](ctx, e, models.GetFunction, models.GetRequest{Provider: "scripted", ModelID: "parrot"})
	fmt.Println(p.DisplayName, "reconciled:", p.Reconciled, "tools:", p.SupportsTools)
	// Output:
	// claude-sonnet-4-5-20250929 200000 64000 true
	// turn cost: $0.465
	// echo sees images: false
	// known [echo] added [parrot] missing []
	// Parrot reconciled: true tools: false
}
