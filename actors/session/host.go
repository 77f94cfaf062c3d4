package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/engine/gopool"
)

// Option configures a [Host].
type Option func(*options) error

type options struct {
	logger      *slog.Logger
	idle        time.Duration
	callTimeout time.Duration
	parallel    int
	heartbeat   time.Duration
	now         func() time.Time
	// trace puts a run's trace context (turn.Record.Trace) into ctx.
	trace func(ctx context.Context, carrier map[string]string) context.Context
	// cluster, when set, makes the host a cluster member (WithCluster).
	cluster *Cluster
}

// ErrInvalidOption wraps option errors.
var ErrInvalidOption = errors.New("session: invalid option")

// ErrDraining is returned for a wake or abort that reaches a host being
// drained: the step is redelivered to another member (or after restart).
var ErrDraining = errors.New("session: host is draining")

// WithTraceContext sets how a run's stored trace context
// (turn.Record.Trace) becomes the parent of everything the grain does for
// the run: extract reads the carrier into ctx (an OpenTelemetry
// propagator's Extract). Without it the grain's calls start no trace.
func WithTraceContext(extract func(ctx context.Context, carrier map[string]string) context.Context) Option {
	return func(o *options) error { o.trace = extract; return nil }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error { o.logger = l; return nil }
}

// WithIdleTimeout sets how long a grain with nothing to do stays active
// (default 2 minutes).
func WithIdleTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: idle timeout %v", ErrInvalidOption, d)
		}
		o.idle = d
		return nil
	}
}

// WithParallelCalls bounds the function calls of one batch running at once
// (default 8).
func WithParallelCalls(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: parallel calls %d", ErrInvalidOption, n)
		}
		o.parallel = n
		return nil
	}
}

// WithHeartbeat sets how often a grain that holds un-acked step messages
// marks them in progress (default 10 s; keep it well under the consumer's
// ack wait).
func WithHeartbeat(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: heartbeat %v", ErrInvalidOption, d)
		}
		o.heartbeat = d
		return nil
	}
}

// WithClock sets the clock for record timestamps (tests).
func WithClock(now func() time.Time) Option {
	return func(o *options) error { o.now = now; return nil }
}

// Host activates one grain per session in its own proto.actor system, or,
// with [WithCluster], hosts its share of a cluster's session grains.
type Host struct {
	system *actor.ActorSystem
	ports  Ports
	opts   options

	// cluster is the proto.actor cluster (nil on a single node).
	cluster    *cluster.Cluster
	forwarders chan struct{}
	fwg        sync.WaitGroup

	// life is the parent of every grain's context; Close cancels it
	// first, so a grain blocked on a store or a call returns at once
	// instead of holding the stop until its own timeout.
	life context.Context
	end  context.CancelFunc

	// pool runs the grains' mailboxes (dispatcher) and the calls they
	// start on reused goroutines (package gopool).
	pool       *gopool.Pool
	dispatcher actor.Dispatcher

	mu       sync.Mutex
	grains   map[string]*activation
	closed   bool
	draining bool
}

// activation is a live grain's PID and the number of messages the host has
// sent it, so passivation never drops a message already in the mailbox.
type activation struct {
	pid  *actor.PID
	sent uint64
}

