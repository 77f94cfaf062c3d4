package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers/traces"
)

// tracedEngine is an engine on nc whose spans go to the trace store's
// stream (III_SPANS), so `iii traces` and engine::traces::* see them. The
// returned close flushes the spans still buffered and stops the exporter;
// call it after the engine closed. With traced false it is a plain engine.
func tracedEngine(ctx context.Context, nc *nats.Conn, logger *slog.Logger, service string, traced bool) (*engine.Engine, func(context.Context) error, error) {
	if !traced {
		e, err := engine.New(nc, engine.WithLogger(logger))
		return e, func(context.Context) error { return nil }, err
	}
	// The exporter needs an engine to find or create its stream; the
	// node's engine needs the tracer provider that holds the exporter.
	boot, err := engine.New(nc, engine.WithLogger(logger))
	if err != nil {
		return nil, nil, err
	}
	x, err := traces.NewExporter(ctx, boot, traces.WithLogger(logger))
	_ = boot.Close(ctx)
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(traces.NewSpanProcessor(x)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	e, err := engine.New(nc, engine.WithLogger(logger), engine.WithTracerProvider(tp))
	if err != nil {
		_ = tp.Shutdown(ctx)
		return nil, nil, err
	}
	return e, tp.Shutdown, nil
}
