package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/metric"

	"github.com/iii-on-nats/iii/cluster"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/telemetry"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/std"
)

// upConfig is everything `iii up` needs.
type upConfig struct {
	home        string
	listen      string
	httpAddr    string
	monitorPort int
	logger      *slog.Logger
	// settings are per-worker settings from --set WORKER.KEY=VALUE.
	settings map[string]map[string]string
	// modules are the worker modules to start (default std.Default).
	modules []string
	// noTraces keeps the node's spans out of the trace store.
	noTraces bool
	// heapFloorMiB is the garbage collector's floor of headroom
	// (engine/heapfloor; 0: off).
	heapFloorMiB int
	// maxPayload is the embedded server's largest message in bytes (0:
	// nats-server's 1 MiB).
	maxPayload int32
	// metricsAddr serves Prometheus metrics on /metrics ("" = off).
	metricsAddr string
	// topo is the node's place in a cluster, supercluster or hub.
	topo topology
	// sharedConn runs every worker module on the node's one connection
	// (default: one connection per module, [moduleConns]).
	sharedConn bool
	// busCalls sends every call between the node's own workers over the
	// bus (`--local-calls=false`); by default they skip it
	// (engine.WithLocalCalls, docs/OPERATIONS.md "Local calls").
	busCalls bool
}

// parseSettings turns WORKER.KEY=VALUE pairs into per-worker settings;
// WORKER must be a registered module.
func parseSettings(pairs []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, p := range pairs {
		kv, val, ok := strings.Cut(p, "=")
		worker, key, ok2 := strings.Cut(kv, ".")
		if !ok || !ok2 || worker == "" || key == "" {
			return nil, fmt.Errorf("--set %q: want WORKER.KEY=VALUE", p)
		}
		// Each module reads only its own settings: one for a module this
		// binary lacks (a misspelt name) would be ignored without a word.
		if _, err := workers.Global().Module(worker); err != nil {
			return nil, fmt.Errorf("--set %q: no worker module %q (`iii worker list` lists them)", p, worker)
		}
		if out[worker] == nil {
			out[worker] = map[string]string{}
		}
		out[worker][key] = val
	}
	return out, nil
}

// app is one running node: server, connection, engine and what runs on it.
type app struct {
	node *cluster.Node
	// url is what other processes dial: the embedded server's client URL,
	// or the --join URL.
	url string
	nc  *nats.Conn
	e   *engine.Engine
	// modules gives each worker module its own connection (nil with
	// --shared-conn).
	modules *moduleConns
	httpSrv *http.Server
	httpLn  net.Listener
	// metricsLn serves /metrics (nil when --metrics is off).
	metricsLn net.Listener
	// closers run in reverse order on shutdown.
	closers []func(context.Context) error
	// unlock releases the data directory once the server stopped (nil
	// with --join, which embeds no store).
	unlock func()
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("--listen %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("--listen %q: bad port", addr)
	}
	if port == 0 {
		port = -1
	}
	return host, port, nil
}

