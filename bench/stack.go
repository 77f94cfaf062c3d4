package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/cluster"
	"github.com/iii-on-nats/iii/cluster/freeport"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/policy"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
	"github.com/iii-on-nats/iii/workers/traces"
)

// stack is the turn loop on an embedded node, or on Config.Nodes nodes of
// one NATS cluster. On every node: the server (file storage), an engine
// serving the scripted provider, the tool bench::noop, the policy worker,
// the session tree worker and the orchestrator on one in-process
// connection (a grain-cluster member when there are several nodes), and a
// client engine on another. The event watcher is on node 1's client.
type stack struct {
	nodes    []*cluster.Node // node 1 first
	node     *cluster.Node   // nodes[0]
	dir      string
	rmDir    bool
	replicas int
	conns    []*nats.Conn
	engines  []*engine.Engine // every engine, the clients' last
	members  []*member        // one per node
	e        *engine.Engine   // node 1's orchestrator engine
	orch     *orchestrator.Orchestrator
	client   *engine.Engine   // node 1's run::start caller
	clients  []*engine.Engine // one per node: session i calls clients[i % len]
	traces   *traces.Worker
	tp       *sdktrace.TracerProvider // with cfg.Traces: every engine's
	watch    *watcher
	warns    *warnCounter
}

// member is the worker set of one node.
type member struct {
	e      *engine.Engine // the orchestrator's
	sw     *scripted.Worker
	orch   *orchestrator.Orchestrator
	policy *policy.Worker
	tree   *sessiontree.Worker
}

// grainCluster is the proto.actor cluster name of the bench's session
// grains on several nodes (and the NATS cluster's name).
const grainCluster = "bench"

func startStack(ctx context.Context, cfg Config) (_ *stack, err error) {
	s := &stack{dir: cfg.Dir, replicas: cfg.replicas()}
	defer func() {
		if err != nil {
			s.close(context.Background())
		}
	}()
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "iii-bench-"); err != nil {
			return nil, err
		}
		s.rmDir = true
	}
	if cfg.Nodes <= 1 {
		s.node, err = cluster.Start(ctx, cluster.Config{Name: "bench", Port: -1, StoreDir: s.dir, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		s.nodes = []*cluster.Node{s.node}
	} else if err := s.startCluster(ctx, cfg); err != nil {
		return nil, err
	}
	var next slog.Handler
	if cfg.Logger != nil {
		next = cfg.Logger.Handler()
	}
	s.warns = newWarnCounter(next)
	logger := slog.New(s.warns)
	if cfg.Traces {
		// Tracing as `iii up` does it: every engine exports its spans to
		// the trace store's stream, and the store follows it.
		boot, err := s.engine(cfg, s.node, "iii-bench-traces", logger)
		if err != nil {
			return nil, err
		}
		x, err := traces.NewExporter(ctx, boot)
		if err != nil {
			return nil, err
		}
		s.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(traces.NewSpanProcessor(x)))
		s.traces = traces.NewWorker()
		if err := s.traces.Start(ctx, boot); err != nil {
			return nil, err
		}
	}
	// One member after the other: proto.actor's remote start is not safe
	// to run concurrently in one process (docs/UPSTREAM.md).
	for i, n := range s.nodes {
		m := &member{}
		s.members = append(s.members, m) // close stops what started
		if err := s.startMember(ctx, cfg, m, n, i, logger); err != nil {
			return nil, fmt.Errorf("node %d: %w", i+1, err)
		}
	}
	s.e, s.orch = s.members[0].e, s.members[0].orch
	for i, n := range s.nodes {
		name := "iii-bench-client"
		if len(s.nodes) > 1 {
			name += "-n" + strconv.Itoa(i+1)
		}
		ccfg := cfg
		ccfg.BusCalls = true // a client is another process
		c, err := s.engine(ccfg, n, name, logger)
		if err != nil {
			return nil, err
		}
		s.clients = append(s.clients, c)
	}
	s.client = s.clients[0]
	if s.watch, err = watch(s.client.Conn()); err != nil {
		return nil, err
	}
	return s, nil
}

