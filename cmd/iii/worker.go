package main

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers"
)

func newWorkerCmd(g *globals) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "worker",
		Short: "Run or list harness worker modules",
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the worker modules this binary can run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, m := range workers.Modules() {
				fmt.Fprintf(cmd.OutOrStdout(), "%-20s %s\n", m.Name, m.Description)
			}
			return nil
		},
	})
	var sets []string
	var home string
	var noTraces bool
	var heapFloorMiB int
	localCalls := true
	run := &cobra.Command{
		Use:   "run NAME [NAME...]",
		Short: "Run worker modules against an existing NATS deployment (--nats) until Ctrl-C",
		Long: "Connects to --nats and runs the named worker modules there, the same code `iii up` runs in-process:\n" +
			"one binary, many shapes. Replicas of a worker share its load through NATS queue groups.",
		Example: `  iii worker run provider-scripted --nats nats://10.0.0.5:4222
  iii worker run orchestrator --set orchestrator.max_turns=20`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			if err := refuseClientTimeout(cmd, "iii worker run"); err != nil {
				return err
			}
			// An unknown name fails before anything is connected or
			// created (the spans stream, say).
			for _, name := range names {
				if _, err := workers.Global().Module(name); err != nil {
					return fmt.Errorf("%w (iii worker list names them)", err)
				}
			}
			logger, err := g.logger()
			if err != nil {
				return err
			}
			settings, err := parseSettings(sets)
			if err != nil {
				return err
			}
			stopFloor, err := startHeapFloor(heapFloorMiB, logger)
			if err != nil {
				return err
			}
			defer stopFloor()
			nc, err := nats.Connect(g.natsURL, nats.Name("iii-worker"), nats.MaxReconnects(-1))
			if err != nil {
				return connectError(g.natsURL, err)
			}
			defer nc.Close()
			ctx := cmd.Context()
			// Calls between the modules of this process skip the bus, as
			// between a node's own modules in `iii up`.
			e, eopts, flushSpans, err := tracedEngine(ctx, nc, logger, nil, "iii-worker", !noTraces, settings, engine.WithLocalCalls(localCalls))
			if err != nil {
				return err
			}
			env := workers.Env{Home: home, Logger: logger, Settings: settings}
			// One connection per module, as in `iii up`.
			mods := &moduleConns{opts: eopts, dial: func(name string) (*nats.Conn, error) {
				return nats.Connect(g.natsURL, nats.Name(name), nats.MaxReconnects(-1))
			}}
			if len(names) > 1 {
				env.Engine = mods.engine
			}
			running, err := workers.Global().Start(ctx, e, env, names...)
			if err != nil {
				_ = mods.close(ctx)
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "running %v on %s; Ctrl-C to stop\n", running.Names(), redactURL(g.natsURL))
			<-ctx.Done()
			// The orchestrator's drain and then the rest, as in `iii up`:
			// a fixed 15 s cut a longer drain_timeout short.
			sctx, cancel := context.WithTimeout(context.Background(), stopBudget(settings))
			defer cancel()
			werr := running.Close(sctx)
			if err := mods.close(sctx); err != nil && werr == nil {
				werr = err
			}
			if err := e.Close(sctx); err != nil && werr == nil {
				werr = err
			}
			_ = flushSpans(sctx)
			_ = nc.Drain()
			return werr
		},
	}
	run.Flags().StringArrayVar(&sets, "set", nil, "worker setting WORKER.KEY=VALUE (repeatable)")
	run.Flags().StringVar(&home, "home", defaultHome(), "data directory handed to the workers")
	run.Flags().BoolVar(&noTraces, "no-traces", false, "do not export these workers' spans to the trace store")
	addHeapFloorFlag(run.Flags(), &heapFloorMiB)
	run.Flags().BoolVar(&localCalls, "local-calls", true, "calls between the modules this process runs skip the bus, as in iii up (=false: over the bus)")
	cmd.AddCommand(run)
	return cmd
}