// NewHost starts the actor system.
func NewHost(ports Ports, opts ...Option) (*Host, error) {
	if err := ports.valid(); err != nil {
		return nil, err
	}
	o := options{
		logger:      slog.New(slog.DiscardHandler),
		idle:        2 * time.Minute,
		callTimeout: 5 * time.Minute,
		parallel:    8,
		heartbeat:   10 * time.Second,
		now:         time.Now,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	h := &Host{system: sys, ports: ports, opts: o, grains: map[string]*activation{}, pool: gopool.New()}
	h.dispatcher = poolDispatcher{pool: h.pool}
	h.life, h.end = context.WithCancel(context.Background())
	if o.cluster != nil {
		if err := h.startCluster(); err != nil {
			h.end()
			sys.Shutdown()
			return nil, err
		}
	}
	return h, nil
}

// Wake is a step message that woke a session: the grain acks it once the
// session is checkpointed where it parks or finishes, and marks it in
// progress while it works.
type Wake struct {
	Step uint64
	// Reply is the step message's reply subject, where JetStream takes
	// its acknowledgements; a clustered host needs it to let a grain on
	// another member ack the step.
	Reply      string
	Ack        func() error
	InProgress func() error
	// Nak asks for redelivery after delay (the grain gave the wake up).
	Nak func(delay time.Duration) error
}

type wakeMsg struct {
	seq uint64
	Wake
	// written, when set, is the record the waker has just written, at rev,
	// over revision prev.
	written   *turn.Record
	rev, prev uint64
}

func nopAck() error { return nil }

// settledQuery asks a grain for its record if it sits at the end of a run.
type settledQuery struct{}

// settledAnswer is a grain's answer to settledQuery.
type settledAnswer struct {
	rec turn.Record
	rev uint64
	ok  bool
}

// settledTimeout bounds asking a grain for its settled record: a grain
// that is slow to answer is busy, and the caller reads KV instead.
const settledTimeout = 50 * time.Millisecond

// Settled returns the record of sid's grain when that grain is active on
// this host and idle at the end of a run (its last record written, the
// outbox delivered), and the record's revision: what a reader of KV would
// get, unless another process wrote the record since — a caller that
// writes at that revision then loses its compare-and-set and must read
// KV. The record is retired ([turn.Retired]): it says how the run ended,
// not what it said. ok is false otherwise; Settled never activates a
// grain, and a clustered host always answers false.
func (h *Host) Settled(sid string) (rec turn.Record, rev uint64, ok bool) {
	if h.cluster != nil {
		return turn.Record{}, 0, false
	}
	h.mu.Lock()
	a, found := h.grains[sid]
	if !found || h.closed {
		h.mu.Unlock()
		return turn.Record{}, 0, false
	}
	fut := h.system.Root.RequestFuture(a.pid, &settledQuery{}, settledTimeout)
	h.mu.Unlock()
	res, err := fut.Result()
	ans, isAns := res.(*settledAnswer)
	if err != nil || !isAns || !ans.ok {
		return turn.Record{}, 0, false
	}
	return ans.rec, ans.rev, true
}

// Written hands sid's grain the record its caller has just written at
// rev over revision prev (run::start seeding a run, with a
// compare-and-set on prev), so a grain on this host starts the run
// at once: it neither waits for the step message nor reads the record
// back. The step message still follows and is acked as a duplicate; it
// is what survives a crash of this process. A stale record is harmless:
// the grain's first write loses its compare-and-set. A clustered host
// does nothing and reports false: the grain may live on another member.
func (h *Host) Written(sid string, rec turn.Record, rev, prev uint64) bool {
	if h.cluster != nil {
		return false
	}
	err := h.send(sid, func(seq uint64) any {
		return &wakeMsg{seq: seq, Wake: Wake{Step: rec.Step, Ack: nopAck, InProgress: nopAck}, written: &rec, rev: rev, prev: prev}
	})
	return err == nil
}

type abortMsg struct {
	seq    uint64
	reason string
}

// AbortResult is what an abort found.
type AbortResult struct {
	Aborted bool
	State   string
}

// activate returns sid's live activation, spawning its grain when there is
// none. h.mu must be held.
func (h *Host) activate(sid string) (*activation, error) {
	if h.closed {
		return nil, errors.New("session: host closed")
	}
	if a, ok := h.grains[sid]; ok {
		return a, nil
	}
	if h.draining {
		return nil, ErrDraining
	}
	g := &grain{host: h, sid: sid}
	pid, err := h.system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return g }, actor.WithDispatcher(h.dispatcher)), "session-"+sid)
	if err != nil {
		return nil, fmt.Errorf("session: activate %s: %w", sid, err)
	}
	a := &activation{pid: pid}
	h.grains[sid] = a
	return a, nil
}

