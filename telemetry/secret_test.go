package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/stdr"
	"go.opentelemetry.io/otel"

	"github.com/iii-on-nats/iii/telemetry"
)

// Distinctive credentials of the collector's headers.
const (
	hdrKey   = "hdrKEY-7f3e9a1c5b2d"
	hdrToken = "hdrTOKEN-4c8e2a6f0b1d"
)

// A collector that refuses the export and echoes the credentials it was
// sent: the exporter's error quotes its answer, and the handler must log
// neither credential, in any form the collector may echo.
func TestErrorHandlerScrubsCollectorEcho(t *testing.T) {
	echoes := []struct {
		name string
		echo func(r *http.Request) string
	}{
		{"headers", func(r *http.Request) string {
			return "bad key " + r.Header.Get("X-Api-Key") + " auth " + r.Header.Get("Authorization")
		}},
		{"bare token", func(r *http.Request) string {
			return "token " + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") + " revoked"
		}},
		{"after a long body", func(r *http.Request) string {
			return strings.Repeat("x", 150) + r.Header.Get("X-Api-Key") + r.Header.Get("Authorization")
		}},
	}
	for _, tc := range echoes {
		for _, headerVar := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
			t.Run(tc.name+" "+headerVar, func(t *testing.T) {
				var seen []string
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					seen = append(seen, r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
					w.WriteHeader(http.StatusUnauthorized)
					_, _ = w.Write([]byte(tc.echo(r)))
				}))
				defer srv.Close()
				// Read by the exporter itself, and by the handler.
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
				t.Setenv(headerVar, "x-api-key="+hdrKey+",Authorization=Bearer%20"+hdrToken)
				var logs bytes.Buffer
				otel.SetErrorHandler(telemetry.ErrorHandler(slog.New(slog.NewTextHandler(&logs, nil)), 0))
				defer otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Print(err) })) // otel's default

				ctx := context.Background()
				tp, err := telemetry.NewTracerProvider(ctx)
				if err != nil {
					t.Fatal(err)
				}
				_, span := tp.Tracer("t").Start(ctx, "run::start")
				span.End()
				_ = tp.Shutdown(ctx)

				if len(seen) < 2 || seen[0] != hdrKey || seen[1] != "Bearer "+hdrToken {
					t.Fatalf("the collector saw %q: the test proves nothing", seen)
				}
				out := logs.String()
				if !strings.Contains(out, "401") {
					t.Fatalf("the export failure was not logged:\n%s", out)
				}
				for _, s := range []string{hdrKey, hdrToken, hdrKey[:10], hdrToken[:10]} {
					if strings.Contains(out, s) {
						t.Errorf("%s leaked:\n%s", s, out)
					}
				}
			})
		}
	}
}

// What the handler does to a text, without a collector.
func TestErrorHandlerScrub(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS":        " x-honeycomb-team = " + hdrKey + " , flag=on",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "Authorization=Basic%20" + hdrToken,
	}
	tests := []struct {
		name string
		in   string
		gone []string // must not be logged
		kept []string // must be
	}{
		{"header value", "collector said: team " + hdrKey + " unknown", []string{hdrKey}, []string{"collector said", "unknown"}},
		{"decoded value", "got Basic " + hdrToken, []string{hdrToken}, []string{"got"}},
		{"encoded value", "got Basic%20" + hdrToken, []string{hdrToken}, []string{"got"}},
		{"short values stay", "flag on is fine", nil, []string{"flag on is fine"}},
		{"a bearer token nobody configured", "rpc error: code = Unauthenticated desc = Bearer zz-unconfigured-123456789", []string{"zz-unconfigured-123456789"}, []string{"Unauthenticated"}},
		{"an sk- key", "invalid key sk-abcdefghijklmnopqrstuvwxyz012345", []string{"sk-abcdefghijklmnopqrstuvwxyz012345"}, []string{"invalid key"}},
		{"scrubbed before the cut", strings.Repeat("x", 292) + hdrKey, []string{hdrKey[:6]}, []string{"xxx[redacte…"}},
		{"nothing secret", "traces export: context deadline exceeded", nil, []string{"traces export: context deadline exceeded"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			h := telemetry.ErrorHandler(slog.New(slog.NewTextHandler(&logs, nil)), 0, telemetry.WithGetenv(func(k string) string { return env[k] }))
			h.Handle(errors.New(tt.in))
			out := logs.String()
			for _, s := range tt.gone {
				if strings.Contains(out, s) {
					t.Errorf("%q logged:\n%s", s, out)
				}
			}
			for _, s := range tt.kept {
				if !strings.Contains(out, s) {
					t.Errorf("%q not logged:\n%s", s, out)
				}
			}
		})
	}
}

