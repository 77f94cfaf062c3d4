package queue_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/queue"
	"github.com/iii-on-nats/iii/subjects"
)

// TestQueueConsumerSurvivesItsStreamOrConsumerDeleted: a queue's Consumer
// whose JetStream consumer vanishes — deleted by hand, or with its stream,
// whether or not a pull request was waiting to be told — re-creates it
// (and the stream) and runs what is enqueued next. It used to end, or,
// with no pull waiting (every call slot busy), to run nothing more while
// looking alive.
func TestQueueConsumerSurvivesItsStreamOrConsumerDeleted(t *testing.T) {
	t.Parallel()
	deleteStream := func(ctx context.Context, js jetstream.JetStream, _ string) error {
		return js.DeleteStream(ctx, subjects.QueueStream)
	}
	for _, tc := range []struct {
		name string
		// busy: the only call slot is taken and one more message waits
		// in the client, so no pull request is at the server to be told
		// of the deletion, and none is sent until the call ends: only
		// the Consumer's own look at its consumer notices.
		busy   bool
		delete func(ctx context.Context, js jetstream.JetStream, consumer string) error
	}{
		{"stream deleted, pull waiting", false, deleteStream},
		{"stream deleted, nobody told", true, deleteStream},
		{"consumer deleted", false, func(ctx context.Context, js jetstream.JetStream, consumer string) error {
			return js.DeleteConsumer(ctx, subjects.QueueStream, consumer)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := enginetest.Engine(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			release := make(chan struct{})
			var handled atomic.Int64
			serveFn(t, e, "test::vanish", func(ctx context.Context, j job) error {
				if j.ID == 1 {
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
				handled.Add(1)
				return nil
			})
			c := consume(t, e, "vanish", fast(queue.WithConcurrency(1), queue.WithCheckEvery(200*time.Millisecond))...)
			consumerIs := func(check func(*jetstream.ConsumerInfo) error) func() error {
				return func() error {
					ci, err := e.JetStream().Consumer(ctx, subjects.QueueStream, c.Name())
					if err != nil {
						return err
					}
					return check(ci.CachedInfo())
				}
			}
			if tc.busy {
				enqueue(t, e, "vanish", "test::vanish", job{ID: 1})
				enqueue(t, e, "vanish", "test::vanish", job{ID: 2})
				// Job 2 reached the client and waits for the slot.
				enginetest.Eventually(t, 5*time.Second, consumerIs(func(info *jetstream.ConsumerInfo) error {
					if info.NumAckPending != 2 || info.NumWaiting != 0 {
						return fmt.Errorf("ack pending %d, waiting %d", info.NumAckPending, info.NumWaiting)
					}
					return nil
				}))
			} else {
				enginetest.Eventually(t, 5*time.Second, consumerIs(func(info *jetstream.ConsumerInfo) error {
					if info.NumWaiting == 0 {
						return fmt.Errorf("no pull request waiting")
					}
					return nil
				}))
			}
			if err := tc.delete(ctx, e.JetStream(), c.Name()); err != nil {
				t.Fatal(err)
			}
			// The consumer is back while the call still holds the slot.
			enginetest.Eventually(t, 10*time.Second, consumerIs(func(*jetstream.ConsumerInfo) error { return nil }))
			close(release)
			before := handled.Load()
			enginetest.Eventually(t, 10*time.Second, func() error {
				return e.Enqueue(ctx, "vanish", "test::vanish", job{ID: 3}, engine.WithDedupID("after"))
			})
			enginetest.Eventually(t, 10*time.Second, func() error {
				if handled.Load() <= before {
					return fmt.Errorf("nothing handled after the deletion")
				}
				return nil
			})
			select {
			case <-c.Closed():
				t.Fatal("consumer ended")
			default:
			}
		})
	}
}

// TestAttachedConsumerStreamDeleted: an attached Consumer (a durable
// topic's) whose stream is deleted re-creates its consumer once the stream
// is there again and runs its messages; one whose consumer alone is
// deleted ends, as unsubscribing a topic from another process wants.
func TestAttachedConsumerStreamDeleted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		stream   bool // delete (and create again) the stream, not the consumer
		wantEnds bool
	}{
		{"stream deleted and created again", true, false},
		{"consumer deleted", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := enginetest.Engine(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var handled atomic.Int64
			serveFn(t, e, "test::attached", func(context.Context, job) error { handled.Add(1); return nil })
			js := e.JetStream()
			scfg := jetstream.StreamConfig{Name: "ATTACHED", Subjects: []string{"attached.>"}}
			if _, err := js.CreateStream(ctx, scfg); err != nil {
				t.Fatal(err)
			}
			ccfg := jetstream.ConsumerConfig{Durable: "att", AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverNewPolicy}
			cons, err := js.CreateConsumer(ctx, "ATTACHED", ccfg)
			if err != nil {
				t.Fatal(err)
			}
			c, err := queue.Attach(e, cons, fast(queue.WithFunction("test::attached"), queue.WithCheckEvery(200*time.Millisecond))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Stop)
			// A pull request waits at the server, to be told of the deletion.
			enginetest.Eventually(t, 5*time.Second, func() error {
				info, err := cons.Info(ctx)
				if err != nil {
					return err
				}
				if info.NumWaiting == 0 {
					return fmt.Errorf("no pull request waiting")
				}
				return nil
			})
			publish := func() error {
				_, err := js.PublishMsg(ctx, &nats.Msg{Subject: "attached.x", Data: []byte(`{"id":1}`)})
				return err
			}
			if tc.stream {
				if err := js.DeleteStream(ctx, "ATTACHED"); err != nil {
					t.Fatal(err)
				}
				time.Sleep(100 * time.Millisecond) // created again later
				if _, err := js.CreateStream(ctx, scfg); err != nil {
					t.Fatal(err)
				}
			} else if err := js.DeleteConsumer(ctx, "ATTACHED", "att"); err != nil {
				t.Fatal(err)
			}
			if tc.wantEnds {
				waitClosed(t, c.Closed())
				return
			}
			// The first message is published before the consumer is back:
			// a re-created consumer starts at the new stream's first.
			if err := publish(); err != nil {
				t.Fatal(err)
			}
			enginetest.Eventually(t, 15*time.Second, func() error {
				if handled.Load() != 1 {
					return fmt.Errorf("handled %d", handled.Load())
				}
				return nil
			})
			select {
			case <-c.Closed():
				t.Fatal("consumer ended")
			default:
			}
		})
	}
}
