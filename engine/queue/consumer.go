package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Span attributes of a delivery, besides engine.AttrFunctionID.
const (
	AttrSubject  = "messaging.destination.name"
	AttrDelivery = "iii.queue.delivery"
)

// dlqPublishTimeout bounds the dead-letter publish and the ack after it.
const dlqPublishTimeout = 10 * time.Second

// Consumer runs the calls of one durable JetStream consumer: for every
// message it calls a function, acks on success, naks with backoff on a
// retryable error, and dead-letters (or, without a dead-letter subject,
// terminates) the message when its deliveries are used up. Any number of
// Consumers in any number of processes may run on one JetStream consumer;
// they share its messages.
type Consumer struct {
	e       *engine.Engine
	opts    options
	queue   string // dead-letter target; "" when attached without a queue
	name    string // JetStream consumer name, for logs
	hbEvery time.Duration

	// stream and cfg are the JetStream consumer's, to re-create it; ensure,
	// set by Consume, ensures the queue's streams and consumer again (nil
	// when attached: see supervise).
	stream string
	cfg    jetstream.ConsumerConfig
	ensure func(ctx context.Context) (jetstream.Consumer, error)
	// cons and created (when cons was created) belong to the supervisor.
	cons    jetstream.Consumer
	created time.Time
	// nudge asks the supervisor to look at the consumer now (a consume
	// error); checkEvery is how often it looks anyway.
	nudge      chan struct{}
	checkEvery time.Duration
	// quit closes on Stop or Drain: the supervisor re-creates nothing after.
	quit     chan struct{}
	quitOnce sync.Once

	sem chan struct{}

	// base is the parent of every call's context; Stop cancels it.
	base      context.Context
	cancel    context.CancelFunc
	stopped   chan struct{}
	stopOnce  sync.Once
	drainOnce sync.Once
	done      chan struct{}

	mu       sync.Mutex
	cc       jetstream.ConsumeContext // the running consume; replaced on recovery
	feed     *feed                    // cc's
	quitting bool                     // quit is closing; no new cc is installed
	finished bool                     // no more messages will be dispatched
	wg       sync.WaitGroup

	handled, retried, deadLettered, dropped, abandoned atomic.Int64

	// verdicts holds the error of each message whose dead letter could
	// not be stored, for its redelivery.
	verdicts verdicts

	// pending is the consumer's backlog as the last delivery reported it
	// (iii.queue.pending); redeliveries counts deliveries after the first.
	pending      atomic.Int64
	redeliveries metric.Int64Counter
	gauge        metric.Registration
}

// Counters are what one [Consumer] did with the messages it received.
type Counters struct {
	// Handled messages were acked after their call succeeded.
	Handled int64 `json:"handled"`
	// Retried deliveries were nak'ed with a backoff delay.
	Retried int64 `json:"retried"`
	// DeadLettered messages were published to the dead-letter subject and
	// removed from the queue.
	DeadLettered int64 `json:"dead_lettered"`
	// Dropped messages used up their deliveries on a consumer without a
	// dead-letter subject ([Attach]) and were terminated.
	Dropped int64 `json:"dropped"`
	// Abandoned deliveries were left unanswered by [Consumer.Stop];
	// JetStream redelivers them after AckWait.
	Abandoned int64 `json:"abandoned"`
}

