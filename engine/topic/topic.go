package topic

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/queue"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// maxConsumerName is JetStream's limit on consumer names.
const maxConsumerName = 255

// ConsumerName is the durable consumer name of functionID's subscription
// to topic: "topic-<topic>~" followed by subjects.ConsumerName's "_"-joined
// encoding of the function id. Topic names never contain '~', so the first
// '~' ends the topic and the name is injective. Replicas of one function
// derive the same name and share the consumer. Names longer than
// JetStream's 255 bytes are refused.
func ConsumerName(topic, functionID string) (string, error) {
	if err := subjects.ValidateID("topic", topic); err != nil {
		return "", err
	}
	name, err := subjects.ConsumerName("topic-"+topic+"~", functionID)
	if err != nil {
		return "", err
	}
	if len(name) > maxConsumerName {
		return "", fmt.Errorf("%w: consumer name for topic %q and function %q is longer than %d bytes",
			subjects.ErrInvalidFunctionID, topic, functionID, maxConsumerName)
	}
	return name, nil
}

// Publish publishes data, encoded in the engine's codec, on durable topic
// name (stream III_TOPIC, subject "iii.topic.<name>"). It returns once
// JetStream stored the message; every function subscribed at that moment
// gets it, including subscribers whose processes are down. With no
// subscriber the message is not kept (interest retention). A payload too
// large for a subscriber's call (see the package doc) is invalid_payload.
func Publish(ctx context.Context, e *engine.Engine, name string, data any) error {
	body, err := engine.Encode(e.Codec(), data)
	if err != nil {
		return err
	}
	_, err = publish(ctx, e, name, body, e.Codec(), "")
	return err
}

// publish stores body on topic name; a dedupID (validated by the caller)
// becomes the message's Nats-Msg-Id, scoped to the topic.
func publish(ctx context.Context, e *engine.Engine, name string, body []byte, codec wire.Codec, dedupID string) (*jetstream.PubAck, error) {
	subj, err := subjects.TopicSubject(name)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	msg, err := newMsg(ctx, e, subj, body, codec)
	if err != nil {
		return nil, err
	}
	if dedupID != "" {
		// ':' ends the topic, whose names never hold one: with '-' (which
		// both may hold), topic "a-b" id "c" was topic "a" id "b-c".
		msg.Header.Set(nats.MsgIdHdr, "iii-topic-"+name+":"+dedupID)
	}
	// A subscriber is called with the message's body and headers plus a
	// timeout header (and a trace parent when the message has none): a
	// message the server stores must fit that call too, or every delivery
	// fails as invalid_payload and the message is dropped.
	if err := e.CheckStoredCall(msg); err != nil {
		return nil, err
	}
	if _, err := e.EnsureStream(ctx, engine.TopicStreamConfig(e.Replicas())); err != nil {
		return nil, err
	}
	ack, err := e.JetStream().PublishMsg(ctx, msg)
	if e.ForgetStream(subjects.TopicStream, err) {
		// The stream was deleted under this engine: nothing stored the
		// message, so it is sent again once the stream is there again.
		if _, err = e.EnsureStream(ctx, engine.TopicStreamConfig(e.Replicas())); err == nil {
			ack, err = e.JetStream().PublishMsg(ctx, msg)
		}
	}
	if err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			return nil, wire.FromNATS(err)
		}
		return nil, wire.Wrap(wire.CodeUnavailable, err, "publish on topic %q", name)
	}
	return ack, nil
}

// newMsg builds a topic message: body in codec, Content-Type and trace
// headers; an oversized body is invalid_payload.
func newMsg(ctx context.Context, e *engine.Engine, subj string, body []byte, codec wire.Codec) (*nats.Msg, error) {
	if max := e.Conn().MaxPayload(); int64(len(body)) > max {
		return nil, wire.Errorf(wire.CodeInvalidPayload, "payload of %d bytes exceeds the server's max payload of %d bytes", len(body), max).
			WithDetails(map[string]any{"max_payload": max, "size": len(body)})
	}
	msg := &nats.Msg{Subject: subj, Data: body, Header: make(nats.Header, 4)}
	msg.Header.Set(wire.HeaderContentType, codec.ContentType())
	e.Inject(ctx, msg.Header)
	return msg, nil
}

// Subscription delivers a durable topic's messages to one function.
type Subscription struct {
	c          *queue.Consumer
	topic      string
	functionID string
}