// send delivers msg (built with the activation's next sequence number) to
// sid's grain, activating it when needed.
func (h *Host) send(sid string, build func(seq uint64) any) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, err := h.activate(sid)
	if err != nil {
		return err
	}
	a.sent++
	h.system.Root.Send(a.pid, build(a.sent))
	return nil
}

// request is send with a reply, bounded by ctx (30 s without a deadline).
//
// A grain that stops on its own (it halts: another activation wrote; or
// it hands the session off in a drain) drops what waits in its mailbox:
// a request it never read is sent again to a fresh activation, within
// ctx's deadline (30 s without one). Before, it waited out the deadline
// and failed.
func (h *Host) request(ctx context.Context, sid string, build func(seq uint64) any) (any, error) {
	deadline := time.Now().Add(30 * time.Second)
	if dl, ok := ctx.Deadline(); ok {
		deadline = dl
	}
	for {
		h.mu.Lock()
		a, err := h.activate(sid)
		if err != nil {
			h.mu.Unlock()
			// A grain that stopped on its own may keep its name a moment
			// after it left h.grains.
			if errors.Is(err, actor.ErrNameExists) && time.Until(deadline) > requestWatch {
				time.Sleep(requestWatch)
				continue
			}
			return nil, err
		}
		a.sent++
		pid := a.pid
		fut := h.system.Root.RequestFuture(pid, build(a.sent), time.Until(deadline))
		h.mu.Unlock()
		res, err, unread := h.await(fut, sid, pid)
		if !unread || time.Until(deadline) <= requestWatch {
			return res, err
		}
	}
}

// requestWatch is how often a request looks whether its grain stopped;
// requestGrace is how long a stopped grain's reply may still take.
const (
	requestWatch = 100 * time.Millisecond
	requestGrace = time.Second
)

// await waits for fut, the answer of sid's activation pid. unread says
// that pid stopped without answering: its mailbox, and the request in it,
// are gone.
func (h *Host) await(fut *actor.Future, sid string, pid *actor.PID) (res any, err error, unread bool) {
	type answer struct {
		res any
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := fut.Result()
		ch <- answer{res, err}
	}()
	tick := time.NewTicker(requestWatch)
	defer tick.Stop()
	for {
		select {
		case a := <-ch:
			return a.res, a.err, false
		case <-tick.C:
		}
		h.mu.Lock()
		cur, ok := h.grains[sid]
		stopped := !ok || cur.pid != pid
		h.mu.Unlock()
		if !stopped {
			continue
		}
		select {
		case a := <-ch:
			return a.res, a.err, false
		case <-time.After(requestGrace):
			return nil, nil, true
		}
	}
}

// Wake wakes sid's grain with a step message. A clustered host hands the
// wake to the grain's member asynchronously (and naks the step when no
// grain takes it).
func (h *Host) Wake(sid string, w Wake) error {
	if h.cluster != nil {
		return h.clusterWake(sid, w)
	}
	return h.send(sid, func(seq uint64) any { return &wakeMsg{seq: seq, Wake: w} })
}

// Abort aborts sid's running turn, whatever its state.
func (h *Host) Abort(ctx context.Context, sid, reason string) (AbortResult, error) {
	if h.cluster != nil {
		a, err := h.clusterRequest(ctx, sid, envelope{Op: opAbort, Reason: reason})
		if err != nil {
			return AbortResult{}, fmt.Errorf("session: abort %s: %w", sid, err)
		}
		return AbortResult{Aborted: a.Aborted, State: a.State}, nil
	}
	res, err := h.request(ctx, sid, func(seq uint64) any { return &abortMsg{seq: seq, reason: reason} })
	if err != nil {
		return AbortResult{}, fmt.Errorf("session: abort %s: %w", sid, err)
	}
	switch r := res.(type) {
	case AbortResult:
		return r, nil
	case error:
		return AbortResult{}, r
	}
	return AbortResult{}, fmt.Errorf("session: abort %s: unexpected reply %T", sid, res)
}