// startApp brings a whole node up; on error everything started is stopped.
func startApp(ctx context.Context, cfg upConfig) (_ *app, err error) {
	host, port, err := splitHostPort(cfg.listen)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.home, 0o700); err != nil {
		return nil, fmt.Errorf("III_HOME %s: %w", cfg.home, err)
	}
	routeOtelErrors(cfg.logger)
	a := &app{}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = a.close(sctx)
		}
	}()
	replicas := cfg.topo.replicas
	if cfg.topo.join != "" {
		// An existing NATS deployment: embed nothing.
		if a.nc, err = nats.Connect(cfg.topo.join, joinOptions(cfg.topo, "iii-node")...); err != nil {
			return nil, fmt.Errorf("--join: %w", connectError(cfg.topo.join, err))
		}
		a.url = cfg.topo.join
	} else {
		scfg, err := cfg.topo.serverConfig(cfg, host, port, filepath.Join(cfg.home, "jetstream"))
		if err != nil {
			return nil, err
		}
		// One server per store: a second one on the same files corrupts
		// the first one's streams.
		if a.unlock, err = lockHome(cfg.home); err != nil {
			return nil, err
		}
		if a.node, err = cluster.Start(ctx, scfg); err != nil {
			return nil, err
		}
		if a.nc, err = a.node.Connect(); err != nil {
			return nil, err
		}
		a.url = a.node.ClientURL()
		// A clustered node waits for the JetStream meta leader (the other
		// nodes): its workers create streams first thing.
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = a.node.WaitJetStream(wctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("JetStream not ready: %w", err)
		}
		if replicas == 0 {
			replicas = scfg.Replicas()
		}
	}
	if replicas == 0 {
		replicas = 1
	}
	if cfg.topo.clustered() {
		// The node's name in the membership is the one its server got
		// (the host name when --name is empty), not only --name.
		if a.node != nil {
			cfg.topo.name = a.node.Config().Name
		} else if cfg.topo.name == "" {
			cfg.topo.name, _ = os.Hostname()
		}
		cfg.settings = withClusterSettings(cfg.settings, cfg.topo)
	}
	engOpts := []engine.Option{engine.WithReplicas(replicas)}
	if cfg.topo.region != "" {
		// The node's workers create this region's copies of the
		// per-session stores: sessions "<region>.<name>" live there.
		engOpts = append(engOpts, engine.WithRegion(cfg.topo.region))
	}
	var meters metric.MeterProvider // the spans lost on their way to a collector are counted here too
	if cfg.metricsAddr != "" {
		mp, handler, err := telemetry.NewMeterProvider("iii")
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, mp.Shutdown)
		if a.metricsLn, err = net.Listen("tcp", cfg.metricsAddr); err != nil {
			return nil, fmt.Errorf("--metrics %s: %w", cfg.metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", handler)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
		go func() { _ = srv.Serve(a.metricsLn) }()
		a.closers = append(a.closers, srv.Shutdown)
		engOpts = append(engOpts, engine.WithMeterProvider(mp))
		meters = mp
	}
	engOpts = append(engOpts, engine.WithLocalCalls(!cfg.busCalls))
	var (
		flushSpans func(context.Context) error
		eopts      []engine.Option
	)
	a.e, eopts, flushSpans, err = tracedEngine(ctx, a.nc, cfg.logger, meters, "iii", !cfg.noTraces, cfg.settings, engOpts...)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, flushSpans, a.e.Close)
	if !cfg.sharedConn {
		a.modules = &moduleConns{opts: eopts, dial: func(name string) (*nats.Conn, error) {
			if a.node != nil {
				return a.node.Connect(nats.Name(name))
			}
			return nats.Connect(cfg.topo.join, joinOptions(cfg.topo, name)...)
		}}
		a.closers = append(a.closers, a.modules.close)
	}
	if _, err = a.e.ServeCatalog(); err != nil {
		return nil, err
	}
	if err = a.startServices(ctx, cfg); err != nil {
		return nil, err
	}
	return a, nil
}

// joinOptions are the options of a connection named name to the
// --join deployment.
func joinOptions(t topology, name string) []nats.Option {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1)}
	if t.creds != "" {
		opts = append(opts, nats.UserCredentials(t.creds))
	}
	return opts
}

// close stops everything in reverse start order, then the server.
func (a *app) close(ctx context.Context) error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	a.closers = nil
	if a.nc != nil && a.node == nil {
		_ = a.nc.Drain()
		return errors.Join(errs...)
	}
	if a.nc != nil {
		_ = a.nc.Drain()
	}
	if a.node != nil {
		if err := a.node.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if a.unlock != nil {
		a.unlock()
		a.unlock = nil
	}
	return errors.Join(errs...)
}

