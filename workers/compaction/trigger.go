package compaction

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
)

// Tuning of the threshold trigger's consumers.
const (
	triggerAckWait       = 30 * time.Second
	triggerMaxDeliver    = 20
	triggerMaxAckPending = 1024
	triggerBusyDelay     = time.Second
	triggerBusyMax       = time.Minute
	triggerLookupTimeout = 5 * time.Second
	triggerRetryMin      = 100 * time.Millisecond
	triggerRetryMax      = 30 * time.Second
	// A consume that hears nothing for two heartbeats checks that its
	// consumer still exists.
	triggerPullExpiry = 5 * time.Second
	triggerHeartbeat  = time.Second
	// triggerRescan is how often the trigger lists the events stream's
	// regional copies, to bind a consumer on the ones that appeared.
	triggerRescan = 30 * time.Second
)

// trigger is the threshold trigger: the durable consumer [ConsumerName]
// on every copy of the events stream (the primary one and each region's,
// engine.SessionRegions). A turn_end whose assistant message used at
// least its model's usable window starts a compaction (reason threshold)
// in the background, at most o.concurrency at a time over all copies;
// every other event is acked at once. A failed compaction is logged and
// acked: the orchestrator's overflow check is the backstop.
type trigger struct {
	e    *engine.Engine
	c    *compactor
	o    options
	log  *slog.Logger
	done *workers.Shutdown
	sem  chan struct{}

	ctx      context.Context // ends at close
	stop     context.CancelFunc
	loopDone chan struct{}
	copies   sync.WaitGroup // the copies' bind loops
	wg       sync.WaitGroup // the compactions in flight

	mu    sync.Mutex
	bound map[string]*copyConsumer // by stream name
}

// copyConsumer is the trigger's consumer on one copy of the events
// stream.
type copyConsumer struct {
	t      *trigger
	region string // "" for the primary copy
	stream string
	lost   chan error               // the consume lost its consumer (maybe)
	cc     jetstream.ConsumeContext // under t.mu
}

func startTrigger(e *engine.Engine, c *compactor, done *workers.Shutdown, o options, log *slog.Logger) *trigger {
	ctx, stop := context.WithCancel(context.Background())
	t := &trigger{
		e: e, c: c, o: o, log: log, done: done,
		sem:      make(chan struct{}, o.concurrency),
		ctx:      ctx,
		stop:     stop,
		loopDone: make(chan struct{}),
		bound:    map[string]*copyConsumer{},
	}
	go t.loop()
	return t
}

// consumerConfig is the trigger's durable consumer on one copy: every
// event of the copy (no filter: each copy holds only session events, the
// primary "iii.events.*", a region's "iii.events.<region>.*"), new ones
// only (a first start does not replay history), explicit acks.
func consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		Description:   "iii compaction: threshold trigger on turn_end events",
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       triggerAckWait,
		MaxDeliver:    triggerMaxDeliver,
		MaxAckPending: triggerMaxAckPending,
	}
}