// Consume starts a consumer of the durable queue name: the durable
// JetStream consumer subjects.QueueConsumer(name) on stream III_QUEUE,
// filtered on the queue's subject, is created or updated (explicit ack,
// AckWait from [WithAckWait]) and its messages are run. Every process that
// calls Consume for one queue binds the same durable consumer, so they
// share the work and each message runs once at a time. ctx bounds the
// setup only; the consumer runs until [Consumer.Stop] or
// [Consumer.Close].
//
// An invalid queue name is an invalid_payload *wire.Error; JetStream
// failures are unavailable.
func Consume(ctx context.Context, e *engine.Engine, name string, opts ...Option) (*Consumer, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	subj, err := subjects.QueueSubject(name)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	if _, err := e.EnsureStream(ctx, engine.QueueStreamConfig(e.Replicas())); err != nil {
		return nil, err
	}
	if _, err := e.EnsureStream(ctx, engine.DLQStreamConfig(e.Replicas())); err != nil {
		return nil, err
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       subjects.QueueConsumer(name),
		Description:   "iii durable queue " + name,
		FilterSubject: subj,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.consumerAckWait(),
		// Deliveries are counted here, not by JetStream: a message that
		// used them up must be dead-lettered, never parked in the stream.
		MaxDeliver: -1,
	}
	cons, err := e.EnsureConsumer(ctx, subjects.QueueStream, cfg)
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "consumer of queue %q", name)
	}
	c, err := start(e, cons, o, name)
	if err != nil {
		return nil, err
	}
	// A lost queue consumer (deleted, or with its stream) is re-created:
	// nothing else deletes it, and the queue's work must go on.
	c.ensure = func(ctx context.Context) (jetstream.Consumer, error) {
		for _, sc := range []jetstream.StreamConfig{engine.QueueStreamConfig(e.Replicas()), engine.DLQStreamConfig(e.Replicas())} {
			if _, err := e.EnsureStream(ctx, sc); err != nil {
				return nil, err
			}
		}
		return e.EnsureConsumer(ctx, subjects.QueueStream, cfg)
	}
	go c.supervise()
	return c, nil
}

// Attach runs the calls of an existing JetStream consumer cons, which must
// use explicit acks: each message calls the function named by [WithFunction]
// or, without it, by the message's Iii-Function-Id header, with the same
// retries as a queue. Messages that use up their deliveries are terminated
// and logged, since there is no queue to dead-letter them to. Durable
// topics run on Attach. The heartbeat interval follows cons's AckWait.
func Attach(e *engine.Engine, cons jetstream.Consumer, opts ...Option) (*Consumer, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if cons == nil {
		return nil, fmt.Errorf("%w: nil consumer", engine.ErrInvalidOption)
	}
	c, err := start(e, cons, o, "")
	if err != nil {
		return nil, err
	}
	go c.supervise()
	return c, nil
}

func start(e *engine.Engine, cons jetstream.Consumer, o options, queue string) (*Consumer, error) {
	info := cons.CachedInfo()
	if info.Config.AckPolicy != jetstream.AckExplicitPolicy {
		return nil, fmt.Errorf("%w: consumer %q must use explicit acks", engine.ErrInvalidOption, info.Name)
	}
	ackWait := info.Config.AckWait
	if ackWait <= 0 {
		ackWait = 30 * time.Second // the server's default
	}
	c := &Consumer{
		e:          e,
		opts:       o,
		queue:      queue,
		name:       info.Name,
		hbEvery:    ackWait / 3,
		stream:     info.Stream,
		cfg:        info.Config,
		cons:       cons,
		created:    info.Created,
		nudge:      make(chan struct{}, 1),
		checkEvery: o.checkEvery,
		quit:       make(chan struct{}),
		sem:        make(chan struct{}, o.concurrency),
		stopped:    make(chan struct{}),
		done:       make(chan struct{}),
	}
	c.base, c.cancel = context.WithCancel(context.Background())
	if err := c.instrument(); err != nil {
		c.cancel()
		return nil, err
	}
	cc, f, err := c.consume(cons)
	if err != nil {
		c.cancel()
		if c.gauge != nil {
			_ = c.gauge.Unregister()
		}
		return nil, wire.Wrap(wire.CodeUnavailable, err, "consume %q", info.Name)
	}
	c.cc, c.feed = cc, f
	return c, nil
}