func newUpCmd(g *globals) *cobra.Command {
	cfg := upConfig{}
	var sets []string
	var configFile string
	localCalls := true
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a whole iii node in this process on an embedded NATS server",
		Long: "Starts an embedded nats-server with JetStream (data under --home), the engine's functions\n" +
			"(catalog, state, queues, topics, cron, HTTP gateway) and the worker stack. Any NATS client,\n" +
			"the nats CLI included, can then call every function. Ctrl-C or SIGTERM shuts down cleanly\n" +
			"(docs/OPERATIONS.md); a second one exits at once (code 130 or 143).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := g.logger()
			if err != nil {
				return err
			}
			cfg.logger = logger
			cfg.busCalls = !localCalls
			var fc cluster.NodeFile
			if configFile != "" {
				if fc, err = loadFileConfig(configFile); err != nil {
					return err
				}
				mergeFile(cmd, &cfg, fc, &sets)
			}
			if err := refuseIgnored(cmd, fc, cfg.topo); err != nil {
				return err
			}
			if cfg.settings, err = parseSettings(sets); err != nil {
				return err
			}
			stopFloor, err := startHeapFloor(cfg.heapFloorMiB, logger)
			if err != nil {
				return err
			}
			defer stopFloor()
			ctx := cmd.Context()
			a, err := startAppRetrying(ctx, cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			// A --join URL may carry a user's password or token: the
			// output goes to terminals and logs, so it is hidden, as the
			// client commands hide theirs.
			shown := redactURL(a.url)
			fmt.Fprintf(out, "iii is up\n  nats:  %s\n  data:  %s\n", shown, cfg.home)
			if a.node != nil && a.node.ClusterAddr() != "" {
				fmt.Fprintf(out, "  cluster: %s routes on %s%s\n", a.node.Config().Cluster.Name, a.node.ClusterAddr(), authNote(a.node.Config().Cluster.Listen, a.node.Config().Cluster.Authorization))
			}
			if a.node != nil && a.node.GatewayAddr() != "" {
				fmt.Fprintf(out, "  region: %s gateway on %s%s\n", cfg.topo.region, a.node.GatewayAddr(), authNote(a.node.Config().Gateway.Listen, a.node.Config().Gateway.Authorization))
			}
			if a.node != nil && a.node.LeafAddr() != "" {
				fmt.Fprintf(out, "  leafnodes: %s\n", a.node.LeafAddr())
			}
			if a.httpLn != nil {
				fmt.Fprintf(out, "  http:  http://%s\n", a.httpLn.Addr())
			}
			if a.metricsLn != nil {
				fmt.Fprintf(out, "  metrics: http://%s/metrics\n", a.metricsLn.Addr())
			}
			fmt.Fprintf(out, "connect:\n  iii functions --nats %s\n  nats --server %s req iii.fn.engine.functions.list '{}'\nCtrl-C to stop.\n",
				shown, shown)
			<-ctx.Done()
			fmt.Fprintln(out, "shutting down")
			sctx, cancel := context.WithTimeout(context.Background(), stopBudget(cfg.settings))
			defer cancel()
			return a.close(sctx)
		},
	}
	cmd.Flags().StringVar(&cfg.home, "home", defaultHome(), "data directory (env III_HOME, default ~/.iii)")
	cmd.Flags().StringVar(&cfg.listen, "listen", "127.0.0.1:4222", "NATS client listen address (port 0 = random)")
	cmd.Flags().StringVar(&cfg.httpAddr, "http", "127.0.0.1:3111", "HTTP trigger gateway listen address (empty = off)")
	cmd.Flags().IntVar(&cfg.monitorPort, "monitor-port", 0, "nats-server monitoring port (0 = off)")
	cmd.Flags().StringVar(&cfg.metricsAddr, "metrics", "", "serve Prometheus metrics on http://ADDR/metrics, e.g. 127.0.0.1:9464 (empty = off)")
	cmd.Flags().BoolVar(&localCalls, "local-calls", true, "calls between this node's own workers skip the bus (faster); =false sends them over it, where nats sub and $SRV.STATS see them")
	cmd.Flags().BoolVar(&cfg.sharedConn, "shared-conn", false, "run every worker module on the node's one NATS connection (default: one connection per module)")
	addHeapFloorFlag(cmd.Flags(), &cfg.heapFloorMiB)
	cmd.Flags().Int32Var(&cfg.maxPayload, "max-payload", 0, "the embedded server's largest message in bytes, at most 64 MiB (0: 1 MiB); it bounds requests, turn records and transcript entries (session.max_entry_size, 256 KiB by default, at most this less 1 KiB), so raise both for longer model answers")
	cmd.Flags().BoolVar(&cfg.noTraces, "no-traces", false, "do not export this node's spans to the trace store (III_SPANS, which iii traces reads)")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "worker setting WORKER.KEY=VALUE (repeatable), e.g. orchestrator.max_turns=20")
	cmd.Flags().StringSliceVar(&cfg.modules, "workers", std.Default, "worker modules to start, in order (iii worker list lists them); run others with iii worker run")
	cmd.Flags().StringVar(&configFile, "config", "", "YAML file with these settings (deploy/iii/ has examples); flags win over it")
	addTopologyFlags(cmd, &cfg.topo)
	return cmd
}

