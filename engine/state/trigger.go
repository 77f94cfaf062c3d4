package state

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Trigger selects the changes a state trigger reacts to and names the
// function it calls with each.
type Trigger struct {
	// Scope is the scope watched.
	Scope string
	// KeyPattern narrows the keys: "" is every key of the scope, "a/b" is
	// the key a/b and every key below it, "a/b/" only the keys below a/b.
	KeyPattern string
	// FunctionID is the function called with each [Event]. It also names
	// the durable consumer (see [ConsumerName]); with [OnChangeFunc] it
	// need not be a registered function.
	FunctionID string
}

func (t Trigger) validate() error {
	if err := subjects.ValidateFunctionID(t.FunctionID); err != nil {
		return wire.Wrap(wire.CodeInvalidPayload, err, "trigger function")
	}
	_, err := keyFilters(t.Scope, t.KeyPattern)
	return err
}

// consumerNameMax keeps consumer names well inside the server's and the
// file system's limits.
const consumerNameMax = 128

// ConsumerName is the durable consumer name of t: readable from the
// function id ("state_orders~~on_change_…"), then a hash of the function
// id, scope and key pattern, so every replica of one trigger binds the same
// consumer and distinct triggers of one function do not collide.
func ConsumerName(t Trigger) (string, error) {
	if err := t.validate(); err != nil {
		return "", err
	}
	base, err := subjects.ConsumerName("state", t.FunctionID)
	if err != nil {
		return "", wire.Wrap(wire.CodeInvalidPayload, err, "trigger function")
	}
	sum := sha256.Sum256([]byte(t.FunctionID + "\x00" + t.Scope + "\x00" + t.KeyPattern))
	h := hex.EncodeToString(sum[:6])
	if len(base) > consumerNameMax-len(h)-1 {
		base = base[:consumerNameMax-len(h)-1]
	}
	return base + "_" + h, nil
}

// EventType tells what happened to a key.
type EventType string

// The event types of a state trigger.
const (
	EventCreated EventType = "state:created"
	EventUpdated EventType = "state:updated"
	EventDeleted EventType = "state:deleted"
)

// Event is what a state trigger's function receives: the change of one key.
type Event struct {
	EventType EventType `json:"event_type"`
	Scope     string    `json:"scope"`
	Key       string    `json:"key"`
	// OldValue is the value before (null for created).
	OldValue any `json:"old_value"`
	// NewValue is the value after (null for deleted).
	NewValue any `json:"new_value"`
	// Revision is the KV revision of this change; revisions of one key
	// grow, so a handler can drop an event older than one it has seen.
	Revision uint64 `json:"revision"`
	// OldRevision is the revision OldValue was read from (0 if none).
	OldRevision uint64 `json:"old_revision,omitempty"`
	// OldValueUnavailable is set when there was an old value but it is not
	// in the event: the bucket no longer holds that revision (more than
	// the bucket's history of newer writes to the key, or a purge), or the
	// event would not fit in one message. Read the key if you need it.
	OldValueUnavailable bool `json:"old_value_unavailable,omitempty"`
	// NewValueUnavailable is set when the new value would not fit in one
	// message (only possible for values written by foreign clients).
	NewValueUnavailable bool `json:"new_value_unavailable,omitempty"`
}

// Subscription is one running replica of a state trigger. Stop or Drain
// it when the process shuts down; the durable consumer stays, so the next
// start resumes where this one stopped. While it runs it keeps its
// consumer: one deleted under it (nats consumer rm, the bucket's stream
// re-created) is noticed and re-created, see [OnChange].
type Subscription struct {
	e       *engine.Engine
	store   *Store
	trig    Trigger
	name    string
	opts    triggerOptions
	cfg     jetstream.ConsumerConfig
	deliver func(ctx context.Context, ev *Event) error

	// base is cancelled by Stop; calls in flight derive from it.
	base   context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	wg     sync.WaitGroup

	// The supervisor (supervise) owns cons, cc, led and streamCreated
	// until quit closes; stopConsuming reads cc once it has returned.
	cons          jetstream.Consumer
	cc            jetstream.ConsumeContext
	led           *ledger
	streamCreated time.Time
	check         chan struct{} // the consume reported an error: look at the consumer
	quit          chan struct{}
	superDone     chan struct{}

	stopOnce sync.Once
}

