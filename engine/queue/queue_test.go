package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/queue"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

type job struct {
	ID   int    `json:"id"`
	Text string `json:"text,omitempty"`
}

// fast are the options every test uses: millisecond backoffs, no jitter.
func fast(extra ...queue.Option) []queue.Option {
	return append([]queue.Option{
		queue.WithBackoff(10*time.Millisecond, 40*time.Millisecond),
		queue.WithJitter(false),
		queue.WithCallTimeout(3 * time.Second),
	}, extra...)
}

// serveFn registers function id on a new worker of e.
func serveFn(t *testing.T, e *engine.Engine, id string, h func(context.Context, job) error) {
	t.Helper()
	w, err := e.Worker("w-" + strings.ReplaceAll(id, "::", "-"))
	if err != nil {
		t.Fatal(err)
	}
	err = w.Register(engine.Function{ID: id, Handler: engine.Typed(func(ctx context.Context, j job) (struct{}, error) {
		return struct{}{}, h(ctx, j)
	})})
	if err != nil {
		t.Fatal(err)
	}
}

func consume(t *testing.T, e *engine.Engine, name string, opts ...queue.Option) *queue.Consumer {
	t.Helper()
	c, err := queue.Consume(context.Background(), e, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

func enqueue(t *testing.T, e *engine.Engine, name, fn string, j job, opts ...engine.EnqueueOption) {
	t.Helper()
	if err := e.Enqueue(context.Background(), name, fn, j, opts...); err != nil {
		t.Fatal(err)
	}
}

func inspect(t *testing.T, e *engine.Engine, name string) queue.Stats {
	t.Helper()
	st, err := queue.Inspect(context.Background(), e, name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func deadLetters(t *testing.T, e *engine.Engine, name string) []queue.DeadLetter {
	t.Helper()
	dls, err := queue.DeadLetters(context.Background(), e, name, 100)
	if err != nil {
		t.Fatal(err)
	}
	return dls
}

func wantCount(n int, f func() int) func() error {
	return func() error {
		if got := f(); got != n {
			return fmt.Errorf("got %d, want %d", got, n)
		}
		return nil
	}
}

func TestEnqueueHandle(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	got := make(chan job, 10)
	serveFn(t, e, "test::work", func(_ context.Context, j job) error { got <- j; return nil })
	c := consume(t, e, "jobs", fast()...)
	for i := 1; i <= 3; i++ {
		enqueue(t, e, "jobs", "test::work", job{ID: i, Text: "hello"})
	}
	seen := map[int]bool{}
	for range 3 {
		select {
		case j := <-got:
			if j.Text != "hello" {
				t.Fatalf("job %+v", j)
			}
			seen[j.ID] = true
		case <-time.After(5 * time.Second):
			t.Fatal("jobs not handled")
		}
	}
	if len(seen) != 3 {
		t.Fatalf("handled %v", seen)
	}
	enginetest.Eventually(t, 3*time.Second, wantCount(3, func() int { return int(c.Counters().Handled) }))
	// Work-queue retention: an acked message is gone from the stream.
	enginetest.Eventually(t, 3*time.Second, func() error {
		st := inspect(t, e, "jobs")
		if st.Messages != 0 || st.AckPending != 0 || st.Pending != 0 || !st.Consumer {
			return fmt.Errorf("stats %+v", st)
		}
		s, err := e.JetStream().Stream(context.Background(), subjects.QueueStream)
		if err != nil {
			return err
		}
		if n := s.CachedInfo().State.Msgs; n != 0 {
			return fmt.Errorf("stream holds %d messages", n)
		}
		return nil
	})
}

func TestDeadLetterAndRedrive(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	var broken atomic.Bool
	broken.Store(true)
	var calls, okCalls atomic.Int64
	serveFn(t, e, "test::flaky", func(_ context.Context, j job) error {
		n := calls.Add(1)
		if broken.Load() {
			return fmt.Errorf("boom %d\r\nsecond line", n)
		}
		okCalls.Add(1)
		return nil
	})
	c := consume(t, e, "flaky", fast(queue.WithMaxDeliver(3))...)
	enqueue(t, e, "flaky", "test::flaky", job{ID: 42}, engine.WithDedupID("order-42"))

	var dls []queue.DeadLetter
	enginetest.Eventually(t, 5*time.Second, func() error {
		dls = deadLetters(t, e, "flaky")
		if len(dls) != 1 {
			return fmt.Errorf("%d dead letters", len(dls))
		}
		return nil
	})
	dl := dls[0]
	if dl.Queue != "flaky" || dl.FunctionID != "test::flaky" || dl.ErrorCode != wire.CodeInternal ||
		!strings.Contains(dl.ErrorMessage, "boom 3") || strings.ContainsAny(dl.ErrorMessage, "\r\n") ||
		dl.Deliveries != 3 || dl.EnqueuedAt.IsZero() || dl.DeadAt.Before(dl.EnqueuedAt) ||
		dl.ContentType != wire.ContentMsgpack {
		t.Fatalf("dead letter %+v", dl)
	}
	if m, ok := dl.Data.(map[string]any); !ok || fmt.Sprint(m["id"]) != "42" {
		t.Fatalf("dead letter data %#v", dl.Data)
	}
	if calls.Load() != 3 {
		t.Fatalf("%d calls, want 3", calls.Load())
	}

	// The stored message itself: original body and headers plus the
	// dead-letter headers.
	dlq, err := e.JetStream().Stream(context.Background(), subjects.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := dlq.GetMsg(context.Background(), dl.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	h := raw.Header
	for k, want := range map[string]string{
		queue.HeaderErrorCode:      "internal",
		queue.HeaderDeliveries:     "3",
		queue.HeaderQueue:          "flaky",
		engine.HeaderFunctionID:    "test::flaky",
		queue.HeaderOriginalMsgID:  "order-42",
		wire.HeaderContentType:     wire.ContentMsgpack,
		queue.HeaderQueueSeq:       "1",
		nats.MsgIdHdr:              "iii-dlq-flaky-1",
		queue.HeaderErrorMessage:   h.Get(queue.HeaderErrorMessage),
		queue.HeaderEnqueuedAt:     h.Get(queue.HeaderEnqueuedAt),
		queue.HeaderDeadLetteredAt: h.Get(queue.HeaderDeadLetteredAt),
	} {
		if got := h.Get(k); got != want || got == "" {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if raw.Subject != "iii.dlq.flaky" || !strings.Contains(h.Get(queue.HeaderErrorMessage), "boom 3") {
		t.Fatalf("dead letter subject %q headers %v", raw.Subject, h)
	}

	// The original is gone from the queue; counters agree.
	// (The consumer counts a dead letter after storing it and removing
	// the original, so the counter may trail the stream by a moment.)
	enginetest.Eventually(t, 3*time.Second, func() error {
		st := inspect(t, e, "flaky")
		if st.Messages != 0 || st.DeadLetters != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		if got := c.Counters(); got.DeadLettered != 1 || got.Retried != 2 || got.Handled != 0 {
			return fmt.Errorf("counters %+v", got)
		}
		return nil
	})

	// Fix the handler, redrive: it runs once and the DLQ is empty.
	broken.Store(false)
	res, err := queue.Redrive(context.Background(), e, "flaky")
	if err != nil || res != (queue.RedriveResult{Redriven: 1}) {
		t.Fatalf("redrive = %+v, %v", res, err)
	}
	enginetest.Eventually(t, 5*time.Second, wantCount(1, func() int { return int(okCalls.Load()) }))
	if got := deadLetters(t, e, "flaky"); len(got) != 0 {
		t.Fatalf("dead letters after redrive: %+v", got)
	}
	if res, err := queue.Redrive(context.Background(), e, "flaky"); err != nil || res != (queue.RedriveResult{}) {
		t.Fatalf("second redrive = %+v, %v", res, err)
	}
	enginetest.Eventually(t, 3*time.Second, wantCount(1, func() int { return int(c.Counters().Handled) }))
}

func TestRedriveKeepsHistoryAndFailsAgain(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	serveFn(t, e, "test::bad", func(context.Context, job) error {
		return wire.Errorf(wire.CodeForbidden, "not allowed")
	})
	consume(t, e, "bad", fast()...)
	enqueue(t, e, "bad", "test::bad", job{ID: 1})
	enginetest.Eventually(t, 5*time.Second, wantCount(1, func() int { return len(deadLetters(t, e, "bad")) }))
	first := deadLetters(t, e, "bad")[0]
	if res, err := queue.Redrive(context.Background(), e, "bad", queue.WithRedriveSequence(first.Sequence)); err != nil || res != (queue.RedriveResult{Redriven: 1}) {
		t.Fatalf("redrive = %+v, %v", res, err)
	}
	var again queue.DeadLetter
	enginetest.Eventually(t, 5*time.Second, func() error {
		dls := deadLetters(t, e, "bad")
		if len(dls) != 1 || dls[0].Sequence == first.Sequence {
			return fmt.Errorf("dead letters %+v", dls)
		}
		again = dls[0]
		return nil
	})
	if again.Redrives != 1 || !again.EnqueuedAt.Equal(first.EnqueuedAt) || again.ErrorCode != wire.CodeForbidden || again.Deliveries != 1 {
		t.Fatalf("after redrive: %+v (first %+v)", again, first)
	}
	if _, err := queue.Redrive(context.Background(), e, "bad", queue.WithRedriveSequence(first.Sequence)); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("redrive of a moved dead letter: %v", err)
	}
}

func TestNonRetryableGoesStraightToDLQ(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	var calls atomic.Int64
	serveFn(t, e, "test::strict", func(context.Context, job) error {
		calls.Add(1)
		return wire.Errorf(wire.CodeInvalidPayload, "id must be even")
	})
	c := consume(t, e, "strict", fast(queue.WithMaxDeliver(10))...)
	enqueue(t, e, "strict", "test::strict", job{ID: 1})

	// A foreign producer's message without a function id header.
	nc := enginetest.Connect(t, ns)
	if err := nc.Publish("iii.queue.strict", []byte(`{"id":2}`)); err != nil {
		t.Fatal(err)
	}
	// And one naming an invalid function id.
	m := nats.NewMsg("iii.queue.strict")
	m.Header.Set(engine.HeaderFunctionID, "bad id::")
	m.Data = []byte(`{}`)
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}

	var dls []queue.DeadLetter
	enginetest.Eventually(t, 5*time.Second, func() error {
		dls = deadLetters(t, e, "strict")
		if len(dls) != 3 {
			return fmt.Errorf("%d dead letters", len(dls))
		}
		return nil
	})
	for _, dl := range dls {
		if dl.ErrorCode != wire.CodeInvalidPayload || dl.Deliveries != 1 {
			t.Fatalf("dead letter %+v", dl)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("%d calls, want 1", calls.Load())
	}
	// The counter moves just after the dead letter is stored.
	enginetest.Eventually(t, 5*time.Second, func() error {
		if got := c.Counters(); got.Retried != 0 || got.DeadLettered != 3 {
			return fmt.Errorf("counters %+v", got)
		}
		return nil
	})
}

func TestFunctionRegisteredLater(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	c := consume(t, e, "later", fast(queue.WithMaxDeliver(1000))...)
	enqueue(t, e, "later", "test::late", job{ID: 7})
	enginetest.Eventually(t, 5*time.Second, func() error {
		if c.Counters().Retried < 2 {
			return errors.New("not retried yet")
		}
		return nil
	})
	got := make(chan job, 1)
	serveFn(t, e, "test::late", func(_ context.Context, j job) error { got <- j; return nil })
	select {
	case j := <-got:
		if j.ID != 7 {
			t.Fatalf("job %+v", j)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not handled after the function registered")
	}
	if n := len(deadLetters(t, e, "later")); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

func TestConsumersShareTheQueue(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	fnEngine := enginetest.NewEngine(t, ns)
	var mu sync.Mutex
	runs := map[int]int{}
	serveFn(t, fnEngine, "test::share", func(_ context.Context, j job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil
	})
	a := consume(t, enginetest.NewEngine(t, ns), "shared", fast(queue.WithConcurrency(2))...)
	b := consume(t, enginetest.NewEngine(t, ns), "shared", fast(queue.WithConcurrency(2))...)
	const n = 200
	for i := range n {
		enqueue(t, fnEngine, "shared", "test::share", job{ID: i})
	}
	enginetest.Eventually(t, 10*time.Second, wantCount(n, func() int {
		return int(a.Counters().Handled + b.Counters().Handled)
	}))
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if runs[i] != 1 {
			t.Fatalf("job %d ran %d times", i, runs[i])
		}
	}
	if a.Counters().Handled == 0 || b.Counters().Handled == 0 {
		t.Fatalf("no share: a=%+v b=%+v", a.Counters(), b.Counters())
	}
	if a.Name() != subjects.QueueConsumer("shared") || b.Name() != a.Name() {
		t.Fatalf("consumer names %q %q", a.Name(), b.Name())
	}
}

func TestDedupIDDropsDuplicate(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	enqueue(t, e, "dedup", "test::once", job{ID: 1}, engine.WithDedupID("same"))
	enqueue(t, e, "dedup", "test::once", job{ID: 2}, engine.WithDedupID("same"))
	enqueue(t, e, "dedup", "test::once", job{ID: 3}, engine.WithDedupID("other"))
	if st := inspect(t, e, "dedup"); st.Messages != 2 || st.Consumer {
		t.Fatalf("stats before consuming %+v", st)
	}
	var mu sync.Mutex
	var ids []int
	serveFn(t, e, "test::once", func(_ context.Context, j job) error {
		mu.Lock()
		ids = append(ids, j.ID)
		mu.Unlock()
		return nil
	})
	c := consume(t, e, "dedup", fast(queue.WithConcurrency(1))...)
	enginetest.Eventually(t, 5*time.Second, wantCount(2, func() int { return int(c.Counters().Handled) }))
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(ids) != "[1 3]" {
		t.Fatalf("handled %v", ids)
	}
}

// blocking serves id: its first call blocks until the test ends, later
// calls succeed and are counted.
func blocking(t *testing.T, e *engine.Engine, id string) (started <-chan struct{}, calls, done *atomic.Int64) {
	t.Helper()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the engine's cleanup
	st := make(chan struct{})
	calls, done = new(atomic.Int64), new(atomic.Int64)
	serveFn(t, e, id, func(ctx context.Context, _ job) error {
		if calls.Add(1) == 1 {
			close(st)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return errors.New("released")
		}
		done.Add(1)
		return nil
	})
	return st, calls, done
}

func waitClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("timed out")
	}
}

func TestStopRedeliversAfterAckWait(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	fnEngine := enginetest.NewEngine(t, ns)
	started, calls, done := blocking(t, fnEngine, "test::crash")
	opts := fast(queue.WithAckWait(300 * time.Millisecond))
	a := consume(t, enginetest.NewEngine(t, ns), "crash", opts...)
	enqueue(t, fnEngine, "crash", "test::crash", job{ID: 1})
	waitClosed(t, started)
	a.Stop() // like a crash: no ack, no nak
	<-a.Closed()
	stoppedAt := time.Now()
	if got := a.Counters(); got.Abandoned != 1 || got.Handled != 0 || got.Retried != 0 {
		t.Fatalf("stopped consumer counters %+v", got)
	}
	b := consume(t, enginetest.NewEngine(t, ns), "crash", opts...)
	enginetest.Eventually(t, 5*time.Second, wantCount(1, func() int { return int(b.Counters().Handled) }))
	if calls.Load() != 2 || done.Load() != 1 {
		t.Fatalf("calls %d done %d", calls.Load(), done.Load())
	}
	if time.Since(stoppedAt) > 4*time.Second {
		t.Fatalf("redelivery took %v", time.Since(stoppedAt))
	}
}

func TestMaxDeliverReachedByCrashDeadLetters(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	fnEngine := enginetest.NewEngine(t, ns)
	started, calls, _ := blocking(t, fnEngine, "test::once_only")
	opts := fast(queue.WithAckWait(200*time.Millisecond), queue.WithMaxDeliver(1))
	a := consume(t, enginetest.NewEngine(t, ns), "fragile", opts...)
	enqueue(t, fnEngine, "fragile", "test::once_only", job{ID: 1})
	waitClosed(t, started)
	a.Stop()
	b := consume(t, enginetest.NewEngine(t, ns), "fragile", opts...)
	enginetest.Eventually(t, 5*time.Second, wantCount(1, func() int { return int(b.Counters().DeadLettered) }))
	dl := deadLetters(t, fnEngine, "fragile")[0]
	if dl.ErrorCode != wire.CodeTimeout || !strings.Contains(dl.ErrorMessage, "outcome was not recorded") || dl.Deliveries != 2 || calls.Load() != 1 {
		t.Fatalf("dead letter %+v after %d calls", dl, calls.Load())
	}
}

func TestHeartbeatKeepsLongCall(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	var calls atomic.Int64
	serveFn(t, e, "test::long", func(ctx context.Context, _ job) error {
		calls.Add(1)
		select { // simulated work, 4× the ack wait
		case <-time.After(600 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	})
	c := consume(t, e, "long", fast(queue.WithAckWait(150*time.Millisecond))...)
	enqueue(t, e, "long", "test::long", job{ID: 1})
	enginetest.Eventually(t, 5*time.Second, wantCount(1, func() int { return int(c.Counters().Handled) }))
	if calls.Load() != 1 {
		t.Fatalf("%d calls: the message was redelivered during the call", calls.Load())
	}
}

func TestCloseDrainsInFlight(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	serveFn(t, e, "test::drain", func(context.Context, job) error {
		entered <- struct{}{}
		<-release
		return nil
	})
	c := consume(t, e, "drain", fast()...)
	enqueue(t, e, "drain", "test::drain", job{ID: 1})
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- c.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v with a call in flight", err)
	default:
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := c.Counters(); got.Handled != 1 {
		t.Fatalf("counters %+v", got)
	}

	// A Close whose context ends first abandons the call.
	release2 := make(chan struct{})
	t.Cleanup(func() { close(release2) })
	entered2 := make(chan struct{}, 1)
	serveFn(t, e, "test::stuck", func(context.Context, job) error {
		select {
		case entered2 <- struct{}{}:
		default:
		}
		<-release2
		return nil
	})
	c2 := consume(t, e, "stuck", fast()...)
	enqueue(t, e, "stuck", "test::stuck", job{ID: 1})
	select {
	case <-entered2: // the call is running, not just pulled
	case <-time.After(10 * time.Second):
		t.Fatal("call never started")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c2.Close(ctx); !errors.Is(err, queue.ErrNotDrained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v", err)
	}
	if got := c2.Counters(); got.Abandoned != 1 {
		t.Fatalf("counters %+v", got)
	}
}

func TestInvalidNamesAndOptions(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()
	for _, name := range []string{"", "a.b", "a*", ">", "a b", "a\n", strings.Repeat("q", 200)} {
		if _, err := queue.Consume(ctx, e, name); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("Consume(%q) = %v", name, err)
		}
		if _, err := queue.DeadLetters(ctx, e, name, 10); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("DeadLetters(%q) = %v", name, err)
		}
		if _, err := queue.Redrive(ctx, e, name); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("Redrive(%q) = %v", name, err)
		}
		if _, err := queue.Inspect(ctx, e, name); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("Inspect(%q) = %v", name, err)
		}
	}
	if _, err := queue.DeadLetters(ctx, e, "q", 0); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Errorf("limit 0: %v", err)
	}
	bad := []queue.Option{
		queue.WithMaxDeliver(0), queue.WithBackoff(0, time.Second), queue.WithBackoff(time.Second, time.Millisecond),
		queue.WithCallTimeout(0), queue.WithAckWait(time.Millisecond), queue.WithConcurrency(0),
		queue.WithNonRetryable("nope"), queue.WithFunction("a b"),
	}
	for i, opt := range bad {
		if _, err := queue.Consume(ctx, e, "q", opt); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("option %d: %v", i, err)
		}
	}
	for i, opt := range []queue.RedriveOption{queue.WithRedriveLimit(0), queue.WithRedriveSequence(0)} {
		if _, err := queue.Redrive(ctx, e, "q", opt); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("redrive option %d: %v", i, err)
		}
	}
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{wire.Errorf(wire.CodeInvalidPayload, "x"), false},
		{wire.Errorf(wire.CodeForbidden, "x"), false},
		{wire.Errorf(wire.CodeFunctionNotFound, "x"), true},
		{wire.Errorf(wire.CodeInternal, "x"), true},
		{wire.Errorf(wire.CodeTimeout, "x"), true},
		{wire.Errorf(wire.CodeUnavailable, "x"), true},
		{errors.New("plain"), true},
	}
	for _, tt := range tests {
		if got := queue.Retryable(tt.err); got != tt.want {
			t.Errorf("Retryable(%v) = %v", tt.err, got)
		}
	}
}

func TestTraceContextTravelsWithTheMessage(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	got := make(chan string, 1)
	serveFn(t, e, "test::traced", func(ctx context.Context, _ job) error {
		got <- baggage.FromContext(ctx).Member(engine.AttrSessionID).Value()
		return nil
	})
	consume(t, e, "traced", fast()...)
	ctx := engine.WithSession(context.Background(), "sess-q", "msg-q")
	if err := e.Enqueue(ctx, "traced", "test::traced", job{ID: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case sid := <-got:
		if sid != "sess-q" {
			t.Fatalf("handler saw session %q", sid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not handled")
	}
}

// TestDeadLetterPublishFailureKeepsMessage: when the dead letter cannot be
// stored, the original stays on its queue and is dead-lettered later with
// the error that ended it, without another call: it was dead-lettered as
// timeout, "the previous delivery never finished", once its redeliveries
// passed max deliver, and the function ran on every one of them.
func TestDeadLetterPublishFailureKeepsMessage(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()
	var calls atomic.Int64
	serveFn(t, e, "test::reject", func(context.Context, job) error {
		calls.Add(1)
		return wire.Errorf(wire.CodeInvalidPayload, "rejected")
	})
	c := consume(t, e, "keep", fast(queue.WithMaxDeliver(2))...)
	if err := e.JetStream().DeleteStream(ctx, subjects.DLQStream); err != nil {
		t.Fatal(err)
	}
	enqueue(t, e, "keep", "test::reject", job{ID: 1})
	// Past max deliver: the redeliveries outnumber the deliveries allowed.
	enginetest.Eventually(t, 5*time.Second, func() error {
		if c.Counters().Retried < 3 {
			return fmt.Errorf("counters %+v", c.Counters())
		}
		return nil
	})
	if got := c.Counters(); got.DeadLettered != 0 {
		t.Fatalf("dead-lettered without a DLQ stream: %+v", got)
	}
	s, err := e.JetStream().Stream(ctx, subjects.QueueStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("queue holds %d messages, want the original", n)
	}
	if _, err := e.JetStream().CreateStream(ctx, engine.DLQStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, wantCount(1, func() int { return len(deadLetters(t, e, "keep")) }))
	dl := deadLetters(t, e, "keep")[0]
	if dl.ErrorCode != wire.CodeInvalidPayload || dl.ErrorMessage != "rejected" || dl.Deliveries < 4 || calls.Load() != 1 {
		t.Fatalf("dead letter %+v after %d calls: want invalid_payload \"rejected\" after 1 call", dl, calls.Load())
	}
	enginetest.Eventually(t, 3*time.Second, func() error {
		if st := inspect(t, e, "keep"); st.Messages != 0 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
}

// Every message Enqueue accepts reaches its function: one whose call (its
// body and headers, plus the call's timeout and trace parent) would not
// fit the max payload is refused as invalid_payload at enqueue, where it
// was stored and then dead-lettered (invalid_payload) on every delivery,
// and one over the max payload itself was refused as unavailable, which a
// caller retries for ever.
func TestEnqueuedMessagesReachTheFunction(t *testing.T) {
	t.Parallel()
	const max = 4 << 10
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(max))
	// Traced, as in iii up: a delivery of a message enqueued outside any
	// span calls the function with the trace parent of its own span.
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := enginetest.NewEngine(t, ns, engine.WithTracerProvider(tp))
	w, err := e.Worker("big")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	called := map[int]bool{}
	if err := w.Register(engine.Function{ID: "big::work", Handler: func(_ context.Context, req *engine.Request) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		called[len(req.Data)] = true
		return nil, nil
	}}); err != nil {
		t.Fatal(err)
	}
	c := consume(t, e, "big", fast(queue.WithMaxDeliver(2))...)
	ctx := context.Background()
	accepted := map[int]bool{}
	refused := 0
	for n := max - 800; n <= max+50; n++ {
		err := e.Enqueue(ctx, "big", "big::work", engine.Raw(strings.Repeat("a", n)))
		switch {
		case err == nil:
			accepted[n] = true
		case errors.Is(err, wire.ErrInvalidPayload):
			refused++
		default:
			t.Fatalf("enqueue %d bytes: %v", n, err)
		}
	}
	if len(accepted) == 0 || refused == 0 {
		t.Fatalf("%d accepted, %d refused: the sizes do not straddle the limit", len(accepted), refused)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		cs := c.Counters()
		if cs.DeadLettered != 0 {
			return fmt.Errorf("%d accepted messages dead-lettered: %+v", cs.DeadLettered, cs)
		}
		if cs.Handled != int64(len(accepted)) {
			return fmt.Errorf("counters %+v, want %d handled", cs, len(accepted))
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

// TestDeadLetterOfALargeMessageFits: a message a client stored on a queue
// without Enqueue's room for the dead letter's headers (any NATS client
// may publish on iii.queue.<name>), near the max payload, failing with a
// long error, is dead-lettered with its error message cut to fit: it was
// left on its queue, then dead-lettered as a false "timeout", or never.
func TestDeadLetterOfALargeMessageFits(t *testing.T) {
	t.Parallel()
	const max = 4 << 10
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(max))
	e := enginetest.NewEngine(t, ns)
	long := rejecting(t, e)
	ctx := context.Background()
	// The largest message a call from the queue can carry, less the
	// headers a dead letter needs besides its error message.
	msg := &nats.Msg{Subject: "iii.queue.large", Header: nats.Header{}}
	msg.Header.Set(wire.HeaderContentType, wire.JSON.ContentType())
	msg.Header.Set(engine.HeaderFunctionID, "large::reject")
	n := max - wire.HeaderSize(msg.Header) - engine.CallHeaderRoom(msg.Header) - 300
	msg.Data = []byte(strings.Repeat("a", n))
	if _, err := e.EnsureStream(ctx, engine.QueueStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.JetStream().PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	c := consume(t, e, "large", fast()...)
	enginetest.Eventually(t, 5*time.Second, func() error {
		if got := c.Counters(); got.DeadLettered != 1 {
			return fmt.Errorf("counters %+v", got)
		}
		return nil
	})
	dls := deadLetters(t, e, "large")
	if len(dls) != 1 {
		t.Fatalf("%d dead letters", len(dls))
	}
	dl := dls[0]
	if len(dl.Body) != n || dl.ErrorCode != wire.CodeInvalidPayload || dl.ErrorMessage == "" ||
		!strings.HasPrefix(long, dl.ErrorMessage) || len(dl.ErrorMessage) >= queue.MaxErrorMessage {
		t.Fatalf("dead letter of %d bytes, code %s, message of %d bytes %q", len(dl.Body), dl.ErrorCode, len(dl.ErrorMessage), dl.ErrorMessage)
	}
	if st := inspect(t, e, "large"); st.Messages != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDeadLetterTooLargeKeepsItsBodyInTheObjectStore: a message a client
// stored on a queue right at the max payload cannot run (its call adds
// headers) and its dead letter does not fit even without its error
// message. It was published, refused, nak'ed and dead-lettered again for
// ever; now its body goes to object store III_DLQ_BODIES and its dead
// letter, without a body, says where, and the queue is empty. Redrive
// skips it: the body is not in it.
func TestDeadLetterTooLargeKeepsItsBodyInTheObjectStore(t *testing.T) {
	t.Parallel()
	const max = 4 << 10
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(max))
	e := enginetest.NewEngine(t, ns)
	rejecting(t, e)
	ctx := context.Background()
	msg := &nats.Msg{Subject: "iii.queue.huge", Header: nats.Header{}}
	msg.Header.Set(wire.HeaderContentType, wire.JSON.ContentType())
	msg.Header.Set(engine.HeaderFunctionID, "large::reject")
	body := []byte(`"` + strings.Repeat("a", max-wire.HeaderSize(msg.Header)-2) + `"`)
	msg.Data = body
	if _, err := e.EnsureStream(ctx, engine.QueueStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	ack, err := e.JetStream().PublishMsg(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	c := consume(t, e, "huge", fast()...)
	enginetest.Eventually(t, 5*time.Second, func() error {
		if got := c.Counters(); got.DeadLettered != 1 {
			return fmt.Errorf("counters %+v", got)
		}
		return nil
	})
	if got := c.Counters(); got.Retried != 0 {
		t.Errorf("counters %+v: retried", got)
	}
	dls := deadLetters(t, e, "huge")
	if len(dls) != 1 {
		t.Fatalf("%d dead letters", len(dls))
	}
	dl := dls[0]
	want := "huge/" + fmt.Sprint(ack.Sequence)
	if len(dl.Body) != 0 || dl.BodyObject != want || dl.BodySize != len(body) || dl.ErrorCode != wire.CodeInvalidPayload ||
		dl.ErrorMessage == "" || dl.FunctionID != "large::reject" {
		t.Fatalf("dead letter %+v: want no body, object %q of %d bytes, its error", dl, want, len(body))
	}
	obs, err := e.JetStream().ObjectStore(ctx, queue.DLQBodiesBucket)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := obs.GetBytes(ctx, dl.BodyObject)
	if err != nil || string(kept) != string(body) {
		t.Fatalf("object %q: %d bytes, %v: want the body", dl.BodyObject, len(kept), err)
	}
	if st := inspect(t, e, "huge"); st.Messages != 0 {
		t.Fatalf("stats %+v", st)
	}
	res, err := queue.Redrive(ctx, e, "huge")
	if err != nil || res != (queue.RedriveResult{Skipped: 1}) {
		t.Fatalf("Redrive = %+v, %v: want it skipped", res, err)
	}
}

// rejecting serves large::reject, which fails every call with a long
// non-retryable error, and returns the error's text.
func rejecting(t *testing.T, e *engine.Engine) string {
	t.Helper()
	w, err := e.Worker("large")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 2*queue.MaxErrorMessage)
	if err := w.Register(engine.Function{ID: "large::reject", Handler: func(context.Context, *engine.Request) (any, error) {
		return nil, wire.Errorf(wire.CodeInvalidPayload, "%s", long)
	}}); err != nil {
		t.Fatal(err)
	}
	return long
}

// TestLargestEnqueueDeadLettersAndRedrives: the largest message Enqueue
// accepts, with the longest dedup id, on a queue with a long name, is
// dead-lettered, redriven, and dead-lettered again (Enqueue keeps
// engine.QueueHeaderRoom free for those headers). Before, a message
// within ≈ 220 bytes of the limit could never be dead-lettered and was
// retried for ever.
func TestLargestEnqueueDeadLettersAndRedrives(t *testing.T) {
	t.Parallel()
	const max = 4 << 10
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(max))
	e := enginetest.NewEngine(t, ns)
	rejecting(t, e)
	ctx := context.Background()
	name := "q" + strings.Repeat("x", 99)
	dedup := strings.Repeat("d", 256)
	n := max
	for ; n > 0; n-- {
		err := e.Enqueue(ctx, name, "large::reject", engine.Raw(strings.Repeat("a", n)), engine.WithDedupID(dedup))
		if err == nil {
			break
		}
		if !errors.Is(err, wire.ErrInvalidPayload) {
			t.Fatal(err)
		}
	}
	c := consume(t, e, name, fast()...)
	enginetest.Eventually(t, 5*time.Second, func() error {
		if got := c.Counters(); got.DeadLettered != 1 {
			return fmt.Errorf("counters %+v", got)
		}
		return nil
	})
	if res, err := queue.Redrive(ctx, e, name); err != nil || res != (queue.RedriveResult{Redriven: 1}) {
		t.Fatalf("Redrive = %+v, %v", res, err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if got := c.Counters(); got.DeadLettered != 2 {
			return fmt.Errorf("counters %+v", got)
		}
		return nil
	})
	dls := deadLetters(t, e, name)
	if len(dls) != 1 || len(dls[0].Body) != n || dls[0].Redrives != 1 || dls[0].ErrorCode != wire.CodeInvalidPayload {
		t.Fatalf("dead letters %+v", dls)
	}
	if st := inspect(t, e, name); st.Messages != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A dead letter that cannot become a queue message again — one a client
// published straight onto iii.dlq.<name> up to the max payload (a
// redrive adds Iii-Redrives and its Nats-Msg-Id), or one over the queue
// stream's max message size — is skipped and counted, and the dead
// letters after it are redriven: its publish failed as unavailable,
// retryable though no retry could win, and Redrive stopped there, so
// every later dead letter of its queue was stuck behind it. Redriving it
// alone is a permanent invalid_payload.
func TestRedriveSkipsDeadLetterTooLargeForTheQueue(t *testing.T) {
	t.Parallel()
	const max = 4 << 10
	tests := []struct {
		name string
		// big is the body size of the oversized dead letter.
		big         func(h nats.Header) int
		queueStream jetstream.StreamConfig
	}{
		{"max payload", func(h nats.Header) int { return max - wire.HeaderSize(h) }, engine.QueueStreamConfig(1)},
		// Within the max payload once redriven, but without room for the
		// call's headers: it was redriven and dead-lettered again as
		// invalid_payload on its first delivery.
		{"no room for the call's headers", func(h nats.Header) int { return max - wire.HeaderSize(h) - 150 }, engine.QueueStreamConfig(1)},
		{"queue stream max message size", func(nats.Header) int { return 2 << 10 }, func() jetstream.StreamConfig {
			cfg := engine.QueueStreamConfig(1)
			cfg.MaxMsgSize = 1 << 10
			return cfg
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t, enginetest.WithMaxPayload(max))
			e := enginetest.NewEngine(t, ns)
			ctx := context.Background()
			if _, err := e.JetStream().CreateStream(ctx, tt.queueStream); err != nil {
				t.Fatal(err)
			}
			if _, err := queue.Serve(ctx, e); err != nil {
				t.Fatal(err)
			}
			var seqs []uint64
			for _, big := range []bool{false, true, false} {
				m := nats.NewMsg("iii.dlq.q")
				m.Header.Set(wire.HeaderContentType, wire.JSON.ContentType())
				m.Header.Set(engine.HeaderFunctionID, "a::b")
				m.Header.Set(queue.HeaderQueue, "q")
				m.Data = []byte(`{}`)
				if big {
					m.Data = []byte(strings.Repeat("a", tt.big(m.Header)))
				}
				ack, err := e.JetStream().PublishMsg(ctx, m)
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, ack.Sequence)
			}

			res, err := engine.Call[queue.RedriveResponse](ctx, e, queue.FnRedrive, queue.RedriveRequest{Queue: "q"})
			if err != nil || res.Redriven != 2 || res.Skipped != 1 {
				t.Fatalf("queue::redrive = %+v, %v: want 2 redriven, 1 skipped", res, err)
			}
			if dls := deadLetters(t, e, "q"); len(dls) != 1 || dls[0].Sequence != seqs[1] {
				t.Fatalf("dead letters left %+v, want the oversized one (%d)", dls, seqs[1])
			}
			if st := inspect(t, e, "q"); st.Messages != 2 {
				t.Fatalf("stats %+v, want the two others queued", st)
			}

			got, err := queue.Redrive(ctx, e, "q", queue.WithRedriveSequence(seqs[1]))
			if we := wire.From(err); !errors.Is(err, wire.ErrInvalidPayload) || we.Retryable || got != (queue.RedriveResult{Skipped: 1}) {
				t.Fatalf("redrive of the oversized one = %+v, %#v: want a permanent invalid_payload", got, we)
			}
		})
	}
}