// authNote says how a route or gateway listener authenticates its peers,
// by user name only ("" for a one-node region's loopback self-route,
// which has no listen setting).
func authNote(listen string, a cluster.Auth) string {
	switch {
	case listen == "":
		return ""
	case a.User == "":
		return " (no authentication)"
	}
	return " (user " + a.User + ")"
}

// withClusterSettings tells the orchestrator to share its session grains
// with the other nodes (a proto.actor cluster over JetStream KV); an
// explicit --set orchestrator.KEY wins.
func withClusterSettings(settings map[string]map[string]string, t topology) map[string]map[string]string {
	if settings == nil {
		settings = map[string]map[string]string{}
	}
	o := settings["orchestrator"]
	if o == nil {
		o = map[string]string{}
		settings["orchestrator"] = o
	}
	def := func(k, v string) {
		if _, ok := o[k]; !ok && v != "" {
			o[k] = v
		}
	}
	def("cluster", t.grainCluster())
	def("node", t.name)
	def("actor_listen", t.actor.Listen)
	def("actor_advertise", t.actor.Advertise)
	return settings
}

// startAppRetrying starts the node, and starts it again (everything
// stopped in between) when it failed on something that may pass: a
// clustered node that comes up with its peers can meet streams that are
// still being created or recovered elsewhere. At most three attempts.
func startAppRetrying(ctx context.Context, cfg upConfig) (*app, error) {
	for attempt := 1; ; attempt++ {
		a, err := startApp(ctx, cfg)
		if err == nil {
			return a, nil
		}
		if attempt == 3 || !wire.From(err).Retryable || ctx.Err() != nil {
			return nil, err
		}
		cfg.logger.Warn("node start failed; starting again", "error", err, "attempt", attempt)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(attempt) * time.Second):
		}
	}
}

// stopGrace is how long a stopping node gives its workers and server
// after the orchestrator's drain: calls in flight finish, consumers stop.
const stopGrace = 15 * time.Second

// stopBudget bounds a graceful stop: the orchestrator's drain
// (orchestrator.drain_timeout) and then stopGrace for everything else. A
// fixed budget smaller than the drain left a loaded node no time to close
// its workers, and it exited with an error. The sum saturates: a
// drain_timeout near the largest duration wrapped it to a negative
// budget, a stop with no time at all.
func stopBudget(settings map[string]map[string]string) time.Duration {
	drain := orchestrator.DefaultDrainTimeout
	if d, err := time.ParseDuration(settings["orchestrator"][orchestrator.SettingDrainTimeout]); err == nil && d > 0 {
		drain = d
	}
	if drain > math.MaxInt64-stopGrace {
		return math.MaxInt64
	}
	return drain + stopGrace
}