// OnChange starts a durable state trigger: every change of a key of
// t.Scope matching t.KeyPattern is delivered to function t.FunctionID (via
// e.Trigger, with the trace context of the write) until it succeeds. The
// consumer is durable and shared: every replica that calls OnChange with
// the same Trigger shares the events, and events written while no replica
// runs, or while the function is down, are delivered when both are back. A
// failed call (an error, a timeout, function_not_found) is redelivered
// after an exponential backoff ([WithBackoff]), without limit unless
// [WithMaxDeliver] says otherwise. Delivery is at least once; concurrent
// events are not ordered unless [WithMaxAckPending](1).
//
// The trigger sees the changes made after its consumer was first created.
// ctx bounds the setup, which is retried while JetStream is unavailable
// for a moment (no answer, no responders, a cluster electing a leader);
// an error a retry cannot fix (a bad trigger or option) is returned at once.
//
// A running Subscription keeps its consumer: when the consumer is deleted
// under it (nats consumer rm, the bucket's stream deleted and created
// again), it logs a warning naming the trigger and re-creates the consumer
// from the ack floor it last saw (from the start of a re-created stream),
// retrying with backoff until it succeeds or is stopped. The events after
// that floor come again, but an event whose call succeeded in this process
// is acked without a second call (up to 65536 such events remembered above
// the floor). To remove a trigger for good, stop it on every replica and
// [Subscription.Delete] it.
func OnChange(ctx context.Context, e *engine.Engine, store *Store, t Trigger, opts ...TriggerOption) (*Subscription, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	deliver := func(ctx context.Context, ev *Event) error {
		body, err := encodeEvent(e, ev)
		if err != nil {
			return err
		}
		return e.Trigger(ctx, t.FunctionID, engine.Raw(body), nil)
	}
	return start(ctx, e, store, t, deliver, opts)
}

// OnChangeFunc is [OnChange] with a Go callback instead of a function call:
// fn runs in this process, and an error or a panic means redelivery. It
// shares the durability of OnChange; t.FunctionID only names the consumer.
func OnChangeFunc(ctx context.Context, e *engine.Engine, store *Store, t Trigger, fn func(ctx context.Context, ev Event) error, opts ...TriggerOption) (*Subscription, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil callback", engine.ErrInvalidOption)
	}
	deliver := func(ctx context.Context, ev *Event) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("state trigger callback panicked: %v\n%s", p, debug.Stack())
			}
		}()
		return fn(ctx, *ev)
	}
	return start(ctx, e, store, t, deliver, opts)
}

func start(ctx context.Context, e *engine.Engine, store *Store, t Trigger, deliver func(context.Context, *Event) error, opts []TriggerOption) (*Subscription, error) {
	if e == nil || store == nil {
		return nil, fmt.Errorf("%w: nil engine or store", engine.ErrInvalidOption)
	}
	o := defaultTriggerOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.ackWait == 0 {
		o.ackWait = o.callTimeout + ackWaitMargin
	}
	if o.ackWait <= o.callTimeout {
		return nil, fmt.Errorf("%w: ack wait %v must exceed the call timeout %v", engine.ErrInvalidOption, o.ackWait, o.callTimeout)
	}
	name, err := ConsumerName(t)
	if err != nil {
		return nil, err
	}
	filters, err := keyFilters(t.Scope, t.KeyPattern)
	if err != nil {
		return nil, err
	}
	for i, f := range filters {
		filters[i] = store.subjPrefix + f
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   fmt.Sprintf("iii state trigger: %s/%s -> %s", t.Scope, t.KeyPattern, t.FunctionID),
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.ackWait,
		MaxDeliver:    o.maxDeliver,
		MaxAckPending: o.maxAckPending,
	}
	if len(filters) == 1 {
		cfg.FilterSubject = filters[0]
	} else {
		cfg.FilterSubjects = filters
	}
	base, stop := context.WithCancel(context.Background())
	s := &Subscription{
		e: e, store: store, trig: t, name: name, opts: o, cfg: cfg, deliver: deliver,
		base: base, cancel: stop, sem: make(chan struct{}, o.concurrency),
		check: make(chan struct{}, 1), quit: make(chan struct{}), superDone: make(chan struct{}),
	}
	cctx, cancel := store.withTimeout(ctx)
	defer cancel()
	var cons jetstream.Consumer
	err = engine.Retry(cctx, setupAttempt, func(ctx context.Context) error {
		info, err := store.stream.Info(ctx)
		if err != nil {
			return err
		}
		s.streamCreated = info.Created
		cons, err = s.ensureConsumer(ctx, cfg)
		return err
	}, engine.TransientJS)
	if err != nil {
		stop()
		return nil, unavailable(cctx, err, "trigger consumer "+name)
	}
	s.led = newLedger(cons.CachedInfo().AckFloor.Stream)
	cc, err := s.consume(cons, s.led)
	if err != nil {
		stop()
		return nil, unavailable(cctx, err, "trigger consume "+name)
	}
	s.cons, s.cc = cons, cc
	go s.supervise()
	return s, nil
}

