package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/cluster"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/policy"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
	"github.com/iii-on-nats/iii/workers/traces"
)

// stack is one embedded single node with the turn loop on it: the server
// (file storage), an engine serving the scripted provider, the tool
// bench::noop and the orchestrator on one in-process connection, and a
// client engine on another, with the event watcher.
type stack struct {
	node    *cluster.Node
	dir     string
	rmDir   bool
	conns   []*nats.Conn
	engines []*engine.Engine // every engine, the client's last
	e       *engine.Engine   // the orchestrator's
	client  *engine.Engine   // run::start caller
	sw      *scripted.Worker
	orch    *orchestrator.Orchestrator
	policy  *policy.Worker
	tree    *sessiontree.Worker
	traces  *traces.Worker
	tp      *sdktrace.TracerProvider // with cfg.Traces: every engine's
	watch   *watcher
	warns   *warnCounter
}

func startStack(ctx context.Context, cfg Config) (_ *stack, err error) {
	s := &stack{dir: cfg.Dir}
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
	if s.node, err = cluster.Start(ctx, cluster.Config{Name: "bench", Port: -1, StoreDir: s.dir, Logger: cfg.Logger}); err != nil {
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
		boot, err := s.engine(cfg, "iii-bench-traces", logger)
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
	// The orchestrator, the provider and the tool share one connection, as
	// in `iii up`, unless cfg.ConnPerWorker.
	if s.e, err = s.engine(cfg, "iii-bench-node", logger); err != nil {
		return nil, err
	}
	providerEngine, toolEngine := s.e, s.e
	if cfg.ConnPerWorker {
		if providerEngine, err = s.engine(cfg, "iii-bench-provider", logger); err != nil {
			return nil, err
		}
		if toolEngine, err = s.engine(cfg, "iii-bench-tools", logger); err != nil {
			return nil, err
		}
	}
	var popts []scripted.Option
	if cfg.DeltaSize > 0 {
		popts = append(popts, scripted.WithDeltaSize(cfg.DeltaSize))
	}
	p, err := scripted.New(append(popts, scripted.WithDeltaInterval(0))...)
	if err != nil {
		return nil, err
	}
	s.sw = scripted.NewWorker(p)
	if err := s.sw.Start(ctx, providerEngine); err != nil {
		return nil, err
	}
	tools, err := toolEngine.Worker("bench", engine.WithDescription("bench tools"))
	if err != nil {
		return nil, err
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
		return nil, err
	}
	// The gate is on, as in production: a policy that allows the bench's
	// tools (every call pays policy::check_permissions and the two hook
	// rounds).
	s.policy = policy.NewWorker("", policy.WithFallback([]byte(BenchPolicy)))
	if err := s.policy.Start(ctx, toolEngine); err != nil {
		return nil, err
	}
	// The transcript: the session tree worker.
	s.tree = sessiontree.NewWorker(sessiontree.WithLogger(logger))
	if err := s.tree.Start(ctx, toolEngine); err != nil {
		return nil, err
	}
	s.orch = orchestrator.New(
		orchestrator.WithAckWait(cfg.AckWait),
		orchestrator.WithHostOptions(session.WithIdleTimeout(cfg.IdleTimeout), session.WithLogger(logger)),
	)
	if err := s.orch.Start(ctx, s.e); err != nil {
		return nil, err
	}
	if s.client, err = s.engine(cfg, "iii-bench-client", logger); err != nil {
		return nil, err
	}
	if s.watch, err = watch(s.client.Conn()); err != nil {
		return nil, err
	}
	return s, nil
}

// turn runs one turn on sid: run::start, then wait for its agent_end. It
// returns the latency from the first run::start call to the agent_end and
// the number of times run::start answered session_busy and was retried
// (the previous run's grain had not checkpointed yet).
func (s *stack) turn(ctx context.Context, sid string, timeout time.Duration) (time.Duration, int, error) {
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
		if err := s.client.Trigger(ctx, "run::start", rs, &res); err != nil {
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

// engine opens a connection to the node (in-process, or loopback TCP with
// cfg.TCP) and an engine over it.
func (s *stack) engine(cfg Config, name string, logger *slog.Logger) (*engine.Engine, error) {
	var (
		nc  *nats.Conn
		err error
	)
	if cfg.TCP {
		nc, err = nats.Connect(s.node.ClientURL(), nats.Name(name), nats.MaxReconnects(-1))
	} else {
		nc, err = s.node.Connect(nats.Name(name))
	}
	if err != nil {
		return nil, err
	}
	s.conns = append(s.conns, nc)
	opts := []engine.Option{engine.WithLogger(logger)}
	if s.tp != nil {
		opts = append(opts, engine.WithTracerProvider(s.tp))
	}
	e, err := engine.New(nc, opts...)
	if err != nil {
		return nil, err
	}
	s.engines = append(s.engines, e)
	return e, nil
}

func (s *stack) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if s.watch != nil {
		s.watch.close()
	}
	if s.orch != nil {
		_ = s.orch.Close(ctx)
	}
	if s.sw != nil {
		_ = s.sw.Close(ctx)
	}
	if s.tree != nil {
		_ = s.tree.Close(ctx)
	}
	if s.tp != nil {
		_ = s.tp.Shutdown(ctx)
	}
	if s.traces != nil {
		_ = s.traces.Close(ctx)
	}
	if s.policy != nil {
		_ = s.policy.Close(ctx)
	}
	for _, e := range s.engines {
		_ = e.Close(ctx)
	}
	for _, nc := range s.conns {
		nc.Close()
	}
	if s.node != nil {
		_ = s.node.Close(ctx)
	}
	if s.rmDir {
		_ = os.RemoveAll(s.dir)
	}
}
