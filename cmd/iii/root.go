package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/telemetry"
)

// globals are the flags every client command shares.
type globals struct {
	natsURL  string
	timeout  time.Duration
	logLevel string
}

func defaultNATSURL() string {
	for _, k := range []string{"III_NATS_URL", "NATS_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "nats://127.0.0.1:4222"
}

func defaultHome() string {
	if v := os.Getenv("III_HOME"); v != "" {
		return v
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".iii"
	}
	return filepath.Join(home, ".iii")
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "iii",
		Short:         "iii on NATS: a durable, distributed agent harness",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.natsURL, "nats", defaultNATSURL(), "NATS server URL (env III_NATS_URL or NATS_URL)")
	root.PersistentFlags().DurationVar(&g.timeout, "timeout", 30*time.Second, "timeout of one call")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(newUpCmd(g), newChatCmd(g), newTriggerCmd(g), newFunctionsCmd(g), newWorkersCmd(g), newWorkerCmd(g), newBenchCmd(g), newTracesCmd(g), newClusterCmd(g), newRegionCmd(g))
	return root
}

// group makes cmd, a command that only holds subcommands, refuse any
// argument: cobra runs such a command's help for `iii bench turn` (a
// mistyped subcommand) and exits 0, so a script carried on as if it ran.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return cmd
}

func (g *globals) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToLower(g.logLevel))); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", g.logLevel, err)
	}
	// Records logged with a span's context carry trace_id and span_id.
	logger := slog.New(telemetry.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})))
	routeOtelErrors(logger)
	return logger, nil
}

// routeOtelErrors sends OpenTelemetry's own errors (a malformed
// traceparent or baggage header from a client, an exporter that fails)
// to logger, at most one record every ten seconds, instead of the
// standard library's log.
func routeOtelErrors(logger *slog.Logger) {
	otel.SetErrorHandler(telemetry.ErrorHandler(logger, 10*time.Second))
}

// connect opens a client connection and an engine over it.
func (g *globals) connect() (*engine.Engine, func(), error) {
	nc, err := nats.Connect(g.natsURL, nats.Name("iii-cli"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, connectError(g.natsURL, err)
	}
	e, err := engine.New(nc, engine.WithDefaultTimeout(g.timeout), engine.WithCodec(wire.JSON))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return e, nc.Close, nil
}

// call connects, calls function id with req within --timeout and decodes
// the reply into resp.
func (g *globals) call(ctx context.Context, id string, req, resp any) error {
	e, done, err := g.connect()
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return e.Trigger(ctx, id, req, resp)
}