// consume starts pulling cons's events into onMsg, with led as the
// ledger of their calls.
func (s *Subscription) consume(cons jetstream.Consumer, led *ledger) (jetstream.ConsumeContext, error) {
	// waited is when the callback last got a call slot after waiting for
	// one; only this consume's callback, which runs serially, touches it.
	var waited time.Time
	return cons.Consume(func(m jetstream.Msg) { s.onMsg(m, led, &waited) },
		jetstream.PullMaxMessages(s.opts.concurrency),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			s.e.Logger().Warn("state trigger consume error", "consumer", s.name, "function_id", s.trig.FunctionID, "error", err)
			select {
			case s.check <- struct{}{}:
			default:
			}
		}))
}

// Consumer is the durable consumer's name on the bucket's stream.
func (s *Subscription) Consumer() string { return s.name }

// Trigger is the trigger this subscription runs.
func (s *Subscription) Trigger() Trigger { return s.trig }

// Stop stops fetching events and cancels the calls in flight; events
// buffered or interrupted are handed back to the server at once (nak), so
// another replica (or the next start) gets them without waiting for the
// ack wait. Stop returns when no call of this subscription runs.
func (s *Subscription) Stop() {
	s.cancel()
	s.stopOnce.Do(s.stopConsuming)
	s.wg.Wait()
}

// Drain stops fetching events and lets the calls in flight, and the events
// already fetched, finish; when ctx ends first it stops as [Subscription.Stop]
// does and returns ctx's error.
func (s *Subscription) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.stopOnce.Do(s.stopConsuming)
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		s.cancel()
		return nil
	case <-ctx.Done():
		s.cancel()
		<-done
		return ctx.Err()
	}
}

// stopConsuming ends the supervisor, then the pull subscription, handing
// buffered messages to onMsg first, and waits until no further onMsg can
// start.
func (s *Subscription) stopConsuming() {
	close(s.quit)
	<-s.superDone
	s.cc.Drain()
	<-s.cc.Closed()
}

// Close is [Subscription.Drain].
func (s *Subscription) Close(ctx context.Context) error { return s.Drain(ctx) }

// Delete stops the subscription and deletes the durable consumer: events
// not yet delivered are dropped, and a later OnChange starts from the
// changes after it. Replicas of the trigger still running re-create the
// consumer (see [OnChange]): stop them first to remove the trigger.
func (s *Subscription) Delete(ctx context.Context) error {
	s.Stop()
	ctx, cancel := s.store.withTimeout(ctx)
	defer cancel()
	err := s.store.js.DeleteConsumer(ctx, kvStreamPrefix+s.store.opts.bucket, s.name)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return unavailable(ctx, err, "delete trigger consumer "+s.name)
	}
	return nil
}

