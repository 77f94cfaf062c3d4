package queue

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
)

const (
	// setupAttempt bounds one request about the consumer or its stream: a
	// request sent while the stream elects a leader is never answered.
	setupAttempt = 5 * time.Second
	// defaultCheckEvery is how often a running Consumer asks for its
	// JetStream consumer's state, to notice a deletion nobody reported.
	defaultCheckEvery = engine.ConsumerCheckEvery
)

// supervise watches the consume until Stop or Drain. When the JetStream
// consumer is gone, or the consume ended by itself, it re-creates the
// consumer and consumes again, with backoff: a queue's always (Consume);
// an attached one's only when its stream was deleted (the consumer went
// with it) — a consumer deleted by hand while its stream stays ends the
// Consumer, since deleting it is how a durable topic is unsubscribed.
func (c *Consumer) supervise() {
	defer c.finish()
	// life ends with quit; it bounds every request made here.
	life, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-c.quit:
			stop()
		case <-life.Done():
		}
	}()
	log := c.e.Logger()
	tick := time.NewTicker(c.checkEvery)
	defer tick.Stop()
	pace := engine.LostConsumerPace()
	for {
		c.mu.Lock()
		cc, f := c.cc, c.feed
		c.mu.Unlock()
		closed := cc.Closed()
		select {
		case <-c.quit:
			<-closed
			return
		case <-closed:
		case <-c.nudge:
		case <-tick.C:
		}
		select {
		case <-c.quit:
			<-closed
			return
		default:
		}
		gone, err := c.probe(life)
		ended := false
		select {
		case <-closed:
			ended = true
		default:
		}
		if !gone && !ended {
			continue
		}
		cc.Stop()
		close(f.retired)
		if nc := c.e.Conn(); nc.IsClosed() || nc.IsDraining() {
			// The engine is closing: nothing to consume with.
			<-closed
			return
		}
		c.e.ForgetStream(c.stream, err)
		log.Warn("queue consumer lost; re-creating it", "consumer", c.name, "stream", c.stream,
			"consumer_gone", gone, "consume_ended", ended, "error", err)
		delay := pace.Lost()
		for {
			select {
			case <-c.quit:
				<-closed
				return
			case <-time.After(delay):
			}
			end, err := c.restore(life)
			if end {
				log.Warn("queue consumer deleted while its stream stays; the consumer ends", "consumer", c.name, "stream", c.stream)
				<-closed
				return
			}
			if err == nil {
				break
			}
			select {
			case <-c.quit:
				<-closed
				return
			default:
			}
			delay = pace.Failed()
			log.Warn("queue consumer could not be re-created; will retry", "consumer", c.name, "stream", c.stream,
				"retry_in", delay, "error", err)
		}
		<-closed
		pace.Recovered()
		log.Info("queue consumer re-created", "consumer", c.name, "stream", c.stream)
	}
}

// probe asks for the consumer's state. It reports whether the consumer (or
// its stream) is gone, with the error that said so.
func (c *Consumer) probe(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, setupAttempt)
	defer cancel()
	_, err := c.cons.Info(ctx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return true, err
	}
	return false, err
}

// restore re-creates the consumer, or binds the one another process
// re-created, and consumes it. end says that the consumer of an attached
// Consumer was deleted while its stream stayed: the Consumer ends.
func (c *Consumer) restore(ctx context.Context) (end bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*setupAttempt)
	defer cancel()
	var cons jetstream.Consumer
	if c.ensure != nil {
		cons, err = c.ensure(ctx)
	} else {
		cons, end, err = c.recreate(ctx)
	}
	if end || err != nil {
		return end, err
	}
	cc, f, err := c.consume(cons)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	if c.quitting {
		c.mu.Unlock()
		cc.Stop()
		close(f.retired)
		return false, nil
	}
	c.cc, c.feed, c.cons, c.created = cc, f, cons, cons.CachedInfo().Created
	c.mu.Unlock()
	return false, nil
}

// recreate makes an attached Consumer's JetStream consumer again, on a
// stream created after it (its stream was deleted, and the consumer with
// it), starting at the stream's first message: all of them came after the
// loss. A stream that is not there yet is an error (retried); one that
// was not created again means the consumer was deleted by hand: end.
func (c *Consumer) recreate(ctx context.Context) (cons jetstream.Consumer, end bool, err error) {
	js := c.e.JetStream()
	if cons, err = js.Consumer(ctx, c.stream, c.name); err == nil {
		return cons, false, nil // another process re-created it
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, false, err
	}
	s, err := js.Stream(ctx, c.stream)
	if err != nil {
		return nil, false, err
	}
	if !s.CachedInfo().Created.After(c.created) {
		return nil, true, nil
	}
	cfg := c.cfg
	cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverAllPolicy, 0, nil
	cons, err = js.CreateConsumer(ctx, c.stream, cfg)
	if errors.Is(err, jetstream.ErrConsumerExists) {
		cons, err = js.Consumer(ctx, c.stream, c.name)
	}
	return cons, false, err
}
