package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/metric"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/hook"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
)

func init() {
	workers.Register(workers.Module{
		Name:        "orchestrator",
		Description: "runs turns: run::start, run::abort, turn::get_state, harness::trigger, agent::trigger, session inbox; hosts the session grains",
		New:         func() workers.Worker { return New() },
	})
}

var (
	_ workers.Provisioner = (*Orchestrator)(nil)
	_ workers.Closer      = (*Orchestrator)(nil)
)

// Step is a turn-step message (SPEC §6).
type Step struct {
	SessionID string          `json:"session_id"`
	Step      uint64          `json:"step"`
	State     agent.TurnState `json:"state"`
}

// Orchestrator is the turn-running worker.
type Orchestrator struct {
	logger      *slog.Logger
	maxTurns    int
	ackWait     time.Duration
	eventMaxAge time.Duration
	// eventMaxConsumers is the event stream's consumer limit.
	eventMaxConsumers int
	hostOpts          []session.Option

	hookQuiescence time.Duration
	hookTimeout    time.Duration
	// maxResult bounds a function call's result (0: the default,
	// DefaultMaxResultBytes or a tenth of the server's max payload).
	maxResult    int
	drainTimeout time.Duration
	modelTimeout time.Duration
	noContinue   bool // every model call sends the whole transcript
	clusterCfg   clusterSettings

	e       *engine.Engine
	turns   sessionKV
	runs    sessionKV
	inbox   inbox
	pub     *publisher
	history *history
	metrics *metrics
	gauges  metric.Registration
	// host is the grain host; a clustered node that was dropped from the
	// grain cluster replaces it (rejoin), hence the atomic.
	host  atomic.Pointer[session.Host]
	ports session.Ports
	stop  chan struct{}
	// stopOnce closes stop: Close may be called twice.
	stopOnce sync.Once
	catalog  *catalogCache
	fns      functions
	spend    *spend
	consume  *perCopy
	// scan finds the stalled sessions for the periodic sweep.
	scan *staleScan

	approvals   approvals
	approvalsCC *perCopy

	// hostID names this orchestrator's grain host to the other replicas
	// (handover.go); handOverSub serves it.
	hostID      string
	handOverSub *nats.Subscription
}

// Option configures an Orchestrator built in code (tests, bench).
type Option func(*Orchestrator)

// WithHostOptions passes options to the grain host.
func WithHostOptions(opts ...session.Option) Option {
	return func(o *Orchestrator) { o.hostOpts = append(o.hostOpts, opts...) }
}

// WithAckWait sets the step consumer's ack wait (default 60 s); grains mark
// held steps in progress well within it.
func WithAckWait(d time.Duration) Option { return func(o *Orchestrator) { o.ackWait = d } }

// WithTranscriptContinuation turns transcript continuations on (the
// default) or off: on, a model call to a provider that keeps transcripts
// carries only the messages added since the session's last call
// ([agent.TranscriptRef]); off, every call sends the whole transcript.
func WithTranscriptContinuation(on bool) Option {
	return func(o *Orchestrator) { o.noContinue = !on }
}

// WithMaxResultBytes bounds what a function call's result may weigh
// ([agent.FunctionResult.Capped]; default [DefaultMaxResultBytes], or a
// tenth of the server's max payload when that is less).
func WithMaxResultBytes(n int) Option { return func(o *Orchestrator) { o.maxResult = n } }

// WithDefaultMaxTurns bounds runs that set no max_turns (default 50).
func WithDefaultMaxTurns(n int) Option { return func(o *Orchestrator) { o.maxTurns = n } }