// onMsg runs on the consume goroutine: it hands the event to a bounded
// goroutine so slow calls overlap, and pushes back when all are busy.
func (s *Subscription) onMsg(m jetstream.Msg, led *ledger, waited *time.Time) {
	select {
	case s.sem <- struct{}{}:
		// The events fetched behind one that waited for a slot below
		// waited as long in the client's buffer, their ack wait running
		// on the server: restart it as for that one, though a slot is
		// free by the time they get here.
		if time.Since(*waited) < s.opts.ackWait {
			_ = m.InProgress()
		}
	default:
		// Every call slot is busy: the event waits here, up to a call
		// timeout, while its ack wait runs on the server. Restart the ack
		// wait once it has a slot, so the server does not redeliver it
		// while its own call runs (a second, concurrent call).
		select {
		case s.sem <- struct{}{}:
		case <-s.base.Done():
			_ = m.Nak()
			return
		}
		*waited = time.Now()
		_ = m.InProgress()
	}
	s.wg.Add(1)
	go func() {
		defer func() {
			<-s.sem
			s.wg.Done()
		}()
		s.handle(m, led)
	}()
}

func (s *Subscription) handle(m jetstream.Msg, led *ledger) {
	log := s.e.Logger()
	md, err := m.Metadata()
	if err != nil {
		log.Error("state trigger message without metadata", "consumer", s.name, "error", err)
		_ = m.Term()
		return
	}
	seq := md.Sequence.Stream
	for {
		done, running := led.claim(seq)
		if done {
			// Its call succeeded here before (its ack was lost, or the
			// consumer was re-created below it): ack, do not call again.
			s.ack(m, md)
			return
		}
		if running == nil {
			break
		}
		// The same event, delivered again while its call runs here (a
		// re-created consumer): wait for that call's outcome.
		select {
		case <-running:
		case <-s.base.Done():
			_ = m.Nak()
			return
		}
	}
	finished := false
	defer func() { led.release(seq, finished) }()
	if s.base.Err() != nil {
		_ = m.Nak()
		return
	}
	ctx, cancel := context.WithTimeout(s.base, s.opts.callTimeout)
	defer cancel()
	ctx = s.e.Extract(ctx, m.Headers())
	ctx, span := s.e.Tracer().Start(ctx, "state trigger "+s.trig.FunctionID, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String(engine.AttrFunctionID, s.trig.FunctionID),
			attribute.String("iii.state.consumer", s.name),
			attribute.Int64("iii.state.revision", int64(seq)),
			attribute.Int64("iii.state.delivery", int64(md.NumDelivered)),
		))
	defer span.End()

	ev, err := s.store.change(ctx, m.Subject(), m.Headers(), m.Data(), seq)
	if errors.Is(err, errForeignKey) {
		// A key no state call could have written: it can never succeed.
		log.Warn("state trigger skips a key it cannot map", "consumer", s.name, "subject", m.Subject())
		finished = true
		_ = m.TermWithReason("iii: key is not a state key")
		return
	}
	if err == nil && ev == nil {
		finished = true
		_ = m.Ack() // nothing changed (a delete of a missing key)
		return
	}
	if err == nil {
		span.SetAttributes(attribute.String("iii.state.event_type", string(ev.EventType)))
		err = s.deliver(ctx, ev)
	}
	if err == nil {
		// The call succeeded: ack even if the subscription is stopping, so
		// the event is not run twice.
		finished = true
		s.ack(m, md)
		return
	}
	span.SetStatus(codes.Error, err.Error())
	if s.base.Err() != nil {
		_ = m.Nak() // stopping: hand it back at once
		return
	}
	delay := s.opts.backoff(md.NumDelivered)
	if s.opts.maxDeliver > 0 && md.NumDelivered >= uint64(s.opts.maxDeliver) {
		log.Error("state trigger gave up on an event", "consumer", s.name, "function_id", s.trig.FunctionID,
			"revision", seq, "deliveries", md.NumDelivered, "error", err)
		finished = true
		_ = m.TermWithReason("iii: max deliveries reached")
		return
	}
	log.Warn("state trigger call failed; will retry", "consumer", s.name, "function_id", s.trig.FunctionID,
		"revision", seq, "delivery", md.NumDelivered, "retry_in", delay, "error", err)
	_ = m.NakWithDelay(delay)
}

