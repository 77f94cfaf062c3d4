package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
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
// engines closed. settings are the process's worker settings: the trace
// store's stream limits (traces.stream_max_age, traces.stream_max_bytes)
// apply to III_SPANS whoever creates it, and an existing stream is brought
// to the ones given ([spanStreamLimits]).
func tracedEngine(ctx context.Context, nc *nats.Conn, logger *slog.Logger, meters metric.MeterProvider, service string, store bool, settings map[string]map[string]string, extra ...engine.Option) (*engine.Engine, []engine.Option, func(context.Context) error, error) {
	limits, err := parseSpanStreamLimits(settings[traces.WorkerName])
	if err != nil {
		return nil, nil, nil, err
	}
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
		x, err := traces.NewExporter(ctx, boot, append(limits.options(), traces.WithLogger(logger))...)
		_ = boot.Close(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		opts = append(opts, telemetry.WithSpanProcessor(traces.NewSpanProcessor(x)))
	}
	if err := limits.apply(ctx, nc, logger); err != nil {
		return nil, nil, nil, err
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

// spanStreamLimits are the limits of the trace store's stream (III_SPANS)
// the settings give; zero: not given.
type spanStreamLimits struct {
	maxAge   time.Duration
	maxBytes int64
}

// parseSpanStreamLimits reads traces.stream_max_age and
// traces.stream_max_bytes as the traces worker does, and refuses what it
// refuses.
func parseSpanStreamLimits(settings map[string]string) (spanStreamLimits, error) {
	maxAge, maxBytes, err := traces.StreamLimits(settings)
	return spanStreamLimits{maxAge: maxAge, maxBytes: maxBytes}, err
}

// options are the exporter's options for these limits.
func (l spanStreamLimits) options() []traces.Option {
	var opts []traces.Option
	if l.maxAge != 0 {
		opts = append(opts, traces.WithStreamMaxAge(l.maxAge))
	}
	if l.maxBytes != 0 {
		opts = append(opts, traces.WithStreamMaxBytes(l.maxBytes))
	}
	return opts
}

// apply brings an existing III_SPANS to the limits given: a stream created
// by an earlier start keeps its limits otherwise, and a restart with a new
// value would do nothing. A limit not given leaves the stream's as it is
// (an operator may have tuned it with nats stream edit); a missing stream
// is left to whoever creates it.
func (l spanStreamLimits) apply(ctx context.Context, nc *nats.Conn, logger *slog.Logger) error {
	if l.maxAge == 0 && l.maxBytes == 0 {
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, traces.StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return wire.Wrap(wire.CodeUnavailable, err, "stream %s", traces.StreamName)
	}
	cfg := s.CachedInfo().Config
	changed := false
	if l.maxAge != 0 && cfg.MaxAge != l.maxAge {
		cfg.MaxAge, changed = l.maxAge, true
	}
	if l.maxBytes != 0 && cfg.MaxBytes != l.maxBytes {
		cfg.MaxBytes, changed = l.maxBytes, true
	}
	if !changed {
		return nil
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return wire.Wrap(wire.CodeUnavailable, err, "update the limits of stream %s", traces.StreamName)
	}
	logger.Info("trace stream limits updated", "stream", traces.StreamName, "max_age", cfg.MaxAge, "max_bytes", cfg.MaxBytes)
	return nil
}