// feed is what one consume's callback keeps; nats.go calls it serially,
// but a consume replaced after a loss may still be running its last call.
type feed struct {
	// lastBlocked is when the callback last waited for a free slot.
	lastBlocked time.Time
	// retired closes when the supervisor replaced the consume: a message
	// still waiting for a slot is left to JetStream.
	retired chan struct{}
}

// consume runs cons's messages through receive. A consume error makes the
// supervisor look at the consumer at once: a consumer deleted with its
// stream while no pull request was waiting is never told, and nats.go
// only reports missed heartbeats and unanswered pulls.
func (c *Consumer) consume(cons jetstream.Consumer) (jetstream.ConsumeContext, *feed, error) {
	f := &feed{retired: make(chan struct{})}
	cc, err := cons.Consume(func(msg jetstream.Msg) { c.receive(f, msg) },
		jetstream.PullMaxMessages(c.opts.concurrency),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			c.e.Logger().Warn("queue consumer error", "consumer", c.name, "error", err)
			select {
			case c.nudge <- struct{}{}:
			default:
			}
		}))
	return cc, f, err
}

// finish ends the Consumer once its last consume closed: it waits for the
// calls in flight and closes done.
func (c *Consumer) finish() {
	c.mu.Lock()
	c.finished = true
	c.mu.Unlock()
	c.wg.Wait()
	c.cancel()
	if c.gauge != nil {
		_ = c.gauge.Unregister()
	}
	close(c.done)
}

// receive is the pull subscription's callback. nats.go calls it serially,
// so a call runs in its own goroutine; the semaphore bounds them and holds
// further messages in the small pull buffer.
func (c *Consumer) receive(f *feed, msg jetstream.Msg) {
	hb := startHeartbeat(msg, c.hbEvery)
	if !f.lastBlocked.IsZero() && time.Since(f.lastBlocked) < 3*c.hbEvery {
		// The callback was recently blocked, so this message may have sat
		// in the pull buffer for a while: reset its AckWait now.
		_ = msg.InProgress()
	}
	select {
	case c.sem <- struct{}{}:
	default:
		f.lastBlocked = time.Now()
		select {
		case c.sem <- struct{}{}:
		case <-c.stopped:
			hb.stop()
			c.abandoned.Add(1)
			return
		case <-f.retired:
			hb.stop()
			c.abandoned.Add(1)
			return
		}
		f.lastBlocked = time.Now()
	}
	c.mu.Lock()
	if c.finished {
		c.mu.Unlock()
		<-c.sem
		hb.stop()
		c.abandoned.Add(1)
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer func() {
			hb.stop()
			<-c.sem
			c.wg.Done()
		}()
		c.process(msg)
	}()
}