// loop lists the copies of the events stream at once and then every
// o.rescan, and starts a consumer on each copy that has none, until the
// trigger stops.
func (t *trigger) loop() {
	defer close(t.loopDone)
	tick := time.NewTicker(t.o.rescan)
	defer tick.Stop()
	for {
		t.scan()
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// scan starts a consumer on every copy of the events stream not bound
// yet. The primary copy is bound even when the listing fails (its
// consumer waits for the stream).
func (t *trigger) scan() {
	ctx, cancel := context.WithTimeout(t.ctx, triggerLookupTimeout)
	regions, err := t.e.SessionRegions(ctx, subjects.EventStream)
	cancel()
	if err != nil {
		if t.ctx.Err() == nil {
			t.log.Warn("compaction trigger cannot list the events stream's copies", slog.Any("error", err))
		}
		regions = []string{""}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range regions {
		if t.ctx.Err() != nil {
			return
		}
		name := subjects.RegionalStream(subjects.EventStream, r)
		if t.bound[name] != nil {
			continue
		}
		c := &copyConsumer{t: t, region: r, stream: name, lost: make(chan error, 1)}
		t.bound[name] = c
		t.copies.Add(1) // under t.mu, before the loop ends: close waits for it
		go c.run()
	}
}

// run binds the consumer, retrying with backoff while the primary stream
// does not exist yet (the orchestrator creates it), and binds it again
// when it is deleted (a stream or consumer recreated by an operator). A
// region's copy that is gone ends the loop; the next scan binds it again
// if it comes back.
func (c *copyConsumer) run() {
	t := c.t
	defer t.copies.Done()
	defer c.forget()
	for {
		if !c.bindWithRetry() {
			return
		}
		select {
		case <-t.ctx.Done():
			return
		case cause := <-c.lost:
			if !errors.Is(cause, jetstream.ErrConsumerDeleted) && c.exists() {
				continue // a missed heartbeat; the consume goes on
			}
			t.log.Warn("compaction trigger lost its consumer; binding it again", slog.String("stream", c.stream), slog.Any("error", cause))
			t.mu.Lock()
			if c.cc != nil {
				c.cc.Stop()
				c.cc = nil
			}
			t.mu.Unlock()
		}
	}
}

// forget stops the consume and drops the copy from the bound ones.
func (c *copyConsumer) forget() {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if c.cc != nil {
		c.cc.Stop()
		c.cc = nil
	}
	if c.t.bound[c.stream] == c {
		delete(c.t.bound, c.stream)
	}
}

// bindWithRetry binds until it succeeds (true), the trigger stops
// (false) or a region's copy turns out to be gone (false).
func (c *copyConsumer) bindWithRetry() bool {
	t := c.t
	wait := triggerRetryMin
	for {
		err := c.bind()
		if err == nil {
			return true
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if c.region != "" {
				t.log.Debug("regional events stream gone; compaction trigger lets it go", slog.String("stream", c.stream))
				return false
			}
			t.log.Debug("events stream not there yet; compaction trigger waits", slog.String("stream", c.stream))
		} else if t.ctx.Err() == nil {
			t.log.Warn("compaction trigger cannot bind its consumer", slog.String("stream", c.stream), slog.Any("error", err))
		}
		timer := time.NewTimer(wait)
		select {
		case <-t.ctx.Done():
			timer.Stop()
			return false
		case <-timer.C:
		}
		wait = min(2*wait, triggerRetryMax)
	}
}

func (c *copyConsumer) exists() bool {
	ctx, cancel := context.WithTimeout(c.t.ctx, triggerLookupTimeout)
	defer cancel()
	_, err := c.t.e.JetStream().Consumer(ctx, c.stream, ConsumerName)
	return err == nil
}

func (c *copyConsumer) bind() error {
	t := c.t
	ctx, cancel := context.WithTimeout(t.ctx, triggerLookupTimeout)
	defer cancel()
	cons, err := t.e.EnsureConsumer(ctx, c.stream, consumerConfig())
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		return nil
	}
	cc, err := cons.Consume(t.handle, jetstream.PullMaxMessages(64),
		jetstream.PullExpiry(triggerPullExpiry), jetstream.PullHeartbeat(triggerHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			t.log.Debug("compaction trigger consume error", slog.String("stream", c.stream), slog.Any("error", err))
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
				errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, nats.ErrNoResponders) {
				select {
				case c.lost <- err:
				default:
				}
			}
		}))
	if err != nil {
		return err
	}
	c.cc = cc
	return nil
}

// handle decides on one event: only the type is decoded for the events
// that are not turn_end.
func (t *trigger) handle(m jetstream.Msg) {
	codec := wire.ForContentType(m.Headers().Get(wire.HeaderContentType))
	var head struct {
		Type agent.EventType `json:"type"`
	}
	if err := codec.Unmarshal(m.Data(), &head); err != nil || head.Type != agent.EventTurnEnd {
		_ = m.Ack()
		return
	}
	var ev agent.Event
	if err := codec.Unmarshal(m.Data(), &ev); err != nil {
		t.log.Warn("turn_end event does not decode", slog.String("subject", m.Subject()), slog.Any("error", err))
		_ = m.Ack()
		return
	}
	// The session id is the whole rest of the subject: "eu.s1" for a
	// session homed in region eu.
	sid, ok := strings.CutPrefix(m.Subject(), subjects.EventSubjectPrefix)
	msg := ev.Message
	if !ok || subjects.ValidateSessionID(sid) != nil || msg == nil || msg.Usage == nil ||
		subjects.ValidateID("provider", msg.Provider) != nil || validModel(msg.Model) != nil {
		_ = m.Ack()
		return
	}
	used := UsedTokens(*msg.Usage)
	ctx, cancel := context.WithTimeout(context.Background(), triggerLookupTimeout)
	model, err := t.c.model(ctx, msg.Provider, msg.Model)
	cancel()
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, ErrUnknownModel) {
			level = slog.LevelDebug // a model the catalog lacks: no window, no threshold
		}
		t.log.Log(context.Background(), level, "threshold check: model lookup failed", slog.String("session_id", sid),
			slog.String("provider", msg.Provider), slog.String("model", msg.Model), slog.Any("error", err))
		_ = m.Ack()
		return
	}
	if used < t.o.usableWindow(model.ContextWindow) {
		_ = m.Ack()
		return
	}
	select {
	case t.sem <- struct{}{}:
	default:
		var n uint64
		if md, err := m.Metadata(); err == nil {
			n = md.NumDelivered
		}
		if n >= triggerMaxDeliver {
			// The server would drop it after this delivery, silently.
			t.log.Warn("threshold compaction skipped: every slot stayed busy; the overflow check before the next model call is the backstop",
				slog.String("session_id", sid), slog.Uint64("deliveries", n))
			_ = m.Ack()
			return
		}
		_ = m.NakWithDelay(busyDelay(n))
		return
	}
	staleBefore := msg.Timestamp
	if staleBefore == 0 {
		staleBefore = ev.TS
	}
	req := CompactRequest{SessionID: sid, Provider: msg.Provider, Model: msg.Model, Reason: ReasonThreshold, Wait: true}
	t.mu.Lock()
	if t.ctx.Err() != nil {
		t.mu.Unlock()
		<-t.sem
		_ = m.Nak()
		return
	}
	t.wg.Add(1) // under t.mu, so close never waits while a run is being added
	t.mu.Unlock()
	go t.run(m, req, staleBefore)
}