// New returns an unstarted orchestrator.
func New(opts ...Option) *Orchestrator {
	o := &Orchestrator{logger: slog.New(slog.DiscardHandler), maxTurns: 50, ackWait: 60 * time.Second, eventMaxAge: 7 * 24 * time.Hour, eventMaxConsumers: DefaultEventMaxConsumers,
		hookTimeout: 2 * time.Second, hookQuiescence: hook.DefaultQuiescence, drainTimeout: DefaultDrainTimeout}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// DefaultEventMaxConsumers is the event stream's consumer limit. Every
// client that follows events (iii chat, a gateway's event stream) holds an
// ordered consumer, and nats-server 2.15 limits a stream that sets no
// limit to 1,000 consumers.
const DefaultEventMaxConsumers = 10_000

// DefaultMaxResultBytes is a function result's default bound
// (SettingMaxResultBytes): about 25,000 tokens of text.
const DefaultMaxResultBytes = 100 << 10

// DefaultDrainTimeout bounds the hand-off of a stopping node's sessions
// (SettingDrainTimeout).
const DefaultDrainTimeout = 10 * time.Second

// Settings the orchestrator reads from workers.Env (`iii up --set
// orchestrator.KEY=VALUE`).
const (
	SettingAckWait     = "ack_wait"      // step consumer ack wait, a Go duration (default 60s)
	SettingMaxTurns    = "max_turns"     // default max_turns of a run (default 50)
	SettingEventMaxAge = "event_max_age" // how long events are kept (default 168h)
	// SettingEventMaxConsumers is the event stream's consumer limit
	// (default [DefaultEventMaxConsumers]), set when the stream is
	// created: every client that follows a session's events holds one.
	SettingEventMaxConsumers = "event_max_consumers"
	SettingIdle              = "idle_timeout" // grain passivation after idle (default 2m)
	// SettingHookQuiescence is how long a hook round waits for more
	// replies after the latest one (default 20ms): the price of a hook
	// subscriber on every call, since nobody knows how many there are.
	SettingHookQuiescence = "hook_quiescence"
	// SettingHookTimeout bounds one hook round (default 2s).
	SettingHookTimeout = "hook_timeout"
	// SettingModelTimeout bounds one attempt of a model call (default
	// 15m): a stream that neither ends nor fails by then is tried again.
	SettingModelTimeout = "model_timeout"
	// SettingMaxResultBytes bounds what a function call's result may
	// weigh before the model, the events and the transcript see it
	// (default [DefaultMaxResultBytes], or a tenth of the server's max
	// payload when that is less): the turn record holds a result several
	// times and must fit one message, and the result's transcript entry
	// must fit the session tree's limit (256 KiB by default). The calls of
	// one assistant message share it, each keeping at least 2 KiB.
	SettingMaxResultBytes = "max_result_bytes"
	// SettingTranscriptContinuation, true (default) or false: whether a
	// model call may send only what is new to a provider that keeps the
	// transcript ([WithTranscriptContinuation]).
	SettingTranscriptContinuation = "transcript_continuation"
)

// Provision takes the logger and the settings above; an unknown setting or
// a bad value is an error.
func (o *Orchestrator) Provision(_ context.Context, env workers.Env) error {
	if env.Logger != nil {
		o.logger = env.Logger.With("worker", "orchestrator")
	}
	for k, v := range env.Settings["orchestrator"] {
		switch k {
		case SettingCluster, SettingActorListen, SettingActorAdvertise, SettingNode:
			switch k {
			case SettingCluster:
				if err := agent.ValidateID("cluster", v); err != nil {
					return fmt.Errorf("orchestrator.%s=%q: %w", k, v, err)
				}
				o.clusterCfg.name = v
			case SettingActorListen:
				o.clusterCfg.listen = v
			case SettingActorAdvertise:
				o.clusterCfg.advertise = v
			default:
				o.clusterCfg.node = v
			}
		case SettingAckWait, SettingEventMaxAge, SettingIdle, SettingHookQuiescence, SettingHookTimeout, SettingMemberTTL, SettingDrainTimeout, SettingModelTimeout:
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("orchestrator.%s=%q: want a positive duration", k, v)
			}
			switch k {
			case SettingAckWait:
				o.ackWait = d
			case SettingEventMaxAge:
				o.eventMaxAge = d
			case SettingHookQuiescence:
				o.hookQuiescence = d
			case SettingHookTimeout:
				o.hookTimeout = d
			case SettingMemberTTL:
				o.clusterCfg.memberTTL = d
			case SettingDrainTimeout:
				o.drainTimeout = d
			case SettingModelTimeout:
				o.modelTimeout = d
			default:
				o.hostOpts = append(o.hostOpts, session.WithIdleTimeout(d))
			}
		case SettingTranscriptContinuation:
			on, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("orchestrator.%s=%q: want true or false", k, v)
			}
			o.noContinue = !on
		case SettingMaxTurns, SettingEventMaxConsumers, SettingMaxResultBytes:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("orchestrator.%s=%q: want a positive integer", k, v)
			}
			switch k {
			case SettingMaxTurns:
				o.maxTurns = n
			case SettingMaxResultBytes:
				o.maxResult = n
			default:
				o.eventMaxConsumers = n
			}
		default:
			return fmt.Errorf("orchestrator: unknown setting %q", k)
		}
	}
	if o.hookTimeout > hook.MaxTimeout || o.hookQuiescence > o.hookTimeout {
		return fmt.Errorf("orchestrator: want hook_quiescence ≤ hook_timeout ≤ %v (got %v, %v)", hook.MaxTimeout, o.hookQuiescence, o.hookTimeout)
	}
	return nil
}