// process runs one delivery to its end: ack, nak with delay, dead-letter,
// or — when the consumer was stopped meanwhile — nothing at all.
func (c *Consumer) process(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		c.e.Logger().Error("queue message without JetStream metadata", "consumer", c.name, "error", err)
		_ = msg.Term()
		c.dropped.Add(1)
		return
	}
	c.pending.Store(int64(md.NumPending))
	if md.NumDelivered > 1 {
		c.redeliveries.Add(c.base, 1, metric.WithAttributes(attribute.String("consumer", c.name)))
	}
	hdr := msg.Headers()
	fnID := c.opts.function
	if fnID == "" {
		fnID = hdr.Get(engine.HeaderFunctionID)
	}
	if we := c.verdicts.get(md.Sequence.Stream); we != nil {
		// This consumer ended the message and only its dead letter
		// failed: store it now, with the real error, without calling the
		// function again.
		c.final(msg, md, fnID, we)
		return
	}
	if md.NumDelivered > uint64(c.opts.maxDeliver) {
		// The last delivery did not answer, or answered in a process that
		// could not store the dead letter: its error is not known here.
		c.final(msg, md, fnID, wire.Errorf(wire.CodeTimeout,
			"delivery %d exceeds max deliver %d and the previous delivery's outcome was not recorded: its consumer stopped or crashed, the ack wait ran out, or another process could not store its dead letter",
			md.NumDelivered, c.opts.maxDeliver))
		return
	}
	if err := subjects.ValidateFunctionID(fnID); err != nil {
		c.final(msg, md, fnID, wire.Wrap(wire.CodeInvalidPayload, err, "message names no valid function in header %s", engine.HeaderFunctionID))
		return
	}

	ctx := c.e.Extract(c.base, hdr)
	ctx, span := c.e.Tracer().Start(ctx, "process "+msg.Subject(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String(engine.AttrFunctionID, fnID),
			attribute.String(AttrSubject, msg.Subject()),
			attribute.Int64(AttrDelivery, int64(md.NumDelivered)),
		))
	defer span.End()
	callCtx, cancel := context.WithTimeout(ctx, c.opts.callTimeout)
	_, _, err = c.e.TriggerRaw(callCtx, fnID, msg.Data(), wire.ForContentType(hdr.Get(wire.HeaderContentType)))
	cancel()
	if err == nil {
		if aerr := msg.Ack(); aerr != nil {
			c.e.Logger().Warn("queue ack failed; the message will run again", "consumer", c.name, "function_id", fnID, "error", aerr)
		}
		c.handled.Add(1)
		return
	}
	if c.base.Err() != nil {
		// Stopped mid-call: leave the message to JetStream, exactly as a
		// crashed process would.
		c.abandoned.Add(1)
		return
	}
	we := wire.From(err)
	span.SetStatus(codes.Error, string(we.Code))
	span.RecordError(we)
	if c.opts.nonRetryable[we.Code] || md.NumDelivered >= uint64(c.opts.maxDeliver) {
		c.final(msg, md, fnID, we)
		return
	}
	delay := backoff(md.NumDelivered, c.opts.backoffBase, c.opts.backoffMax, c.opts.jitter)
	if nerr := msg.NakWithDelay(delay); nerr != nil {
		c.e.Logger().Warn("queue nak failed; the message comes back after ack wait", "consumer", c.name, "error", nerr)
	}
	c.retried.Add(1)
	c.e.Logger().Debug("queue call failed; retrying", "consumer", c.name, "function_id", fnID,
		"delivery", md.NumDelivered, "delay", delay, "code", we.Code, "error", we.Message)
}

