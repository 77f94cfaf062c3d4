package topic_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/topic"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

type event struct {
	N int `json:"n"`
}

// recorder counts, per function, how often it saw each event.
type recorder struct {
	mu   sync.Mutex
	seen map[string]map[int]int
	bag  map[string]string
}

func newRecorder() *recorder {
	return &recorder{seen: map[string]map[int]int{}, bag: map[string]string{}}
}

func (r *recorder) serve(t *testing.T, e *engine.Engine, id string, fail func(event) error) {
	t.Helper()
	w, err := e.Worker("w-" + strings.ReplaceAll(id, "::", "-"))
	if err != nil {
		t.Fatal(err)
	}
	err = w.Register(engine.Function{ID: id, Handler: engine.Typed(func(ctx context.Context, ev event) (struct{}, error) {
		if fail != nil {
			if err := fail(ev); err != nil {
				return struct{}{}, err
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.seen[id] == nil {
			r.seen[id] = map[int]int{}
		}
		r.seen[id][ev.N]++
		r.bag[id] = baggage.FromContext(ctx).Member(engine.AttrSessionID).Value()
		return struct{}{}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
}

// exactly checks that function id saw events 0..n-1 once each.
func (r *recorder) exactly(id string, n int) func() error {
	return func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.seen[id]) != n {
			return fmt.Errorf("%s saw %d distinct events, want %d", id, len(r.seen[id]), n)
		}
		for i := range n {
			if c := r.seen[id][i]; c != 1 {
				return fmt.Errorf("%s saw event %d %d times", id, i, c)
			}
		}
		return nil
	}
}

func fast(extra ...topic.Option) []topic.Option {
	return append([]topic.Option{
		topic.WithBackoff(10*time.Millisecond, 40*time.Millisecond),
		topic.WithJitter(false),
		topic.WithCallTimeout(3 * time.Second),
	}, extra...)
}

func subscribe(t *testing.T, e *engine.Engine, name, fn string, opts ...topic.Option) *topic.Subscription {
	t.Helper()
	s, err := topic.Subscribe(context.Background(), e, name, fn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func publish(t *testing.T, ctx context.Context, e *engine.Engine, name string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := topic.Publish(ctx, e, name, event{N: i}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEveryFunctionGetsEveryMessage(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	r := newRecorder()
	r.serve(t, e, "billing::on_order", nil)
	r.serve(t, e, "mail::on_order", nil)
	subscribe(t, e, "orders", "billing::on_order", fast()...)
	subscribe(t, e, "orders", "mail::on_order", fast()...)
	ctx := engine.WithSession(context.Background(), "sess-7", "")
	publish(t, ctx, e, "orders", 0, 20)
	enginetest.Eventually(t, 5*time.Second, r.exactly("billing::on_order", 20))
	enginetest.Eventually(t, 5*time.Second, r.exactly("mail::on_order", 20))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bag["billing::on_order"] != "sess-7" {
		t.Fatalf("baggage did not travel: %q", r.bag["billing::on_order"])
	}
}

func TestReplicasOfOneFunctionSplitMessages(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	r := newRecorder()
	r.serve(t, e, "stats::count", nil)
	r.serve(t, e, "audit::log", nil)
	a := subscribe(t, enginetest.NewEngine(t, ns), "clicks", "stats::count", fast(topic.WithConcurrency(2))...)
	b := subscribe(t, enginetest.NewEngine(t, ns), "clicks", "stats::count", fast(topic.WithConcurrency(2))...)
	subscribe(t, e, "clicks", "audit::log", fast()...)
	if a.Name() != b.Name() {
		t.Fatalf("replicas bound %q and %q", a.Name(), b.Name())
	}
	const n = 200
	publish(t, context.Background(), e, "clicks", 0, n)
	enginetest.Eventually(t, 10*time.Second, r.exactly("stats::count", n))
	enginetest.Eventually(t, 10*time.Second, r.exactly("audit::log", n))
	// A replica counts a message once its ack is sent, a moment after the
	// function answered: the counters catch up with the recorder.
	enginetest.Eventually(t, 5*time.Second, func() error {
		ca, cb := a.Counters(), b.Counters()
		if ca.Handled+cb.Handled != n || ca.Handled == 0 || cb.Handled == 0 {
			return fmt.Errorf("replica counters %+v %+v", ca, cb)
		}
		return nil
	})
	// Interest retention: once every function has acked, nothing is kept.
	enginetest.Eventually(t, 3*time.Second, func() error {
		s, err := e.JetStream().Stream(context.Background(), subjects.TopicStream)
		if err != nil {
			return err
		}
		if n := s.CachedInfo().State.Msgs; n != 0 {
			return fmt.Errorf("topic stream keeps %d messages", n)
		}
		return nil
	})
}

func TestOfflineSubscriberCatchesUp(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	r := newRecorder()
	r.serve(t, e, "sync::apply", nil)
	first := subscribe(t, enginetest.NewEngine(t, ns), "changes", "sync::apply", fast()...)
	publish(t, context.Background(), e, "changes", 0, 3)
	enginetest.Eventually(t, 5*time.Second, r.exactly("sync::apply", 3))
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The subscriber's process is gone; messages keep coming.
	publish(t, context.Background(), e, "changes", 3, 8)
	if err := r.exactly("sync::apply", 3)(); err != nil {
		t.Fatalf("delivered while offline: %v", err)
	}
	subscribe(t, enginetest.NewEngine(t, ns), "changes", "sync::apply", fast()...)
	enginetest.Eventually(t, 5*time.Second, r.exactly("sync::apply", 8))
}

func TestDeliverNewAndAll(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	r := newRecorder()
	r.serve(t, e, "early::sub", nil)
	r.serve(t, e, "late::new", nil)
	r.serve(t, e, "late::all", nil)
	early := subscribe(t, e, "feed", "early::sub", fast()...)
	early.Stop() // keeps its consumer, so the stream keeps the messages
	publish(t, context.Background(), e, "feed", 0, 2)
	subscribe(t, e, "feed", "late::new", fast()...)
	subscribe(t, e, "feed", "late::all", fast(topic.WithDeliverAll())...)
	publish(t, context.Background(), e, "feed", 2, 3)
	enginetest.Eventually(t, 5*time.Second, r.exactly("late::all", 3))
	enginetest.Eventually(t, 5*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.seen["late::new"]) != 1 || r.seen["late::new"][2] != 1 {
			return fmt.Errorf("late::new saw %v", r.seen["late::new"])
		}
		return nil
	})
}

func TestRetryThenTerminate(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	r := newRecorder()
	var mu sync.Mutex
	failures := 0
	r.serve(t, e, "flaky::sub", func(ev event) error {
		mu.Lock()
		defer mu.Unlock()
		if ev.N == 0 && failures < 2 { // event 0 fails twice, then works
			failures++
			return errors.New("transient")
		}
		if ev.N == 1 {
			return errors.New("always")
		}
		return nil
	})
	s := subscribe(t, e, "jobs", "flaky::sub", fast(topic.WithMaxDeliver(3))...)
	publish(t, context.Background(), e, "jobs", 0, 2)
	enginetest.Eventually(t, 5*time.Second, func() error {
		c := s.Counters()
		if c.Handled != 1 || c.Dropped != 1 || c.Retried != 4 {
			return fmt.Errorf("counters %+v", c)
		}
		return nil
	})
	enginetest.Eventually(t, 3*time.Second, func() error {
		st, err := e.JetStream().Stream(context.Background(), subjects.TopicStream)
		if err != nil {
			return err
		}
		if n := st.CachedInfo().State.Msgs; n != 0 {
			return fmt.Errorf("topic stream keeps %d messages", n)
		}
		return nil
	})
}

func TestUnsubscribe(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	r := newRecorder()
	r.serve(t, e, "gone::soon", nil)
	s := subscribe(t, e, "t1", "gone::soon", fast()...)
	s.Stop()
	ctx := context.Background()
	if err := topic.Unsubscribe(ctx, e, "t1", "gone::soon"); err != nil {
		t.Fatal(err)
	}
	if err := topic.Unsubscribe(ctx, e, "t1", "gone::soon"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("second unsubscribe: %v", err)
	}
	if err := topic.Unsubscribe(ctx, e, "t.1", "gone::soon"); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("bad topic: %v", err)
	}
	// Nobody is subscribed: the topic keeps nothing.
	publish(t, ctx, e, "t1", 0, 1)
	st, err := e.JetStream().Stream(ctx, subjects.TopicStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("topic stream keeps %d messages", n)
	}
}

// TestConsumerDeletedByHand: deleting a subscription's consumer (nats
// consumer rm, or Unsubscribe from another process) ends the running
// Subscriptions of it instead of leaving them waiting for nothing, and the
// topic keeps nothing more for the function.
func TestConsumerDeletedByHand(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	r := newRecorder()
	r.serve(t, e, "hand::rm", nil)
	a := subscribe(t, enginetest.NewEngine(t, ns), "rm", "hand::rm", fast()...)
	b := subscribe(t, enginetest.NewEngine(t, ns), "rm", "hand::rm", fast()...)
	ctx := context.Background()
	publish(t, ctx, e, "rm", 0, 2)
	enginetest.Eventually(t, 5*time.Second, r.exactly("hand::rm", 2))
	if err := e.JetStream().DeleteConsumer(ctx, subjects.TopicStream, a.Name()); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*topic.Subscription{a, b} {
		select {
		case <-s.Closed():
		case <-time.After(5 * time.Second):
			t.Fatal("subscription still running after its consumer was deleted")
		}
	}
	publish(t, ctx, e, "rm", 2, 3)
	st, err := e.JetStream().Stream(ctx, subjects.TopicStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("topic stream keeps %d messages", n)
	}
}

func TestPlainFanOut(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	r := newRecorder()
	r.serve(t, e, "ui::refresh", nil)
	r.serve(t, e, "log::line", nil)
	ctx := context.Background()
	// Publishing with nobody subscribed is fine and lost.
	if err := topic.PublishPlain(ctx, e, "ticks", event{N: -1}); err != nil {
		t.Fatal(err)
	}
	// The server has it before anyone subscribes (an unflushed publish
	// could reach the subscriptions made next on other connections).
	if err := e.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	var subs []*topic.PlainSubscription
	for _, sub := range []struct{ fn string }{{"ui::refresh"}, {"ui::refresh"}, {"log::line"}} {
		ps, err := topic.SubscribePlain(ctx, enginetest.NewEngine(t, ns), "ticks", sub.fn)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, ps)
	}
	for i := range 10 {
		if err := topic.PublishPlain(engine.WithSession(ctx, "s-plain", ""), e, "ticks", event{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	// Each function once per message, although ui::refresh has two
	// subscribing processes.
	enginetest.Eventually(t, 5*time.Second, r.exactly("ui::refresh", 10))
	enginetest.Eventually(t, 5*time.Second, r.exactly("log::line", 10))
	r.mu.Lock()
	if r.bag["log::line"] != "s-plain" {
		t.Errorf("baggage did not travel: %q", r.bag["log::line"])
	}
	r.mu.Unlock()
	for _, ps := range subs {
		if err := ps.Close(ctx); err != nil {
			t.Fatal(err)
		}
		<-ps.Closed()
	}
	for _, bad := range []struct{ name, fn string }{{"a.b", "x::y"}, {"*", "x::y"}, {">", "x::y"}, {"a b", "x::y"}, {"ok", "bad id"}, {"ok", "x::"}} {
		if _, err := topic.SubscribePlain(ctx, e, bad.name, bad.fn); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("SubscribePlain(%q, %q) = %v", bad.name, bad.fn, err)
		}
	}
	if err := topic.PublishPlain(ctx, e, "a.>", nil); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Errorf("PublishPlain bad name: %v", err)
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(4<<10))
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	for _, name := range []string{"", "a.b", "a*", ">", "a b", strings.Repeat("t", 129)} {
		if err := topic.Publish(ctx, e, name, event{}); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("Publish(%q) = %v", name, err)
		}
		if _, err := topic.Subscribe(ctx, e, name, "a::b"); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("Subscribe(%q) = %v", name, err)
		}
	}
	for _, fn := range []string{"", "a::", "a b", "::", strings.Repeat("~", 100)} {
		if _, err := topic.Subscribe(ctx, e, "t", fn); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("Subscribe(fn %q) = %v", fn, err)
		}
	}
	if err := topic.Publish(ctx, e, "t", map[string]string{"x": strings.Repeat("x", 8<<10)}); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Errorf("oversized publish: %v", err)
	}
	for i, opt := range []topic.Option{topic.WithMaxDeliver(0), topic.WithBackoff(0, 0), topic.WithCallTimeout(-1),
		topic.WithAckWait(time.Microsecond), topic.WithConcurrency(0)} {
		if _, err := topic.Subscribe(ctx, e, "t", "a::b", opt); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("option %d: %v", i, err)
		}
	}
	// Nothing half-made: no consumer exists after the refusals.
	st, err := e.JetStream().Stream(ctx, subjects.TopicStream)
	if err == nil {
		if info, err := st.Info(ctx); err != nil || info.State.Consumers != 0 {
			t.Fatalf("consumers after refusals: %+v, %v", info, err)
		}
	}
}