// Start ensures the state, registers the functions and consumes steps.
func (o *Orchestrator) Start(ctx context.Context, e *engine.Engine) error {
	o.e = e
	var err error
	// Every per-session bucket and stream: the primary copy and, on a
	// node of a region, that region's copy (docs/REGIONS.md).
	var kvs []sessionKV
	for _, cfg := range append([]jetstream.KeyValueConfig{
		{Bucket: subjects.TurnStateBucket, History: 1, Storage: jetstream.FileStorage},
		{Bucket: subjects.RunsBucket, TTL: 24 * time.Hour, Storage: jetstream.FileStorage},
		{Bucket: subjects.InboxBucket, History: 1, Storage: jetstream.FileStorage},
	}, approvalBucketConfigs()...) {
		if _, err := e.EnsureSessionKV(ctx, cfg); err != nil {
			return err
		}
		kvs = append(kvs, sessionKV{e: e, bucket: cfg.Bucket})
	}
	o.turns, o.runs, o.inbox = kvs[0], kvs[1], inbox{kvs: kvs[2], watch: newInboxWatch(), logger: o.logger}
	o.approvals = approvals{kvs: kvs[3], now: time.Now, tracer: e.Tracer(), logger: o.logger}
	for _, s := range []struct {
		cfg    jetstream.StreamConfig
		prefix string
	}{
		{stepStreamConfig(e.Replicas()), subjects.StepSubjectPrefix},
		{eventStreamConfig(e.Replicas(), o.eventMaxAge, o.eventMaxConsumers), subjects.EventSubjectPrefix},
	} {
		if _, err := e.EnsureSessionStream(ctx, s.cfg, s.prefix); err != nil {
			return err
		}
	}
	o.consume = &perCopy{stream: subjects.StepStream, start: o.consumeStepsOf}
	o.approvalsCC = &perCopy{stream: subjects.ApprovalsKVStream, start: o.watchApprovalsOf}
	ms, err := newMetrics(e)
	if err != nil {
		return err
	}
	o.metrics = ms
	o.pub = newPublisher(e)
	o.pub.metrics = ms
	o.history = newHistory(e, o.pub, newPathWatch(e, o.logger))
	o.catalog = &catalogCache{e: e, ttl: time.Second}
	o.spend = newSpend(e, o.logger)
	maxResult := o.maxResult
	if maxResult <= 0 {
		maxResult = min(DefaultMaxResultBytes, int(e.Conn().MaxPayload()/10))
	}
	o.fns = functions{e: e, catalog: o.catalog, settings: &kvs[4], logger: o.logger, hookTimeout: o.hookTimeout, hookQuiescence: o.hookQuiescence, metrics: ms, maxResult: maxResult}
	o.stop = make(chan struct{})
	tools := &toolList{catalog: o.catalog, ttl: 30 * time.Second}
	o.ports = session.Ports{
		Store:     o.store(),
		History:   o.history,
		Events:    o.pub,
		Model:     model{e: e, pub: o.pub, history: o.history, logger: o.logger, spend: o.spend, tools: tools, coalesce: 60 * time.Millisecond, timeout: o.modelTimeout, sent: o.sentTranscripts()},
		Functions: o.fns,
		Inbox:     o.inbox,
		Approvals: o.approvals,
		Workspace: &workspace{e: e, logger: o.logger, tools: tools},
	}
	host, err := o.newHost()
	if err != nil {
		return err
	}
	o.host.Store(host)
	o.hostID = nuid.Next()
	if err := o.serveHandOver(); err != nil {
		return err
	}
	if err := o.observeGauges(); err != nil {
		return err
	}
	if err := o.register(); err != nil {
		return err
	}
	if err := o.sweep(ctx); err != nil {
		return err
	}
	if err := o.consumeSteps(ctx); err != nil {
		return err
	}
	o.scan = &staleScan{turns: o.turns}
	go o.sweepEvery(max(2*o.ackWait, 10*time.Second))
	if err := o.watchApprovals(ctx); err != nil {
		return err
	}
	// Started last: a Start that fails leaves no watch running. Until it
	// has caught up, steering checks read the inbox.
	ikv, err := o.inbox.kvs.copyOf(ctx, "")
	if err == nil {
		err = o.inbox.watch.start(ctx, e.Conn(), ikv, o.logger)
	}
	if err != nil {
		return wire.Wrap(wire.CodeUnavailable, err, "watch the inbox bucket")
	}
	return nil
}

