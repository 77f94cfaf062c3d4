package topic

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// flushTimeout bounds the round trip that confirms a plain subscription
// when the caller's context has no deadline.
const flushTimeout = 5 * time.Second

// PublishPlain publishes data, encoded in the engine's codec, on plain
// topic name (core NATS subject "iii.pubsub.<name>"). Nothing is stored:
// only functions subscribed right now get it, at most once.
func PublishPlain(ctx context.Context, e *engine.Engine, name string, data any) error {
	subj, err := subjects.PubSubSubject(name)
	if err != nil {
		return wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	body, err := engine.Encode(e.Codec(), data)
	if err != nil {
		return err
	}
	msg, err := newMsg(ctx, e, subj, body, e.Codec())
	if err != nil {
		return err
	}
	if err := e.Conn().PublishMsg(msg); err != nil {
		return wire.FromNATS(err)
	}
	return nil
}

// PlainSubscription forwards a plain topic's messages to one function.
type PlainSubscription struct {
	sub  *nats.Subscription
	done chan struct{}
}

// SubscribePlain subscribes function functionID to plain topic name. Each
// message is forwarded to the function as a void call (a publish on its
// subject with no reply; body, Content-Type and trace headers unchanged):
// fire and forget, no retries, no errors seen. Subscriptions sit in a
// queue group per function ([ConsumerName]), so, as with durable topics,
// every subscribing function gets every message and replicas of one
// function share them. The subscription is registered with the server
// when SubscribePlain returns.
func SubscribePlain(ctx context.Context, e *engine.Engine, name, functionID string) (*PlainSubscription, error) {
	subj, err := subjects.PubSubSubject(name)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	target, err := subjects.FunctionSubject(functionID)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	group, err := ConsumerName(name, functionID)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	nc := e.Conn()
	log := e.Logger()
	sub, err := nc.QueueSubscribe(subj, group, func(m *nats.Msg) {
		if err := nc.PublishMsg(&nats.Msg{Subject: target, Data: m.Data, Header: m.Header}); err != nil {
			log.Warn("plain topic forward failed", "topic", name, "function_id", functionID, "error", err)
		}
	})
	if err != nil {
		return nil, wire.FromNATS(err)
	}
	ps := &PlainSubscription{sub: sub, done: make(chan struct{})}
	sub.SetClosedHandler(func(string) { close(ps.done) })
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, flushTimeout)
		defer cancel()
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, wire.FromNATS(err)
	}
	return ps, nil
}

// Stop unsubscribes at once; messages not yet forwarded are dropped.
func (p *PlainSubscription) Stop() { _ = p.sub.Unsubscribe() }

// Closed is closed once the subscription is gone.
func (p *PlainSubscription) Closed() <-chan struct{} { return p.done }

// Close drains the subscription (forwards what it already received) and
// waits until it is gone or ctx ends.
func (p *PlainSubscription) Close(ctx context.Context) error {
	if err := p.sub.Drain(); err != nil && p.sub.IsValid() {
		return wire.FromNATS(err)
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		p.Stop()
		return fmt.Errorf("%w: plain subscription: %w", ErrNotDrained, ctx.Err())
	}
}