// TestPublishedMessagesReachTheSubscriber publishes bodies up to the
// server's max payload: whatever Publish accepts must fit the subscriber's
// call (its headers included), and what does not is refused up front.
func TestPublishedMessagesReachTheSubscriber(t *testing.T) {
	t.Parallel()
	const max = 4 << 10
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(max))
	e := enginetest.NewEngine(t, ns)
	w, err := e.Worker("big")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	called := map[int]bool{}
	err = w.Register(engine.Function{ID: "big::sub", Handler: func(_ context.Context, req *engine.Request) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		called[len(req.Data)] = true
		return nil, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := subscribe(t, e, "big", "big::sub", fast(topic.WithMaxDeliver(2))...)
	ctx := context.Background()
	accepted := map[int]bool{}
	refused := 0
	for n := max - 160; n <= max; n++ {
		err := topic.Publish(ctx, e, "big", engine.Raw(strings.Repeat("a", n)))
		switch {
		case err == nil:
			accepted[n] = true
		case errors.Is(err, wire.ErrInvalidPayload):
			refused++
		default:
			t.Fatalf("publish %d bytes: %v", n, err)
		}
	}
	if len(accepted) == 0 || refused == 0 {
		t.Fatalf("%d accepted, %d refused: the sizes do not straddle the limit", len(accepted), refused)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		c := s.Counters()
		if c.Dropped != 0 {
			return fmt.Errorf("%d accepted messages dropped: %+v", c.Dropped, c)
		}
		if c.Handled != int64(len(accepted)) {
			return fmt.Errorf("counters %+v, want %d handled", c, len(accepted))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for n := range accepted {
		if !called[n] {
			t.Errorf("the %d-byte message never reached the function", n)
		}
	}
}

func TestConsumerName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		topic, fn, want string
	}{
		{"orders", "billing::on_order", "topic-orders~_billing~~on_order"},
		{"a_b", "c", "topic-a_b~_c"},
		{"a", "b_c", "topic-a~_b_c"},
		{"a", "x.y::z", "topic-a~_x~2Ey~~z"},
	}
	for _, tt := range tests {
		got, err := topic.ConsumerName(tt.topic, tt.fn)
		if err != nil || got != tt.want {
			t.Errorf("ConsumerName(%q, %q) = %q, %v; want %q", tt.topic, tt.fn, got, err, tt.want)
		}
	}
	if _, err := topic.ConsumerName("t", strings.Repeat("é", 100)); err == nil {
		t.Fatal("accepted a name longer than 255 bytes")
	}
}

// TestPublishAfterStreamDeleted: a publish on III_TOPIC deleted under the
// engine creates the stream again and stores the message (nothing stored
// it the first time; it failed unavailable until restart). The
// subscription, whose consumer went with the stream, takes it up again
// once the stream is back: what is published from then on reaches it (a
// message published before its consumer is back has no interest to keep
// it, as with no subscriber at all).
func TestPublishAfterStreamDeleted(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newRecorder()
	r.serve(t, e, "audit::on_order", nil)
	subscribe(t, e, "orders", "audit::on_order", fast()...)
	publish(t, ctx, e, "orders", 0, 1)
	enginetest.Eventually(t, 5*time.Second, r.exactly("audit::on_order", 1))
	if err := e.JetStream().DeleteStream(ctx, subjects.TopicStream); err != nil {
		t.Fatal(err)
	}
	if err := topic.Publish(ctx, e, "orders", event{N: 100}); err != nil {
		t.Fatalf("publish after the stream was deleted: %v", err)
	}
	name, err := topic.ConsumerName("orders", "audit::on_order")
	if err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 20*time.Second, func() error {
		_, err := e.JetStream().Consumer(ctx, subjects.TopicStream, name)
		return err
	})
	publish(t, ctx, e, "orders", 1, 2)
	enginetest.Eventually(t, 5*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.seen["audit::on_order"][1] != 1 {
			return fmt.Errorf("seen %v", r.seen["audit::on_order"])
		}
		return nil
	})
}