// Close hands the sessions off (each grain finishes the step it is in and
// gives its step back: bounded by the drain timeout and ctx), stops
// consuming steps and stops the grains.
func (o *Orchestrator) Close(ctx context.Context) error {
	if o.gauges != nil {
		_ = o.gauges.Unregister()
	}
	if o.stop != nil {
		o.stopOnce.Do(func() { close(o.stop) })
	}
	if o.handOverSub != nil {
		_ = o.handOverSub.Unsubscribe() // steps are no longer handed to this host
	}
	host := o.host.Load()
	if host != nil {
		dctx, cancel := context.WithTimeout(ctx, o.drainTimeout)
		if err := host.Drain(dctx); err != nil {
			o.logger.Warn("sessions not all handed off; the rest resume from their last record", "error", err)
		}
		cancel()
	}
	if o.consume != nil {
		o.consume.stop()
	}
	if o.approvalsCC != nil {
		o.approvalsCC.stop()
	}
	o.inbox.watch.stop()
	if o.history != nil {
		o.history.paths.stop()
	}
	if host != nil {
		return host.Close(ctx)
	}
	return nil
}

// Host is the grain host (tests, metrics).
func (o *Orchestrator) Host() *session.Host { return o.host.Load() }

// newHost starts a grain host on o.ports: alone, or as a member of the
// grain cluster.
func (o *Orchestrator) newHost() (*session.Host, error) {
	opts := append([]session.Option{session.WithLogger(o.logger), session.WithHeartbeat(o.ackWait / 4), session.WithTraceContext(traceExtractor(o.e))}, o.hostOpts...)
	if o.clusterCfg.name != "" {
		opt, expelled, err := o.clusterOption()
		if err != nil {
			return nil, err
		}
		opts = append(opts, opt)
		go o.rejoinWhen(expelled)
	}
	return session.NewHost(o.ports, opts...)
}

// consumeSteps consumes every copy of the step stream: the primary one and
// each region's. Every node serves every copy (the grain of a session runs
// where the grain cluster places it).
func (o *Orchestrator) consumeSteps(ctx context.Context) error {
	return o.consume.refresh(ctx, o.e)
}

// consumeStepsOf consumes one copy of the step stream.
func (o *Orchestrator) consumeStepsOf(ctx context.Context, stream string) (jetstream.ConsumeContext, error) {
	cons, err := o.e.EnsureConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       subjects.StepConsumer,
		FilterSubject: subjects.StepSubjectPrefix + ">",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.ackWait,
		MaxAckPending: 20000,
	})
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "step consumer on %s", stream)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var st Step
		err := json.Unmarshal(m.Data(), &st)
		if err == nil {
			err = agent.ValidateSessionID(st.SessionID)
		}
		if err != nil {
			o.logger.Warn("bad turn step dropped", "subject", m.Subject(), "error", err)
			_ = m.Term()
			return
		}
		wake := func() {
			if err := o.Host().Wake(st.SessionID, session.Wake{Step: st.Step, Reply: m.Reply(), Ack: m.Ack, InProgress: m.InProgress, Nak: m.NakWithDelay}); err != nil {
				_ = m.NakWithDelay(time.Second)
			}
		}
		if h := m.Headers().Get(headerStepHost); h != "" && h != o.hostID && firstDelivery(m) {
			// Another replica's grain runs this run already: hand it
			// the step (off the consume goroutine). A redelivered step
			// was given back by that grain (or lost with it): any
			// replica serves it.
			go func() {
				if !o.handOver(h, st, m.Reply()) {
					wake()
				}
			}()
			return
		}
		wake()
	}, jetstream.PullMaxMessages(512))
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "consume steps of %s", stream)
	}
	return cc, nil
}

// enqueueStep publishes the wake for rec (deduplicated per run and step);
// local says this orchestrator's grain started the run already.
func (o *Orchestrator) enqueueStep(ctx context.Context, rec turn.Record, local bool) error {
	host := ""
	if local {
		host = o.hostID
	}
	return o.publishWake(ctx, rec, "", host)
}

