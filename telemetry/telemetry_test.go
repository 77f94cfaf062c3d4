package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/iii-on-nats/iii/telemetry"
)

func env(m map[string]string) telemetry.Option {
	return telemetry.WithGetenv(func(k string) string { return m[k] })
}

// Spans reach an OTLP/HTTP collector named by the standard variables.
func TestOTLPHTTP(t *testing.T) {
	var posts, bytesIn atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			b, _ := io.ReadAll(r.Body)
			posts.Add(1)
			bytesIn.Add(int64(len(b)))
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL) // read by the exporter itself
	ctx := context.Background()
	tp, err := telemetry.NewTracerProvider(ctx, telemetry.WithServiceName("iii-test"))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(ctx, "run::start")
	span.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 || bytesIn.Load() == 0 {
		t.Fatalf("the collector got %d posts (%d bytes)", posts.Load(), bytesIn.Load())
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		env     map[string]string
		printed bool
		err     error
	}{
		{"nothing set: no exporter", map[string]string{}, false, nil},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true, nil},
		{"console, disabled", map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, false, nil},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false, nil},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, telemetry.ErrInvalidEnv},
		{"unknown protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, telemetry.ErrInvalidEnv},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			tp, err := telemetry.NewTracerProvider(ctx, env(tt.env), telemetry.WithConsole(&out))
			if !errors.Is(err, tt.err) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			_, span := tp.Tracer("t").Start(ctx, "policy::check_permissions")
			span.End()
			if err := tp.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(out.String(), "policy::check_permissions"); got != tt.printed {
				t.Fatalf("console printed %v, want %v: %q", got, tt.printed, out.String())
			}
		})
	}
}

// The service name is the caller's unless OTEL_SERVICE_NAME says otherwise.
func TestServiceName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var out bytes.Buffer
	tp, err := telemetry.NewTracerProvider(ctx, env(map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "edge-7"}),
		telemetry.WithServiceName("iii"), telemetry.WithConsole(&out))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(ctx, "x")
	span.End()
	_ = tp.Shutdown(ctx)
	if !strings.Contains(out.String(), "edge-7") {
		t.Fatalf("service name not in %q", out.String())
	}
}

// A record logged with a span's context carries its trace and span ids.
func TestLogHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp, err := telemetry.NewTracerProvider(ctx, env(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tp.Shutdown(ctx) }()
	var out bytes.Buffer
	logger := slog.New(telemetry.LogHandler(slog.NewTextHandler(&out, nil))).With("worker", "w")
	sctx, span := tp.Tracer("t").Start(ctx, "op")
	logger.WarnContext(sctx, "with span")
	span.End()
	logger.Warn("without")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "trace_id="+span.SpanContext().TraceID().String()) ||
		!strings.Contains(lines[0], "span_id=") || !strings.Contains(lines[0], "worker=w") || strings.Contains(lines[1], "trace_id") {
		t.Fatalf("log lines:\n%s", out.String())
	}
}

// sink is an OTLP/gRPC trace collector that counts the spans it gets.
type sink struct {
	coltracepb.UnimplementedTraceServiceServer
	spans atomic.Int64
}

func (s *sink) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans.Add(int64(len(ss.GetSpans())))
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Spans reach an OTLP/gRPC collector when the protocol says grpc.
func TestOTLPGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	var col sink
	coltracepb.RegisterTraceServiceServer(srv, &col)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	ctx := context.Background()
	tp, err := telemetry.NewTracerProvider(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"run::start", "provider::scripted::stream"} {
		_, span := tp.Tracer("t").Start(ctx, name)
		span.End()
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := col.spans.Load(); n != 2 {
		t.Fatalf("the collector got %d spans, want 2", n)
	}
}

// grpcClients counts the goroutines of gRPC client connections (each
// keeps callback serializers running until it is closed).
func grpcClients() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "grpcsync.(*CallbackSerializer).run")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// An exporter list that fails after an OTLP exporter was made shuts that
// exporter down: it kept its gRPC connection, and its goroutines, for the
// life of the process. Not parallel: it counts the process's goroutines.
func TestFailedEnvReleasesExporters(t *testing.T) {
	ctx := context.Background()
	before := grpcClients()
	_, err := telemetry.NewTracerProvider(ctx, env(map[string]string{
		"OTEL_TRACES_EXPORTER":        "console,otlp,bogus",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
	}), telemetry.WithConsole(io.Discard))
	if !errors.Is(err, telemetry.ErrInvalidEnv) {
		t.Fatalf("err %v, want %v", err, telemetry.ErrInvalidEnv)
	}
	deadline := time.Now().Add(2 * time.Second)
	for grpcClients() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d gRPC client goroutines left after the failed provider (%d before)", grpcClients(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