// Header variables the exporters would not parse whole are refused before
// any exporter sees them, by position: the exporters print the entry they
// skip to OpenTelemetry's global logger, and the entry is a credential.
func TestMalformedHeadersRefused(t *testing.T) {
	var global strings.Builder
	otel.SetLogger(funcr.New(func(prefix, args string) { global.WriteString(prefix + args + "\n") }, funcr.Options{}))
	defer otel.SetLogger(stdr.New(log.New(os.Stderr, "", log.LstdFlags|log.Lshortfile))) // otel's default
	tests := []struct {
		name, v string
		err     error
	}{
		{"colon instead of =", "Authorization: Bearer " + hdrToken, telemetry.ErrInvalidEnv},
		{"a comma inside a value", "Authorization=Bearer " + hdrToken + ",tail" + hdrKey, telemetry.ErrInvalidEnv},
		{"bad name", "Author ization: Bearer " + hdrToken + "=x", telemetry.ErrInvalidEnv},
		{"bad escape", "x-api-key=" + hdrKey + "%zz", telemetry.ErrInvalidEnv},
		{"well formed", "x-api-key=" + hdrKey + ",Authorization=Bearer%20" + hdrToken + ",", nil},
	}
	for _, tt := range tests {
		for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
			t.Run(tt.name+" "+name, func(t *testing.T) {
				global.Reset()
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
				t.Setenv(name, tt.v)
				ctx := context.Background()
				tp, err := telemetry.NewTracerProvider(ctx)
				if !errors.Is(err, tt.err) {
					t.Fatalf("err %v, want %v", err, tt.err)
				}
				if tp != nil {
					sctx, cancel := context.WithTimeout(ctx, time.Second)
					defer cancel()
					_ = tp.Shutdown(sctx)
				}
				if err != nil && !strings.Contains(err.Error(), name) {
					t.Errorf("the error does not name %s: %v", name, err)
				}
				for _, s := range []string{hdrKey, hdrToken} {
					if err != nil && strings.Contains(err.Error(), s) {
						t.Errorf("the error quotes %s: %v", s, err)
					}
					if strings.Contains(global.String(), s) {
						t.Errorf("OpenTelemetry's logger got %s:\n%s", s, global.String())
					}
				}
			})
		}
	}
}

// An endpoint the exporters would not send to is refused at start, naming
// the variable only. Before, "127.0.0.1:4318" (no scheme: not a URL) was
// printed to OpenTelemetry's global logger and the spans, with their
// headers, went to https://localhost:4318; "collector:4318" over HTTP had
// no host and every export failed.
func TestBadEndpointRefused(t *testing.T) {
	var global strings.Builder
	otel.SetLogger(funcr.New(func(prefix, args string) { global.WriteString(prefix + args + "\n") }, funcr.Options{}))
	defer otel.SetLogger(stdr.New(log.New(os.Stderr, "", log.LstdFlags|log.Lshortfile))) // otel's default
	const password = "s3cr3t-passw0rd"
	tests := []struct {
		name, v, proto string
		err            error
	}{
		{"host:port without a scheme", "127.0.0.1:4318", "", telemetry.ErrInvalidEnv},
		{"name:port without a scheme", "collector:4318", "http/protobuf", telemetry.ErrInvalidEnv},
		{"not a URL, with a password", "http://iii:" + password + "@127.0.0.1:1 x", "", telemetry.ErrInvalidEnv},
		{"no host", "http://", "", telemetry.ErrInvalidEnv},
		{"http URL", " http://127.0.0.1:1 ", "", nil},
		{"grpc: not a URL", "127.0.0.1:4317", "grpc", telemetry.ErrInvalidEnv},
		{"grpc: no host", "https:///v1", "grpc", telemetry.ErrInvalidEnv},
		{"grpc: a target without a scheme", "collector:4317", "grpc", nil},
		{"grpc: http URL", "http://127.0.0.1:1", "grpc", nil},
	}
	for _, tt := range tests {
		for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
			t.Run(tt.name+" "+name, func(t *testing.T) {
				global.Reset()
				t.Setenv(name, tt.v)
				t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tt.proto)
				ctx := context.Background()
				tp, err := telemetry.NewTracerProvider(ctx)
				if !errors.Is(err, tt.err) {
					t.Fatalf("err %v, want %v", err, tt.err)
				}
				if tp != nil {
					sctx, cancel := context.WithTimeout(ctx, time.Second)
					defer cancel()
					_ = tp.Shutdown(sctx)
				}
				if err != nil && (!strings.Contains(err.Error(), name) || strings.Contains(err.Error(), password)) {
					t.Errorf("the error does not name %s, or quotes the value: %v", name, err)
				}
				if strings.Contains(global.String(), "parse url") {
					t.Errorf("OpenTelemetry's logger got the endpoint:\n%s", global.String())
				}
			})
		}
	}
}