// final ends a message that will not be tried again: dead-letter it (queue)
// or terminate it (attached consumer).
func (c *Consumer) final(msg jetstream.Msg, md *jetstream.MsgMetadata, fnID string, we *wire.Error) {
	log := c.e.Logger()
	if c.queue == "" {
		if err := msg.TermWithReason("iii: deliveries used up: " + string(we.Code)); err != nil {
			log.Warn("queue term failed", "consumer", c.name, "error", err)
		}
		c.dropped.Add(1)
		log.Error("message dropped after its last delivery", "consumer", c.name, "function_id", fnID,
			"deliveries", md.NumDelivered, "code", we.Code, "error", we.Message)
		return
	}
	ctx, cancel := context.WithTimeout(c.base, dlqPublishTimeout)
	defer cancel()
	out := deadLetterMsg(c.queue, msg.Data(), msg.Headers(), md, fnID, we, time.Now())
	// body, when not nil, is kept in DLQBodiesBucket: the dead letter
	// does not fit the max payload with it, even without its error
	// message. III_QUEUE is a work queue, so the message cannot stay
	// there once ended (a term removes it as an ack does), and retrying
	// the publish would never end.
	var body []byte
	if max := c.e.Conn().MaxPayload(); !fitDeadLetter(out, max) {
		body = out.Data
		if !bodyElsewhere(out, we.Message, bodyObjectName(c.queue, md.Sequence.Stream), max) {
			body = nil
			log.Error("dead letter does not fit the server's max payload even without its body; the message stays on its queue",
				"queue", c.queue, "queue_seq", md.Sequence.Stream, "size", wire.HeaderSize(out.Header))
		}
	}
	// An earlier delivery may have stored the dead letter and died before
	// its ack. Its Nats-Msg-Id dedupes only within the DLQ stream's
	// duplicate window, which this redelivery may come after: look.
	stored := false
	if md.NumDelivered > 1 {
		var err error
		if stored, err = hasDeadLetter(ctx, c.e.JetStream(), c.queue, md); err != nil {
			log.Warn("dead-letter lookup failed; publishing, deduplicated only within the duplicate window", "queue", c.queue, "error", err)
		}
	}
	if stored {
		log.Info("message already dead-lettered by an earlier delivery; removing it from its queue", "queue", c.queue, "queue_seq", md.Sequence.Stream)
	} else if err := c.storeDeadLetter(ctx, out, body); err != nil {
		if c.base.Err() != nil {
			c.abandoned.Add(1)
			return
		}
		// The original stays; it comes back and is dead-lettered then,
		// with this error if it comes back here.
		c.verdicts.put(md.Sequence.Stream, we)
		delay := backoff(md.NumDelivered, c.opts.backoffBase, c.opts.backoffMax, c.opts.jitter)
		_ = msg.NakWithDelay(delay)
		c.retried.Add(1)
		log.Error("dead-letter publish failed; the message stays on its queue", "queue", c.queue, "error", err)
		return
	}
	// Removing the original only after JetStream stored the dead letter
	// means a crash here leaves both; the redelivered original is
	// dead-lettered again under the same Nats-Msg-Id and deduplicated.
	if err := msg.DoubleAck(ctx); err != nil {
		log.Warn("ack after dead-letter failed; the message will be dead-lettered again and deduplicated", "queue", c.queue, "error", err)
	}
	c.verdicts.forget(md.Sequence.Stream)
	c.deadLettered.Add(1)
	log.Warn("message dead-lettered", "queue", c.queue, "function_id", fnID,
		"deliveries", md.NumDelivered, "code", we.Code, "error", we.Message)
	if body != nil {
		log.Warn("dead letter too large for its body; the body is kept in the object store", "queue", c.queue,
			"queue_seq", md.Sequence.Stream, "bucket", DLQBodiesBucket, "object", out.Header.Get(HeaderBodyObject), "size", len(body))
	}
}

// storeDeadLetter publishes dead letter out, after storing body, when not
// nil, as the object its headers name.
func (c *Consumer) storeDeadLetter(ctx context.Context, out *nats.Msg, body []byte) error {
	if body != nil {
		if err := keepBody(ctx, c.e, out.Header.Get(HeaderBodyObject), body, out.Header); err != nil {
			return fmt.Errorf("keep the body in object store %s: %w", DLQBodiesBucket, err)
		}
	}
	_, err := c.e.JetStream().PublishMsg(ctx, out)
	return err
}

// Counters returns what this Consumer has done so far.
func (c *Consumer) Counters() Counters {
	return Counters{
		Handled:      c.handled.Load(),
		Retried:      c.retried.Load(),
		DeadLettered: c.deadLettered.Load(),
		Dropped:      c.dropped.Load(),
		Abandoned:    c.abandoned.Load(),
	}
}

// Name is the JetStream consumer's name.
func (c *Consumer) Name() string { return c.name }

// Stop stops at once, as a crash would: no more messages are pulled,
// buffered messages are dropped, and calls in flight have their contexts
// cancelled and their messages left unanswered, so JetStream redelivers
// them after AckWait. Use [Consumer.Close] to shut down gracefully.
func (c *Consumer) Stop() {
	c.stopOnce.Do(func() {
		close(c.stopped)
		c.cancel()
		c.quitNow().Stop()
	})
}

// Drain starts a graceful shutdown and returns: no more messages are
// pulled, and those already buffered and in flight run to their end.
// [Consumer.Closed] reports when it is over.
func (c *Consumer) Drain() {
	c.drainOnce.Do(func() { c.quitNow().Drain() })
}

