package compaction

import (
	"context"
	"errors"
	"log/slog"
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

// Tuning of the threshold trigger's consumer.
const (
	triggerAckWait       = 30 * time.Second
	triggerMaxDeliver    = 20
	triggerMaxAckPending = 1024
	triggerBusyDelay     = time.Second
	triggerLookupTimeout = 5 * time.Second
	triggerRetryMin      = 100 * time.Millisecond
	triggerRetryMax      = 30 * time.Second
	// A consume that hears nothing for two heartbeats checks that its
	// consumer still exists.
	triggerPullExpiry = 5 * time.Second
	triggerHeartbeat  = time.Second
)

// trigger is the threshold trigger: the durable consumer [ConsumerName]
// on the events stream. A turn_end whose assistant message used at least
// its model's usable window starts a compaction (reason threshold) in the
// background, at most o.concurrency at a time; every other event is acked
// at once. A failed compaction is logged and acked: the orchestrator's
// overflow check is the backstop.
type trigger struct {
	e    *engine.Engine
	c    *compactor
	o    options
	log  *slog.Logger
	done *workers.Shutdown
	sem  chan struct{}

	stop     chan struct{}
	lost     chan error // the consume lost its consumer (maybe)
	stopOnce sync.Once
	loopDone chan struct{}
	wg       sync.WaitGroup

	mu sync.Mutex
	cc jetstream.ConsumeContext
}

func startTrigger(e *engine.Engine, c *compactor, done *workers.Shutdown, o options, log *slog.Logger) *trigger {
	t := &trigger{
		e: e, c: c, o: o, log: log, done: done,
		sem:      make(chan struct{}, o.concurrency),
		stop:     make(chan struct{}),
		lost:     make(chan error, 1),
		loopDone: make(chan struct{}),
	}
	go t.loop()
	return t
}

// consumerConfig is the trigger's durable consumer: every session's
// events, new ones only (a first start does not replay history), explicit
// acks.
func consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		Description:   "iii compaction: threshold trigger on turn_end events",
		FilterSubject: subjects.EventSubjectPrefix + ">",
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       triggerAckWait,
		MaxDeliver:    triggerMaxDeliver,
		MaxAckPending: triggerMaxAckPending,
	}
}

// loop binds the consumer, retrying with backoff while the events stream
// does not exist yet (the orchestrator creates it), and binds it again
// when it is deleted (a stream or consumer recreated by an operator).
func (t *trigger) loop() {
	defer close(t.loopDone)
	for {
		if !t.bindWithRetry() {
			return
		}
		select {
		case <-t.stop:
			return
		case cause := <-t.lost:
			if !errors.Is(cause, jetstream.ErrConsumerDeleted) && t.consumerExists() {
				continue // a missed heartbeat; the consume goes on
			}
			t.log.Warn("compaction trigger lost its consumer; binding it again", slog.Any("error", cause))
			t.mu.Lock()
			if t.cc != nil {
				t.cc.Stop()
				t.cc = nil
			}
			t.mu.Unlock()
		}
	}
}

// bindWithRetry binds until it succeeds (true) or the trigger stops
// (false).
func (t *trigger) bindWithRetry() bool {
	wait := triggerRetryMin
	for {
		err := t.bind()
		if err == nil {
			return true
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			t.log.Debug("events stream not there yet; compaction trigger waits", slog.String("stream", subjects.EventStream))
		} else {
			t.log.Warn("compaction trigger cannot bind its consumer", slog.Any("error", err))
		}
		timer := time.NewTimer(wait)
		select {
		case <-t.stop:
			timer.Stop()
			return false
		case <-timer.C:
		}
		wait = min(2*wait, triggerRetryMax)
	}
}

func (t *trigger) consumerExists() bool {
	ctx, cancel := context.WithTimeout(context.Background(), triggerLookupTimeout)
	defer cancel()
	_, err := t.e.JetStream().Consumer(ctx, subjects.EventStream, ConsumerName)
	return err == nil
}

func (t *trigger) bind() error {
	ctx, cancel := context.WithTimeout(context.Background(), triggerLookupTimeout)
	defer cancel()
	cons, err := t.e.EnsureConsumer(ctx, subjects.EventStream, consumerConfig())
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.stop:
		return nil
	default:
	}
	cc, err := cons.Consume(t.handle, jetstream.PullMaxMessages(64),
		jetstream.PullExpiry(triggerPullExpiry), jetstream.PullHeartbeat(triggerHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			t.log.Debug("compaction trigger consume error", slog.Any("error", err))
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
				errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, nats.ErrNoResponders) {
				select {
				case t.lost <- err:
				default:
				}
			}
		}))
	if err != nil {
		return err
	}
	t.cc = cc
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
	sid := strings.TrimPrefix(m.Subject(), subjects.EventSubjectPrefix)
	msg := ev.Message
	if subjects.ValidateID("session_id", sid) != nil || msg == nil || msg.Usage == nil ||
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
		_ = m.NakWithDelay(triggerBusyDelay)
		return
	}
	staleBefore := msg.Timestamp
	if staleBefore == 0 {
		staleBefore = ev.TS
	}
	req := CompactRequest{SessionID: sid, Provider: msg.Provider, Model: msg.Model, Reason: ReasonThreshold, Wait: true}
	t.mu.Lock()
	select {
	case <-t.stop:
		t.mu.Unlock()
		<-t.sem
		_ = m.Nak()
		return
	default:
	}
	t.wg.Add(1) // under t.mu, so close never waits while a run is being added
	t.mu.Unlock()
	go t.run(m, req, staleBefore)
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
	resp, err := t.c.compact(ctx, req, staleBefore)
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

// close stops the consumer, then waits (until ctx ends) for the
// compactions in flight; the caller ends them first through the
// shutdown.
func (t *trigger) close(ctx context.Context) error {
	t.stopOnce.Do(func() { close(t.stop) })
	<-t.loopDone
	t.mu.Lock()
	if t.cc != nil {
		t.cc.Stop()
	}
	t.mu.Unlock()
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