// enqueueWake publishes a wake for rec whose dedup id is the run, the step
// and why ("" for the step itself; an approval decision wakes a session
// at a step it was already woken at).
func (o *Orchestrator) enqueueWake(ctx context.Context, rec turn.Record, why string) error {
	return o.publishWake(ctx, rec, why, "")
}

// publishWake is enqueueWake naming the host whose grain runs the run
// already, if any (handover.go).
func (o *Orchestrator) publishWake(ctx context.Context, rec turn.Record, why, host string) error {
	subj, err := subjects.StepSubject(rec.SessionID)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(Step{SessionID: rec.SessionID, Step: rec.Step, State: rec.State})
	id := fmt.Sprintf("%s:%d", rec.RunID, rec.Step)
	if why != "" {
		id += ":" + why
	}
	msg := &nats.Msg{Subject: subj, Data: data}
	if host != "" {
		msg.Header = nats.Header{headerStepHost: []string{host}}
	}
	_, err = o.e.JetStream().PublishMsg(ctx, msg, jetstream.WithMsgID(id))
	return err
}

// sweepEvery re-wakes, every interval, the sessions whose run is mid-flight
// but whose record has not moved for an interval: a safety net for a wake
// that was lost (its step acked by a grain that died before it wrote, a
// publish whose answer was lost with a node). A session that is only slow
// gets a duplicate wake, which its grain drops.
func (o *Orchestrator) sweepEvery(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		// Copies of the step stream and the approvals bucket that appeared
		// since (a region's first node started) get their consumers.
		for _, p := range []*perCopy{o.consume, o.approvalsCC} {
			if err := p.refresh(ctx, o.e); err != nil {
				o.logger.Warn("consumers of new regional copies not started; trying again later", "stream", p.stream, "error", err)
			}
		}
		n, err := o.resweep(ctx, interval)
		cancel()
		if err != nil {
			o.logger.Warn("periodic sweep failed", "error", err)
		} else if n > 0 {
			o.logger.Info("periodic sweep woke stalled sessions", "sessions", n)
		}
	}
}

// sweep re-wakes every session whose run is mid-flight: covers a crash
// between a record write and its step publish (the dedup id makes a wake
// that did go out harmless). It also makes sure every parked call is in
// the approvals bucket.
func (o *Orchestrator) sweep(ctx context.Context) error {
	st := o.store()
	for key := range o.sessionKeys(ctx) {
		rec, _, err := st.Load(ctx, key)
		if err != nil {
			continue
		}
		if err := foreignRecord(key, rec); err != nil {
			// Another client's value: no run of ours to wake, and no
			// reason to refuse to start.
			o.logger.Warn("turn record not swept: not a session's record", "key", key, "error", err)
			continue
		}
		// A crash between parking a call and recording it in the
		// approvals bucket would leave nothing for a human to resolve.
		for _, p := range rec.AwaitingApproval {
			if err := o.approvals.Request(ctx, rec.SessionID, rec.RunID, p); err != nil {
				return wire.Wrap(wire.CodeUnavailable, err, "record pending approval of %s", key)
			}
		}
		if settledRecord(rec) {
			continue
		}
		if err := o.enqueueStep(ctx, rec, false); err != nil {
			return wire.Wrap(wire.CodeUnavailable, err, "re-wake %s", key)
		}
	}
	return nil
}

// checkRunSize refuses a run whose messages the turn record could not
// hold: the record carries them (the request, the transcript appends and
// the events still to deliver) at least twice, in one NATS message. A
// quarter of the max payload leaves room for the rest; a larger run was
// accepted and then failed on its first record write.
func (o *Orchestrator) checkRunSize(rs agent.RunStart) error {
	b, err := wire.MarshalJSON(rs.Messages)
	if err != nil {
		return wire.Wrap(wire.CodeInvalidPayload, err, "messages do not encode")
	}
	if limit := o.e.Conn().MaxPayload() / 4; int64(len(b)) > limit {
		return wire.Errorf(wire.CodeInvalidPayload,
			"the run's messages are %d bytes as JSON; a run takes at most %d, a quarter of the server's max payload (the turn record holds them more than once)", len(b), limit).
			WithDetails(map[string]any{"size": len(b), "limit": limit})
	}
	return nil
}

// RunStartResult is run::start's response.
type RunStartResult struct {
	SessionID string `json:"session_id"`
	Started   bool   `json:"started"`
	Reason    string `json:"reason,omitempty"`
	RunID     string `json:"run_id,omitempty"`
}