// Subscribe subscribes function functionID to durable topic name: the
// durable consumer [ConsumerName](name, functionID) on stream III_TOPIC is
// created (or bound, if it exists) and each of its messages calls the
// function through [engine.Engine.TriggerRaw] with the message's codec and
// trace context, acking on success and retrying with backoff like a queue
// (see package queue); a message that uses up its deliveries is terminated
// and logged. Every subscribing function gets every message; replicas of
// one function — Subscribe called with the same name and function id in
// several processes — share the consumer, so each message runs once per
// function. A new subscription starts at the next message published
// ([WithDeliverAll] to start at the oldest kept). ctx bounds the setup,
// which is retried while JetStream is unavailable for a moment (no answer,
// no responders, a cluster electing a leader); a configuration JetStream
// refuses fails at once.
func Subscribe(ctx context.Context, e *engine.Engine, name, functionID string, opts ...Option) (*Subscription, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	qopts := append(o.q, queue.WithFunction(functionID))
	subj, err := subjects.TopicSubject(name)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	cname, err := ConsumerName(name, functionID)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	if err := queue.ValidateOptions(qopts...); err != nil {
		return nil, err
	}
	if _, err := e.EnsureStream(ctx, engine.TopicStreamConfig(e.Replicas())); err != nil {
		return nil, err
	}
	ackWait := o.ackWait
	if ackWait == 0 {
		call := o.callTimeout
		if call == 0 {
			call = engine.DefaultTimeout
		}
		ackWait = call + queue.AckMargin
	}
	deliver := jetstream.DeliverNewPolicy
	if o.deliverAll {
		deliver = jetstream.DeliverAllPolicy
	}
	ccfg := jetstream.ConsumerConfig{
		Durable:       cname,
		Description:   "iii topic " + name + " → " + functionID,
		FilterSubject: subj,
		DeliverPolicy: deliver,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1, // counted by package queue
	}
	cons, err := ensureConsumer(ctx, e.JetStream(), ccfg)
	if e.ForgetStream(subjects.TopicStream, err) {
		// III_TOPIC was deleted under this engine: create it again.
		if _, err = e.EnsureStream(ctx, engine.TopicStreamConfig(e.Replicas())); err == nil {
			cons, err = ensureConsumer(ctx, e.JetStream(), ccfg)
		}
	}
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "subscribe %q to topic %q", functionID, name)
	}
	c, err := queue.Attach(e, cons, qopts...)
	if err != nil {
		return nil, err
	}
	return &Subscription{c: c, topic: name, functionID: functionID}, nil
}

// setupAttempt bounds one attempt to find or create a subscription's
// consumer: a request sent while the stream elects a leader is never
// answered, and only the next attempt reaches the new one.
const setupAttempt = 5 * time.Second

// ensureConsumer creates the consumer or binds the existing one, updating
// its AckWait if it differs. The deliver policy of an existing consumer is
// kept: JetStream cannot change it, and its position is what matters. It
// tries again while JetStream is unavailable for a moment (no answer, no
// responders, a cluster electing), until ctx ends (engine.DefaultTimeout
// without a deadline); other errors are returned at once.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, engine.DefaultTimeout)
		defer cancel()
	}
	var cons jetstream.Consumer
	err := engine.Retry(ctx, setupAttempt, func(ctx context.Context) error {
		var err error
		cons, err = bindOrCreate(ctx, js, cfg)
		return err
	}, engine.TransientJS)
	return cons, err
}

// bindOrCreate is one attempt of ensureConsumer.
func bindOrCreate(ctx context.Context, js jetstream.JetStream, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	for range 2 {
		cons, err := js.Consumer(ctx, subjects.TopicStream, cfg.Durable)
		if err == nil {
			cur := cons.CachedInfo().Config
			if cur.AckWait == cfg.AckWait && cur.AckPolicy == cfg.AckPolicy && cur.FilterSubject == cfg.FilterSubject {
				return cons, nil
			}
			cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = cur.DeliverPolicy, cur.OptStartSeq, cur.OptStartTime
			return js.UpdateConsumer(ctx, subjects.TopicStream, cfg)
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, err
		}
		cons, err = js.CreateConsumer(ctx, subjects.TopicStream, cfg)
		if !errors.Is(err, jetstream.ErrConsumerExists) {
			return cons, err
		}
		// Another replica created it meanwhile: bind that one.
	}
	return nil, jetstream.ErrConsumerExists
}

// Unsubscribe deletes the durable consumer of functionID's subscription to
// topic name, so that the topic stops keeping messages for it. Running
// Subscriptions of it stop receiving. A subscription that does not exist
// is not_found.
func Unsubscribe(ctx context.Context, e *engine.Engine, name, functionID string) error {
	cname, err := ConsumerName(name, functionID)
	if err != nil {
		return wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	err = e.JetStream().DeleteConsumer(ctx, subjects.TopicStream, cname)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		return wire.Errorf(wire.CodeNotFound, "function %q is not subscribed to topic %q", functionID, name)
	case err != nil:
		return wire.Wrap(wire.CodeUnavailable, err, "unsubscribe %q from topic %q", functionID, name)
	}
	return nil
}

// Topic is the subscription's topic name.
func (s *Subscription) Topic() string { return s.topic }

// FunctionID is the subscribing function.
func (s *Subscription) FunctionID() string { return s.functionID }

// Name is the durable consumer's name.
func (s *Subscription) Name() string { return s.c.Name() }

// Counters reports what this Subscription did with its messages.
func (s *Subscription) Counters() queue.Counters { return s.c.Counters() }

// Stop stops at once, like a crash; see [queue.Consumer.Stop]. The durable
// consumer stays, so the messages published meanwhile wait for the next
// Subscribe.
func (s *Subscription) Stop() { s.c.Stop() }

// Drain starts a graceful stop; see [queue.Consumer.Drain].
func (s *Subscription) Drain() { s.c.Drain() }

// Closed is closed once the subscription stopped and no call is in flight.
func (s *Subscription) Closed() <-chan struct{} { return s.c.Closed() }

// Close drains the subscription, waiting until ctx ends; see
// [queue.Consumer.Close].
func (s *Subscription) Close(ctx context.Context) error { return s.c.Close(ctx) }
