// Package telemetry builds a node's OpenTelemetry tracer provider from the
// standard environment variables, so an operator points iii at any OTLP
// collector without iii-specific flags:
//
//   - OTEL_SDK_DISABLED=true: no exporter at all (spans are still made for
//     propagation, and go nowhere).
//   - OTEL_TRACES_EXPORTER: a comma list of otlp, console, none. Unset, it
//     is otlp when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and nothing otherwise. Any
//     other name is [ErrInvalidEnv], and the exporters the list made
//     before the error are shut down (an OTLP/gRPC one holds a connection).
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL:
//     http/protobuf (the default) or grpc. The exporters read the rest of
//     OTEL_EXPORTER_OTLP_* themselves (endpoint, headers, timeout, TLS).
//   - OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: an
//     http:// or https:// URL with a host (gRPC also takes a target such
//     as collector:4317). One without a scheme is [ErrInvalidEnv] naming
//     the variable: the exporters would send to https://localhost:4318
//     instead ("127.0.0.1:4318" is no URL) or to no host at all.
//   - OTEL_EXPORTER_OTLP_HEADERS / OTEL_EXPORTER_OTLP_TRACES_HEADERS:
//     name=value pairs, commas between, values %-encoded. An entry the
//     exporters would skip (no '=', a bad name or %-escape) is
//     [ErrInvalidEnv] naming its position, not its text: the exporters
//     would print it, and these values are usually credentials.
//   - OTEL_SERVICE_NAME overrides the service name given by the caller.
//
// Processors the caller adds ([WithSpanProcessor], e.g. the trace store's
// exporter) run whatever the environment says. console writes one JSON
// span per line to the writer of [WithConsole] (stderr by default).
//
// Every exporter's batch processor is fronted by a counter of the spans
// that never reach it: dropped because OTEL_BSP_MAX_QUEUE_SIZE spans
// already wait (the front drops them itself, counted, so the batch
// processor behind, one batch longer, never drops one silently), in an
// export that failed, or still queued when Shutdown's deadline passed.
// Each is counted once, logged at warn through [WithLogger] (at most once
// every ten seconds, and at Shutdown) and, with [WithMeterProvider], added
// to iii_telemetry_spans_lost (iii_telemetry_spans_lost_total{reason,
// exporter} on /metrics) ([LossQueueFull],
// [LossExportFailed], [LossShutdown]).
//
// [ErrorHandler] routes OpenTelemetry's own errors into a slog.Logger,
// rate-limited, instead of the standard library's log, with the header
// values and anything else that looks like a credential redacted (a
// collector's error answer may echo the key it was sent).
//
//	tp, err := telemetry.NewTracerProvider(ctx, telemetry.WithServiceName("iii"))
//	if err != nil { ... }
//	defer tp.Shutdown(ctx)
//	e, err := engine.New(nc, engine.WithTracerProvider(tp))
package telemetry