// TestPublishAfterStreamDeletedNoSubscriber: with no subscription to notice
// the loss, the publish itself creates III_TOPIC again.
func TestPublishAfterStreamDeletedNoSubscriber(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish(t, ctx, e, "orders", 0, 1)
	if err := e.JetStream().DeleteStream(ctx, subjects.TopicStream); err != nil {
		t.Fatal(err)
	}
	if err := topic.Publish(ctx, e, "orders", event{N: 1}); err != nil {
		t.Fatalf("publish after the stream was deleted: %v", err)
	}
	if _, err := e.JetStream().Stream(ctx, subjects.TopicStream); err != nil {
		t.Fatalf("III_TOPIC after the publish: %v", err)
	}
}

// TestSubscribeAfterStreamDeleted: a subscription made on an engine whose
// III_TOPIC was deleted creates the stream again (it failed until restart).
func TestSubscribeAfterStreamDeleted(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newRecorder()
	r.serve(t, e, "audit::on_order", nil)
	publish(t, ctx, e, "orders", 0, 1)
	if err := e.JetStream().DeleteStream(ctx, subjects.TopicStream); err != nil {
		t.Fatal(err)
	}
	s, err := topic.Subscribe(ctx, e, "orders", "audit::on_order", fast()...)
	if err != nil {
		t.Fatalf("subscribe after the stream was deleted: %v", err)
	}
	t.Cleanup(s.Stop)
	publish(t, ctx, e, "orders", 0, 1)
	enginetest.Eventually(t, 5*time.Second, r.exactly("audit::on_order", 1))
}