// ack acks an event whose call succeeded, waiting for the server's
// confirmation.
func (s *Subscription) ack(m jetstream.Msg, md *jetstream.MsgMetadata) {
	actx, acancel := context.WithTimeout(context.Background(), ackTimeout)
	aerr := m.DoubleAck(actx)
	acancel()
	if aerr != nil {
		s.e.Logger().Warn("state trigger ack failed; the event will be redelivered", "consumer", s.name, "revision", md.Sequence.Stream, "error", aerr)
	}
}

// ackTimeout bounds the wait for the server to confirm an ack.
const ackTimeout = 5 * time.Second

// errForeignKey marks a KV subject that does not map back to scope and key.
var errForeignKey = errors.New("state: not a state key")

// change builds the event of the KV message on subject at revision rev, or
// nil when there is nothing to report.
func (s *Store) change(ctx context.Context, subject string, h nats.Header, data []byte, rev uint64) (*Event, error) {
	kvkey, ok := strings.CutPrefix(subject, s.subjPrefix)
	if !ok {
		return nil, errForeignKey
	}
	scope, key, err := subjects.SplitStateKVKey(kvkey)
	if err != nil {
		return nil, errForeignKey
	}
	ev := &Event{Scope: scope, Key: key, Revision: rev, EventType: EventCreated}
	deleted := isDeleteMarker(h)
	if deleted {
		ev.EventType = EventDeleted
	} else {
		ev.NewValue = decodeValue(data)
	}

	if p := h.Get(HeaderPrevRevision); p != "" {
		prev, err := strconv.ParseUint(p, 10, 64)
		if err == nil {
			if prev == 0 {
				if deleted {
					return nil, nil
				}
				return ev, nil
			}
			if !deleted {
				ev.EventType = EventUpdated
			}
			ev.OldRevision = prev
			m, err := s.stream.GetMsg(ctx, prev)
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
				ev.OldValueUnavailable = true
			case err != nil:
				return nil, unavailable(ctx, err, "read old value")
			case m.Subject != subject || isDeleteMarker(m.Header):
				ev.OldValueUnavailable = true
			default:
				ev.OldValue = decodeValue(m.Data)
			}
			return ev, nil
		}
	}

	// A write by another client: find the latest older revision in the
	// key's history.
	hist, err := s.kv.History(ctx, kvkey)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, unavailable(ctx, err, "read key history")
	}
	var prev jetstream.KeyValueEntry
	for _, e := range hist {
		if e.Revision() < rev && (prev == nil || e.Revision() > prev.Revision()) {
			prev = e
		}
	}
	if prev != nil && prev.Operation() == jetstream.KeyValuePut {
		if !deleted {
			ev.EventType = EventUpdated
		}
		ev.OldRevision = prev.Revision()
		ev.OldValue = decodeValue(prev.Value())
	} else if deleted && h.Get(kvOpHeader) == kvOpPurge {
		ev.OldValueUnavailable = true
	}
	return ev, nil
}

// eventHeadroom is kept free of the max payload for the call's headers.
const eventHeadroom = 2 << 10

// encodeEvent encodes ev in the engine's codec. When it would not fit in
// one message it leaves out the old value, then the new one, and flags
// what it left out.
func encodeEvent(e *engine.Engine, ev *Event) ([]byte, error) {
	codec := e.Codec()
	out := *ev
	limit := int(e.Conn().MaxPayload()) - eventHeadroom
	for step := 0; ; step++ {
		body, err := codec.Marshal(out)
		if err != nil {
			return nil, wire.Wrap(wire.CodeInternal, err, "state event does not encode")
		}
		if len(body) <= limit {
			return body, nil
		}
		switch step {
		case 0:
			out.OldValue, out.OldValueUnavailable = nil, out.OldValue != nil || out.OldValueUnavailable
		case 1:
			out.NewValue, out.NewValueUnavailable = nil, true
		default:
			return nil, wire.Errorf(wire.CodeInternal, "state event of %d bytes exceeds the max payload", len(body))
		}
	}
}