// startCluster starts cfg.Nodes servers that form one NATS cluster on
// loopback (every node lists every route, itself included; the route
// ports are picked first, as a JetStream cluster cannot start on random
// route ports) and waits until JetStream answers on every node.
func (s *stack) startCluster(ctx context.Context, cfg Config) error {
	routes := make([]string, cfg.Nodes)
	listen := make([]string, cfg.Nodes)
	ports, err := freeport.Loopback(cfg.Nodes)
	if err != nil {
		return err
	}
	for i, port := range ports {
		listen[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		routes[i] = "nats-route://" + listen[i]
	}
	for i := range cfg.Nodes {
		name := "n" + strconv.Itoa(i+1)
		n, err := cluster.Start(ctx, cluster.Config{
			Name: name, Port: -1, StoreDir: filepath.Join(s.dir, name), Logger: cfg.Logger,
			Cluster: cluster.ClusterConfig{Name: grainCluster, Listen: listen[i], Routes: routes},
		})
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		s.nodes = append(s.nodes, n)
	}
	s.node = s.nodes[0]
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	errs := make([]error, len(s.nodes))
	var wg sync.WaitGroup
	for i, n := range s.nodes {
		wg.Go(func() { errs[i] = n.WaitJetStream(wctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startMember starts the worker set on node n (index i): the scripted
// provider, the tool, the policy and session tree workers and the
// orchestrator — on several nodes a member of the grain cluster.
func (s *stack) startMember(ctx context.Context, cfg Config, m *member, n *cluster.Node, i int, logger *slog.Logger) (err error) {
	suffix := ""
	if len(s.nodes) > 1 {
		suffix = "-n" + strconv.Itoa(i+1)
	}
	// Each worker on its own connection, as in `iii up`, unless
	// cfg.SharedConn.
	if m.e, err = s.engine(cfg, n, "iii-bench-node"+suffix, logger); err != nil {
		return err
	}
	own := func(name string) (*engine.Engine, error) {
		if cfg.SharedConn {
			return m.e, nil
		}
		return s.engine(cfg, n, "iii-bench-"+name+suffix, logger)
	}
	providerEngine, err := own("provider")
	if err != nil {
		return err
	}
	toolEngine, err := own("tools")
	if err != nil {
		return err
	}
	policyEngine, err := own("policy")
	if err != nil {
		return err
	}
	treeEngine, err := own("session")
	if err != nil {
		return err
	}
	var popts []scripted.Option
	if cfg.DeltaSize > 0 {
		popts = append(popts, scripted.WithDeltaSize(cfg.DeltaSize))
	}
	p, err := scripted.New(append(popts, scripted.WithDeltaInterval(0))...)
	if err != nil {
		return err
	}
	m.sw = scripted.NewWorker(p)
	if err := m.sw.Start(ctx, providerEngine); err != nil {
		return err
	}
	tools, err := toolEngine.Worker("bench", engine.WithDescription("bench tools"))
	if err != nil {
		return err
	}
	noop := engine.Function{
		ID:          NoopFunction,
		Description: "Does nothing; answers {\"ok\": true}.",
		Idempotent:  true,
		Handler: func(context.Context, *engine.Request) (any, error) {
			return map[string]bool{"ok": true}, nil
		},
	}
	if err := tools.Register(noop); err != nil {
		return err
	}
	// The gate is on, as in production: a policy that allows the bench's
	// tools (every call pays policy::check_permissions and the two hook
	// rounds).
	m.policy = policy.NewWorker("", policy.WithFallback([]byte(BenchPolicy)))
	if err := m.policy.Start(ctx, policyEngine); err != nil {
		return err
	}
	// The transcript: the session tree worker.
	m.tree = sessiontree.NewWorker(sessiontree.WithLogger(logger))
	if err := m.tree.Start(ctx, treeEngine); err != nil {
		return err
	}
	m.orch = orchestrator.New(
		orchestrator.WithAckWait(cfg.AckWait),
		orchestrator.WithTranscriptContinuation(!cfg.NoContinuation),
		orchestrator.WithHostOptions(session.WithIdleTimeout(cfg.IdleTimeout), session.WithLogger(logger)),
	)
	if len(s.nodes) > 1 {
		// One grain cluster over the nodes: a session has one activation
		// cluster-wide, wherever its steps are consumed.
		env := workers.Env{Logger: logger, Settings: map[string]map[string]string{"orchestrator": {
			orchestrator.SettingCluster: grainCluster, orchestrator.SettingNode: "n" + strconv.Itoa(i+1)}}}
		if err := m.orch.Provision(ctx, env); err != nil {
			return err
		}
	}
	return m.orch.Start(ctx, m.e)
}

// turn runs one turn on sid through client c: run::start, then wait for
// its agent_end. It returns the latency from the first run::start call to the agent_end and
// the number of times run::start answered session_busy and was retried
// (the previous run's grain had not checkpointed yet).
func (s *stack) turn(ctx context.Context, c *engine.Engine, sid string, timeout time.Duration) (time.Duration, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ends := s.watch.expect(sid)
	start := time.Now()
	rs := agent.RunStart{
		SessionID: sid,
		Provider:  "scripted",
		Model:     scripted.EchoModel,
		Messages:  []agent.Message{agent.UserText(Prompt, start.UnixMilli())},
		// The run offers its one tool, as a real run offers its tools.
		Tools: []string{NoopFunction},
	}
	retries := 0
	for backoff := 100 * time.Microsecond; ; backoff = min(2*backoff, 20*time.Millisecond) {
		var res orchestrator.RunStartResult
		if err := c.Trigger(ctx, "run::start", rs, &res); err != nil {
			return 0, retries, fmt.Errorf("%w: run::start %s: %w", ErrTurnFailed, sid, err)
		}
		if res.Started {
			break
		}
		if res.Reason != "session_busy" {
			return 0, retries, fmt.Errorf("%w: run::start %s not started: %s", ErrTurnFailed, sid, res.Reason)
		}
		retries++
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return 0, retries, fmt.Errorf("%w: run::start %s: session_busy for %v", ErrTurnFailed, sid, timeout)
		}
	}
	select {
	case e := <-ends:
		if e.reason != agent.StopEnd {
			return e.at.Sub(start), retries, fmt.Errorf("%w: %s ended with stop_reason %q", ErrTurnFailed, sid, e.reason)
		}
		return e.at.Sub(start), retries, nil
	case <-ctx.Done():
		return 0, retries, fmt.Errorf("%w: %s: no agent_end within %v", ErrTurnFailed, sid, timeout)
	}
}

// clientFor is the client of session i: the nodes' clients in turn.
func (s *stack) clientFor(i int) *engine.Engine { return s.clients[i%len(s.clients)] }

// servers are the nodes' servers, node 1's first.
func (s *stack) servers() []*server.Server {
	out := make([]*server.Server, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = n.Server()
	}
	return out
}

// activeGrains is the number of active session grains on all nodes.
func (s *stack) activeGrains() int {
	n := 0
	for _, m := range s.members {
		if m.orch != nil && m.orch.Host() != nil {
			n += m.orch.Host().Active()
		}
	}
	return n
}

// engine opens a connection to node n (in-process, or loopback TCP with
// cfg.TCP) and an engine over it, creating streams and buckets with the
// stack's replicas.
func (s *stack) engine(cfg Config, n *cluster.Node, name string, logger *slog.Logger) (*engine.Engine, error) {
	var (
		nc  *nats.Conn
		err error
	)
	if cfg.TCP {
		nc, err = nats.Connect(n.ClientURL(), nats.Name(name), nats.MaxReconnects(-1))
	} else {
		nc, err = n.Connect(nats.Name(name))
	}
	if err != nil {
		return nil, err
	}
	s.conns = append(s.conns, nc)
	opts := []engine.Option{engine.WithLogger(logger), engine.WithReplicas(s.replicas)}
	if s.tp != nil {
		opts = append(opts, engine.WithTracerProvider(s.tp))
	}
	if !cfg.BusCalls {
		opts = append(opts, engine.WithLocalCalls(true))
	}
	e, err := engine.New(nc, opts...)
	if err != nil {
		return nil, err
	}
	s.engines = append(s.engines, e)
	return e, nil
}

func (s *stack) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+5*time.Second*time.Duration(len(s.members)))
	defer cancel()
	if s.watch != nil {
		s.watch.close()
	}
	// The orchestrators one after the other: on several nodes each hands
	// its grains off and leaves the grain cluster (proto.actor's shutdown
	// takes 2 s), and two members of one process shutting down at once can
	// panic inside proto.actor's remote (a send on an endpoint reader's
	// closed channel).
	for _, m := range s.members {
		if m.orch != nil {
			_ = m.orch.Close(ctx)
		}
	}
	for _, m := range s.members {
		if m.sw != nil {
			_ = m.sw.Close(ctx)
		}
		if m.tree != nil {
			_ = m.tree.Close(ctx)
		}
	}
	if s.tp != nil {
		_ = s.tp.Shutdown(ctx)
	}
	if s.traces != nil {
		_ = s.traces.Close(ctx)
	}
	for _, m := range s.members {
		if m.policy != nil {
			_ = m.policy.Close(ctx)
		}
	}
	for _, e := range s.engines {
		_ = e.Close(ctx)
	}
	for _, nc := range s.conns {
		nc.Close()
	}
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		wg.Go(func() { _ = n.Close(ctx) })
	}
	wg.Wait()
	if s.rmDir {
		_ = os.RemoveAll(s.dir)
	}
}