// runStart persists the run request, seeds the record and enqueues its
// first step; it returns at once.
func (o *Orchestrator) runStart(ctx context.Context, rs agent.RunStart) (RunStartResult, error) {
	if !o.providerKnown(ctx, rs.Provider) {
		return RunStartResult{}, wire.Errorf(wire.CodeInvalidPayload, "unknown provider %q: no worker serves provider::%s::stream", rs.Provider, rs.Provider)
	}
	if err := o.checkRunSize(rs); err != nil {
		return RunStartResult{}, err
	}
	if err := o.checkCapabilities(ctx, rs); err != nil {
		return RunStartResult{}, err
	}
	if rs.MaxTurns == 0 {
		rs.MaxTurns = o.maxTurns
	}
	// A session homed in a region with no stores is refused before
	// anything is written.
	if _, err := o.turns.of(ctx, rs.SessionID); err != nil {
		return RunStartResult{}, err
	}
	runs, err := o.runs.of(ctx, rs.SessionID)
	if err != nil {
		return RunStartResult{}, err
	}
	var idemKey string
	if rs.IdempotencyKey != "" {
		idemKey = runKey(rs.SessionID, rs.IdempotencyKey)
		if ent, err := runs.Get(ctx, idemKey); err == nil {
			var prev RunStartResult
			if json.Unmarshal(ent.Value(), &prev) == nil {
				return prev, nil
			}
		}
	}
	st := o.store()
	for attempt := 0; ; attempt++ {
		res, err := o.runStartOnce(ctx, rs, runs, st, attempt > 0)
		if errors.Is(err, session.ErrFenced) {
			if attempt < 8 {
				continue // the grain checkpointed in between: look again
			}
			return RunStartResult{SessionID: rs.SessionID, Started: false, Reason: "session_busy"}, nil
		}
		if err != nil {
			return RunStartResult{}, err
		}
		if idemKey != "" && res.Started {
			data, _ := json.Marshal(res)
			_, _ = runs.Put(ctx, idemKey, data)
		}
		return res, nil
	}
}

// runKey is the key in the runs bucket of idempotency key key of session
// sid.
func runKey(sid, key string) string {
	h := sha256.Sum256([]byte(key))
	return sid + "." + hex.EncodeToString(h[:12])
}

// rememberRun makes sure the runs bucket answers a retry of the run prev
// tells of, when that run was started with an idempotency key, before the
// next run's record replaces prev: until then the record itself answers
// such a retry, but the key's entry may never have been written (the
// process died between the record write and the entry's, or the entry's
// write failed), and a retry after the record was replaced would start
// the run a second time.
func rememberRun(ctx context.Context, runs jetstream.KeyValue, prev turn.Record) error {
	key := prev.Request.IdempotencyKey
	if key == "" || prev.RunID == "" {
		return nil
	}
	data, _ := json.Marshal(RunStartResult{SessionID: prev.SessionID, Started: true, RunID: prev.RunID})
	_, err := runs.Create(ctx, runKey(prev.SessionID, key), data)
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return wire.Wrap(wire.CodeUnavailable, err, "remember the idempotency key of the session's last run")
	}
	return nil
}