// quitNow ends supervision and returns the consume to stop or drain.
func (c *Consumer) quitNow() jetstream.ConsumeContext {
	c.mu.Lock()
	c.quitting = true
	cc := c.cc
	c.mu.Unlock()
	c.quitOnce.Do(func() { close(c.quit) })
	return cc
}

// Closed is closed once the consumer has stopped and no call is in flight.
func (c *Consumer) Closed() <-chan struct{} { return c.done }

// Close drains the consumer and waits until it is closed or ctx ends; then
// it stops it (see [Consumer.Stop]) and returns an error wrapping
// [ErrNotDrained] and ctx's error.
func (c *Consumer) Close(ctx context.Context) error {
	c.Drain()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
	}
	c.Stop()
	<-c.done
	return fmt.Errorf("%w: consumer %s: %w", ErrNotDrained, c.name, ctx.Err())
}

// maxVerdicts bounds the errors a [Consumer] keeps for redeliveries.
const maxVerdicts = 4096

// verdicts keeps, by queue stream sequence, the error of each message a
// Consumer ended (final error or deliveries used up) but could not
// dead-letter because the publish to III_DLQ failed. JetStream cannot
// change a message's headers on nak, so the error stays here; the
// redelivery, if it comes back to the same Consumer, is dead-lettered
// with it, without another call. One that goes to another Consumer or
// process, or that was evicted past maxVerdicts (oldest first), is
// dead-lettered as timeout with an outcome "not recorded".
type verdicts struct {
	mu sync.Mutex
	m  map[uint64]verdict
	n  uint64 // insertions, to evict the oldest
}

type verdict struct {
	err *wire.Error
	n   uint64
}

func (v *verdicts) get(seq uint64) *wire.Error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.m[seq].err
}

// put keeps we for seq, cut to what a dead letter keeps of it.
func (v *verdicts) put(seq uint64, we *wire.Error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[uint64]verdict{}
	}
	if _, ok := v.m[seq]; !ok && len(v.m) >= maxVerdicts {
		oldest, min := uint64(0), uint64(1<<64-1)
		for s, x := range v.m {
			if x.n < min {
				oldest, min = s, x.n
			}
		}
		delete(v.m, oldest)
	}
	v.n++
	v.m[seq] = verdict{err: &wire.Error{Code: we.Code, Message: headerValue(we.Message), Retryable: we.Retryable}, n: v.n}
}

func (v *verdicts) forget(seq uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.m, seq)
}

// heartbeat sends InProgress every interval while a message is held, so
// that a call longer than AckWait keeps its message.
type heartbeat struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

func startHeartbeat(msg jetstream.Msg, every time.Duration) *heartbeat {
	h := &heartbeat{}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.t = time.AfterFunc(every, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.stopped {
			return
		}
		_ = msg.InProgress()
		h.t.Reset(every)
	})
	return h
}

func (h *heartbeat) stop() {
	h.mu.Lock()
	h.stopped = true
	h.t.Stop()
	h.mu.Unlock()
}

// instrument makes the consumer's metrics on the engine's meter: its
// backlog (iii.queue.pending, read at collection) and its redeliveries.
func (c *Consumer) instrument() error {
	m := c.e.Meter()
	var err error
	if c.redeliveries, err = m.Int64Counter("iii.queue.redeliveries",
		metric.WithDescription("Durable queue and topic deliveries after the first (retries and redeliveries after a lost ack), by consumer.")); err != nil {
		return err
	}
	pending, err := m.Int64ObservableGauge("iii.queue.pending",
		metric.WithDescription("Messages waiting for a durable queue or topic consumer, as its last delivery reported."))
	if err != nil {
		return err
	}
	c.gauge, err = m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		ob.ObserveInt64(pending, c.pending.Load(), metric.WithAttributes(attribute.String("consumer", c.name)))
		return nil
	}, pending)
	return err
}