// passivate removes sid's activation if the grain has seen every message
// the host sent it; the grain stops only when it returns true.
func (h *Host) passivate(sid string, pid *actor.PID, seen uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.grains[sid]
	if !ok || a.pid != pid {
		return true
	}
	if h.cluster != nil {
		// A request that reaches the stopped grain is a dead letter; the
		// cluster retries it on a fresh activation.
		delete(h.grains, sid)
		return true
	}
	if a.sent != seen {
		return false
	}
	delete(h.grains, sid)
	return true
}

// forget drops sid's activation (the grain stopped on its own: fenced or
// failed).
func (h *Host) forget(sid string, pid *actor.PID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.grains[sid]; ok && a.pid == pid {
		delete(h.grains, sid)
	}
}

// register records a clustered activation (placed by the cluster).
func (h *Host) register(sid string, pid *actor.PID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.grains[sid] = &activation{pid: pid}
}

// Drain hands this host's sessions off at their next checkpoint: each
// grain finishes the model call or function calls in flight, records them,
// gives its step messages back to JetStream and stops; new wakes are
// refused (clustered: the cluster's lookup places them on other members).
// It returns when no grain is left or ctx ends. Nothing is interrupted, so
// no call ends "outcome unknown" as it would after a kill.
func (h *Host) Drain(ctx context.Context) error {
	h.mu.Lock()
	h.draining = true
	pids := make([]*actor.PID, 0, len(h.grains))
	for _, a := range h.grains {
		pids = append(pids, a.pid)
	}
	h.mu.Unlock()
	if cc := h.opts.cluster; cc != nil && cc.Drain != nil {
		return cc.Drain(ctx)
	}
	for _, pid := range pids {
		h.system.Root.Send(pid, &drainMsg{})
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for h.Active() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("session: drain: %d grains still active: %w", h.Active(), ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// Active is the number of active grains.
func (h *Host) Active() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.grains)
}

// Close stops every grain (un-acked wakes are redelivered to whoever runs
// next) and the actor system.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	// Whatever still runs after the drain is abandoned, as a crash would
	// abandon it: its wakes are redelivered, its records are fenced.
	h.end()
	pids := make([]*actor.PID, 0, len(h.grains))
	sids := make([]string, 0, len(h.grains))
	for sid, a := range h.grains {
		pids = append(pids, a.pid)
		sids = append(sids, sid)
	}
	if len(sids) > 0 {
		slices.Sort(sids)
		// After a drain that did not finish, what is left had work in
		// flight: worth a warning. Without a drain (an embedder's or a
		// test's choice) most are idle grains, stopped as they would be
		// at passivation.
		log := h.opts.logger.Info
		if h.draining {
			log = h.opts.logger.Warn
		}
		log("closing with session grains still active; any work in flight is abandoned as a crash would abandon it",
			"grains", len(sids), "sessions", sids[:min(len(sids), 20)], "drained", h.draining)
	}
	h.grains = map[string]*activation{}
	h.mu.Unlock()
	if h.cluster != nil {
		// Graceful: the provider removes this member at once, the lookup
		// stops the local grains and releases their ownership.
		// Shutdown also shuts the actor system down (a second
		// ActorSystem.Shutdown would panic: docs/UPSTREAM.md).
		h.fwg.Wait()
		h.cluster.Shutdown(true)
		return nil
	}
	stopped := make(chan struct{})
	go func() {
		for _, pid := range pids {
			_ = h.system.Root.StopFuture(pid).Wait()
		}
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
	}
	h.system.Shutdown()
	return nil
}

// poolDispatcher runs a mailbox's message loop on a pool goroutine instead
// of a fresh one per run, so a grain's deep receive path does not grow a
// new stack for every batch of messages.
type poolDispatcher struct{ pool *gopool.Pool }

func (d poolDispatcher) Schedule(fn func()) { d.pool.Go(fn) }

// Throughput is proto.actor's default: messages run per mailbox turn.
func (d poolDispatcher) Throughput() int { return 300 }
