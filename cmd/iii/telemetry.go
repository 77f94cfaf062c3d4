package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/telemetry"
	"github.com/iii-on-nats/iii/workers/traces"
)

// tracedEngine is an engine on nc whose spans go where the OTEL_*
// environment says (telemetry.NewTracerProvider: an OTLP collector, the
// console, nowhere) and, with store true, to the trace store's stream
// (III_SPANS), so `iii traces` and engine::traces::* see them. It also
// returns the options it built the engine with, for more engines of the
// same process (each module's, [moduleConns]). The returned close flushes
// the spans still buffered and stops the exporters; call it after the
// engines closed.
func tracedEngine(ctx context.Context, nc *nats.Conn, logger *slog.Logger, meters metric.MeterProvider, service string, store bool, extra ...engine.Option) (*engine.Engine, []engine.Option, func(context.Context) error, error) {
	opts := []telemetry.Option{telemetry.WithServiceName(service), telemetry.WithLogger(logger)}
	if meters != nil {
		opts = append(opts, telemetry.WithMeterProvider(meters))
	}
	if store {
		// The exporter needs an engine to find or create its stream; the
		// node's engine needs the tracer provider that holds the exporter.
		boot, err := engine.New(nc, append([]engine.Option{engine.WithLogger(logger)}, extra...)...)
		if err != nil {
			return nil, nil, nil, err
		}
		x, err := traces.NewExporter(ctx, boot, traces.WithLogger(logger))
		_ = boot.Close(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		opts = append(opts, telemetry.WithSpanProcessor(traces.NewSpanProcessor(x)))
	}
	tp, err := telemetry.NewTracerProvider(ctx, opts...)
	if err != nil {
		return nil, nil, nil, err
	}
	eopts := append([]engine.Option{engine.WithLogger(logger), engine.WithTracerProvider(tp)}, extra...)
	e, err := engine.New(nc, eopts...)
	if err != nil {
		_ = tp.Shutdown(ctx)
		return nil, nil, nil, err
	}
	return e, eopts, tp.Shutdown, nil
}