// runStartOnce is one attempt of runStart; a lost CAS is session.ErrFenced.
// The first attempt takes the record from the session's grain when it is
// active here and idle at the end of a run (a KV read less on every turn
// of a conversation); a retry (fromKV) reads KV.
func (o *Orchestrator) runStartOnce(ctx context.Context, rs agent.RunStart, runs jetstream.KeyValue, st store, fromKV bool) (RunStartResult, error) {
	var (
		cur turn.Record
		rev uint64
		err error
		ok  bool
	)
	if !fromKV {
		cur, rev, ok = o.Host().Settled(rs.SessionID)
	}
	if !ok {
		cur, rev, err = st.Load(ctx, rs.SessionID)
	}
	switch {
	case errors.Is(err, session.ErrNoRecord):
		rev = 0
	case err != nil:
		return RunStartResult{}, recordErr(err, "load turn record")
	case rs.IdempotencyKey != "" && cur.Request.IdempotencyKey == rs.IdempotencyKey && cur.State.Terminal():
		// The run this key started has ended already; its answer was
		// lost before the key's entry in the runs bucket was written.
		return RunStartResult{SessionID: rs.SessionID, Started: true, RunID: cur.RunID}, nil
	case !cur.State.Terminal():
		if rs.IdempotencyKey != "" && cur.Request.IdempotencyKey == rs.IdempotencyKey {
			// A retry of the run in flight: the first attempt's answer
			// (or its step) may have been lost with a node, so wake the
			// session again; a grain takes a duplicate wake in its stride.
			if err := o.enqueueWake(ctx, cur, "retry:"+strconv.FormatInt(time.Now().UnixMilli(), 36)); err != nil {
				return RunStartResult{}, wire.Wrap(wire.CodeUnavailable, err, "enqueue turn step")
			}
			return RunStartResult{SessionID: rs.SessionID, Started: true, RunID: cur.RunID}, nil
		}
		return RunStartResult{SessionID: rs.SessionID, Started: false, Reason: "session_busy"}, nil
	}
	if rev != 0 {
		if err := rememberRun(ctx, runs, cur); err != nil {
			return RunStartResult{}, err
		}
	}
	if rev == 0 {
		// A new session: its transcript lives in the session tree, which
		// must hold the session before the grain appends to it. (A
		// session that ran before resumes on its active leaf.)
		if err := o.history.ensure(ctx, rs.SessionID); err != nil {
			return RunStartResult{}, err
		}
	}
	runID := nuid.Next()
	rec, _, err := turn.New(rs, runID, time.Now().UnixMilli())
	if err != nil {
		return RunStartResult{}, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	// The previous run's record may still list effects: its grain died
	// after the terminal write, or has not checkpointed their delivery
	// yet. Its transcript appends and its Finish (requeue follow-ups,
	// withdraw approvals, release the sandbox) may never have been
	// performed, nor its events stored (its agent_end among them): the
	// new run performs them first. Each is idempotent, so a repeat is
	// harmless: an event goes out under its own message id, and one the
	// stream holds already is left out (leftEffects).
	left, err := o.leftEffects(ctx, cur)
	if err != nil {
		return RunStartResult{}, err
	}
	if len(left) > 0 {
		rec.Outbox = append(left, rec.Outbox...)
	}
	// Inbox items the last run took in whose removal is not known done
	// (its grain died first): the new run's first steering check removes
	// them before it reads the inbox, or it would take them in again.
	if cur.Taken != nil {
		taken := *cur.Taken
		rec.Taken = &taken
	}
	rec.Trace = traceCarrier(ctx, o.e)
	newRev, err := st.Write(ctx, rec, rev)
	if err != nil {
		if errors.Is(err, session.ErrFenced) {
			return RunStartResult{}, err
		}
		if errors.Is(err, session.ErrUnstorable) {
			return RunStartResult{}, wire.Wrap(wire.CodeInvalidPayload, err, "the run's messages are too large to store")
		}
		return RunStartResult{}, wire.Wrap(wire.CodeUnavailable, err, "write turn record")
	}
	// A grain on this node starts at once with the record just written;
	// the step below is what wakes it after a crash (and wakes a grain
	// on another member of a cluster).
	local := o.Host().Written(rs.SessionID, rec, newRev, rev)
	// The step's message id makes a repeat that did land harmless.
	if err := engine.Retry(ctx, writeAttempt, func(ctx context.Context) error { return o.enqueueStep(ctx, rec, local) }, always); err != nil {
		if local {
			// The grain has the run already and may have written since:
			// taking the record back would undo its work. Should this
			// process die before the run ends, the periodic sweep wakes
			// the session (its record is mid-flight).
			o.logger.Warn("turn step not enqueued; the run goes on here, and the sweep wakes it after a crash", "session_id", rs.SessionID, "error", err)
			o.metrics.turnsStarted.Add(ctx, 1)
			return RunStartResult{SessionID: rs.SessionID, Started: true, RunID: runID}, nil
		}
		// Take the record back so nothing half-started is left; if that
		// fails too, the sweep on the next start re-wakes it. (A record
		// that came from the grain is the retired one: the run it tells
		// of ended; its messages are in the transcript. It gets here
		// only when the grain's host began draining in between.)
		if kv, kerr := o.turns.of(ctx, rs.SessionID); kerr != nil {
			o.logger.Warn("turn record of a run whose step could not be enqueued not taken back; the sweep re-wakes it", "session_id", rs.SessionID, "error", kerr)
		} else if rev == 0 {
			_ = kv.Delete(ctx, rs.SessionID, jetstream.LastRevision(newRev))
		} else if data, merr := json.Marshal(cur); merr == nil {
			_, _ = kv.Update(ctx, rs.SessionID, data, newRev)
		}
		return RunStartResult{}, wire.Wrap(wire.CodeUnavailable, err, "enqueue turn step")
	}
	o.metrics.turnsStarted.Add(ctx, 1)
	return RunStartResult{SessionID: rs.SessionID, Started: true, RunID: runID}, nil
}

// leftEffects returns what of the previous run's outbox the next run
// performs first: its transcript appends, its Finish, and the events the
// event stream does not hold yet. Until stop 32 the events were dropped
// ("the client has moved on"), and a run whose grain died after its
// terminal write, before its events were stored, was left without its
// end in the stream once the next run started: a client that saw the
// agent_end go by on a core subscription did start it, and one reading
// the stream waited for that end forever. Which events are stored is
// asked as a replay of that record asks it (publisher.StoredEvents):
// nothing is read while the duplicate window covers them.
func (o *Orchestrator) leftEffects(ctx context.Context, cur turn.Record) ([]turn.Effect, error) {
	var (
		left []turn.Effect
		ids  []string
	)
	for _, eff := range cur.Outbox {
		switch eff.Kind {
		case turn.EffectAppendHistory, turn.EffectFinish:
			left = append(left, eff)
		case turn.EffectEmit:
			left = append(left, eff)
			ids = append(ids, eff.ID)
		case turn.EffectEndCalls:
			left = append(left, eff)
			for id := range eff.EndEvents() {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return left, nil
	}
	stored, err := o.pub.StoredEvents(ctx, cur.SessionID, ids, cur.UpdatedAtMs)
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "read which events of the previous run are stored")
	}
	if len(stored) == 0 {
		return left, nil
	}
	have := make(map[string]bool, len(stored))
	for _, id := range stored {
		have[id] = true
	}
	return slices.DeleteFunc(left, func(eff turn.Effect) bool {
		switch eff.Kind {
		case turn.EffectEmit:
			return have[eff.ID]
		case turn.EffectEndCalls:
			for id := range eff.EndEvents() {
				if !have[id] {
					return false
				}
			}
			return true
		}
		return false
	}), nil
}

func (o *Orchestrator) providerKnown(ctx context.Context, provider string) bool {
	return functionKnown(ctx, o.e, o.catalog, "provider::"+provider+"::stream")
}

// functionKnown reports whether some worker serves function id: this
// process (no discovery needed), or the catalog. A discovery under load
// can miss a worker whose $SRV reply came after its quiet period, and a
// run refused as "unknown provider" is the user's to see, so a miss asks
// the bus once more before saying no.
func functionKnown(ctx context.Context, e *engine.Engine, c *catalogCache, id string) bool {
	if e.ServesLocally(id) {
		return true
	}
	if _, ok := c.lookup(ctx, id); ok {
		return true
	}
	m, _ := c.discover(ctx)
	_, ok := m[id]
	return ok
}

// checkCapabilities refuses, before any spend, a run that needs what its
// model cannot do by the catalog: images without vision, a thinking level
// without thinking, an explicit tool list without tools. A model the
// catalog does not know is not checked.
func (o *Orchestrator) checkCapabilities(ctx context.Context, rs agent.RunStart) error {
	var need []string
	for _, m := range rs.Messages {
		for _, c := range m.Content {
			if c.Type == agent.ContentImage {
				need = append(need, agent.CapabilityVision)
				break
			}
		}
		if len(need) > 0 {
			break
		}
	}
	if rs.ThinkingLevel != "" && rs.ThinkingLevel != "off" {
		need = append(need, agent.CapabilityThinking)
	}
	if len(rs.Tools) > 0 && rs.ToolMode != agent.ToolsNone {
		need = append(need, agent.CapabilityTools)
	}
	if len(need) == 0 {
		return nil
	}
	m, known, err := o.spend.model(ctx, rs.Provider, rs.Model)
	if err != nil {
		return wire.Wrap(wire.CodeUnavailable, err, "model catalog")
	}
	if !known {
		return nil
	}
	for _, c := range need {
		if !m.Supports(c) {
			return wire.Errorf(wire.CodeInvalidPayload, "model %s/%s does not support %s, which this run needs", rs.Provider, rs.Model, c)
		}
	}
	return nil
}

// sentTranscripts is the model port's record of the transcripts sent (nil
// with continuations off).
func (o *Orchestrator) sentTranscripts() *sentTranscripts {
	if o.noContinue {
		return nil
	}
	return newSentTranscripts()
}
