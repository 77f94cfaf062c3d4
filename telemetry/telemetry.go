package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ErrInvalidEnv is returned for an environment variable with a value this
// package does not know.
var ErrInvalidEnv = errors.New("telemetry: invalid environment")

// Option configures [NewTracerProvider].
type Option func(*options)

type options struct {
	service    string
	processors []sdktrace.SpanProcessor
	getenv     func(string) string
	console    io.Writer
	logger     *slog.Logger
	meters     metric.MeterProvider
}

// WithLogger sets where the exporters' lost spans are reported (see
// [NewTracerProvider]); without it they are only counted.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMeterProvider adds the counter iii_telemetry_spans_lost{reason,
// exporter} of the exporters' lost spans to mp (the node's /metrics).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.meters = mp } }

// WithServiceName sets service.name (OTEL_SERVICE_NAME wins).
func WithServiceName(name string) Option { return func(o *options) { o.service = name } }

// WithSpanProcessor adds a processor that runs whatever the environment
// says.
func WithSpanProcessor(p sdktrace.SpanProcessor) Option {
	return func(o *options) { o.processors = append(o.processors, p) }
}

// WithGetenv replaces os.Getenv (tests).
func WithGetenv(getenv func(string) string) Option { return func(o *options) { o.getenv = getenv } }

// WithConsole sets where the console exporter writes (default stderr).
func WithConsole(w io.Writer) Option { return func(o *options) { o.console = w } }

// NewTracerProvider builds the tracer provider the environment asks for
// (package doc). Its Shutdown flushes every exporter.
func NewTracerProvider(ctx context.Context, opts ...Option) (*sdktrace.TracerProvider, error) {
	o := options{service: "iii", getenv: os.Getenv, console: os.Stderr}
	for _, opt := range opts {
		opt(&o)
	}
	if s := o.getenv("OTEL_SERVICE_NAME"); s != "" {
		o.service = s
	}
	tpOpts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", o.service))),
	}
	for _, p := range o.processors {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(p))
	}
	exporters, err := exportersFromEnv(ctx, o)
	if err != nil {
		return nil, err
	}
	for _, x := range exporters {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(countedBatcher(x.SpanExporter, x.name, o)))
	}
	return sdktrace.NewTracerProvider(tpOpts...), nil
}

// namedExporter is an exporter and its name in OTEL_TRACES_EXPORTER.
type namedExporter struct {
	sdktrace.SpanExporter
	name string
}

// exportersFromEnv makes the exporters OTEL_TRACES_EXPORTER names. On an
// error it shuts down the ones it already made: an OTLP/gRPC exporter
// holds a client connection and its goroutines until Shutdown.
func exportersFromEnv(ctx context.Context, o options) ([]namedExporter, error) {
	if strings.EqualFold(strings.TrimSpace(o.getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	names := o.getenv("OTEL_TRACES_EXPORTER")
	if names == "" {
		if o.getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && o.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
		names = "otlp"
	}
	var out []namedExporter
	fail := func(err error) ([]namedExporter, error) {
		for _, x := range out {
			// Nothing was exported yet: Shutdown only releases.
			_ = x.Shutdown(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	for _, name := range strings.Split(names, ",") {
		switch strings.TrimSpace(strings.ToLower(name)) {
		case "none", "":
		case "console":
			x, err := stdouttrace.New(stdouttrace.WithWriter(o.console))
			if err != nil {
				return fail(err)
			}
			out = append(out, namedExporter{x, "console"})
		case "otlp":
			x, err := otlpExporter(ctx, o)
			if err != nil {
				return fail(err)
			}
			out = append(out, namedExporter{x, "otlp"})
		default:
			return fail(fmt.Errorf("%w: OTEL_TRACES_EXPORTER %q (want otlp, console or none)", ErrInvalidEnv, name))
		}
	}
	return out, nil
}

// otlpExporter makes the OTLP exporter of the configured protocol; it
// reads the endpoint, headers and the rest from OTEL_EXPORTER_OTLP_*.
// Header variables the exporter would not parse whole are refused first
// ([checkHeaders]): the exporter would print them.
func otlpExporter(ctx context.Context, o options) (sdktrace.SpanExporter, error) {
	if err := checkHeaders(o.getenv); err != nil {
		return nil, err
	}
	proto := o.getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = o.getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf":
		if err := checkEndpoints(o.getenv, false); err != nil {
			return nil, err
		}
		return otlptracehttp.New(ctx)
	case "grpc":
		if err := checkEndpoints(o.getenv, true); err != nil {
			return nil, err
		}
		return otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%w: OTLP protocol %q (want http/protobuf or grpc)", ErrInvalidEnv, proto)
	}
}

// endpointVars are the variables the OTLP exporters take their
// collector's address from (the second wins).
var endpointVars = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}

// checkEndpoints refuses an endpoint the exporters would not send to. One
// that is no URL ("127.0.0.1:4318": a colon in the first path segment)
// they skip, printing it to OpenTelemetry's global logger, and send to
// their default, https://localhost:4318, with the configured headers; an
// OTLP/HTTP one without a scheme ("collector:4318" reads as scheme
// "collector") has no host, and every export fails. gRPC takes a target
// without a scheme. The error names the variable, not the value: a URL
// may hold a password.
func checkEndpoints(getenv func(string) string, grpc bool) error {
	for _, name := range endpointVars {
		v := strings.TrimSpace(getenv(name)) // as the exporters read it
		if v == "" {
			continue
		}
		var why string
		u, err := url.Parse(v)
		switch {
		case err != nil:
			why = "is not a URL"
		case strings.EqualFold(u.Scheme, "http") || strings.EqualFold(u.Scheme, "https"):
			if u.Host == "" {
				why = "has no host"
			}
		case !grpc:
			why = "is not an http:// or https:// URL"
		}
		if why != "" {
			return fmt.Errorf("%w: %s %s (want http://host:port or https://host:port; the value is not shown: it may hold a credential)",
				ErrInvalidEnv, name, why)
		}
	}
	return nil
}