// busyDelay is how long a turn_end that found every slot busy at its
// n-th delivery waits before it comes again: a second, doubling up to a
// minute, so that its deliveries (triggerMaxDeliver) cover some 15
// minutes of busy slots rather than 20 seconds.
func busyDelay(n uint64) time.Duration {
	if n < 1 {
		n = 1
	}
	return min(triggerBusyDelay<<min(n-1, 6), triggerBusyMax)
}

// run compacts in the background, telling the server the message is in
// progress meanwhile; it acks whatever the outcome, except when the
// worker shuts down (the message is redelivered).
func (t *trigger) run(m jetstream.Msg, req CompactRequest, staleBefore int64) {
	defer t.wg.Done()
	defer func() { <-t.sem }()
	ctx, release := t.done.Bind(context.Background())
	defer release()
	ctx, cancel := context.WithTimeout(ctx, t.o.timeout)
	defer cancel()
	progress := make(chan struct{})
	go func() {
		tick := time.NewTicker(triggerAckWait / 3)
		defer tick.Stop()
		for {
			select {
			case <-progress:
				return
			case <-tick.C:
				_ = m.InProgress()
			}
		}
	}()
	resp, err := t.compact(ctx, req, staleBefore)
	close(progress)
	if err != nil {
		if errors.Is(context.Cause(ctx), errShuttingDown) {
			_ = m.Nak()
			return
		}
		t.log.Warn("threshold compaction failed", slog.String("session_id", req.SessionID), slog.Any("error", err))
		_ = m.Ack()
		return
	}
	if !resp.Compacted {
		t.log.Debug("threshold compaction skipped", slog.String("session_id", req.SessionID), slog.String("outcome", string(resp.Reason)))
	}
	_ = m.Ack()
}

// backgroundCompact is what the threshold trigger runs for a turn_end
// (a seam for the tests).
var backgroundCompact = (*compactor).compact

// compact runs one threshold compaction, turning a panic into an
// internal error: it runs on a goroutine of its own, where a panic would
// end the process (a function call's panic is the engine's to recover).
func (t *trigger) compact(ctx context.Context, req CompactRequest, staleBefore int64) (resp CompactResponse, err error) {
	defer func() {
		if p := recover(); p != nil {
			t.log.Error("threshold compaction panicked", slog.String("session_id", req.SessionID), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			resp, err = CompactResponse{}, wire.Errorf(wire.CodeInternal, "compaction of session %s panicked: %v", req.SessionID, p)
		}
	}()
	return backgroundCompact(t.c, ctx, req, staleBefore)
}

// close stops the consumers of every copy, then waits (until ctx ends)
// for the compactions in flight; the caller ends them first through the
// shutdown.
func (t *trigger) close(ctx context.Context) error {
	t.mu.Lock()
	t.stop() // under t.mu: a run is added before it or not at all
	t.mu.Unlock()
	<-t.loopDone    // no scan starts a copy's loop any more
	t.copies.Wait() // every copy's consume is stopped
	done := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
