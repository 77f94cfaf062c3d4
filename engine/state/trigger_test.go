package state_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/state"
	"github.com/iii-on-nats/iii/engine/wire"
)

// fastRetry keeps redeliveries quick in tests.
var fastRetry = state.WithBackoff(10*time.Millisecond, 50*time.Millisecond)

// recorder is a function that records the events it receives; fail makes
// it fail the next n calls.
type recorder struct {
	mu     sync.Mutex
	events []state.Event
	traces []trace.TraceID
	calls  atomic.Int64
	fail   atomic.Int64
}

func (r *recorder) handler() engine.Handler {
	return engine.Typed(func(ctx context.Context, ev state.Event) (struct{}, error) {
		r.calls.Add(1)
		if r.fail.Add(-1) >= 0 {
			return struct{}{}, wire.Errorf(wire.CodeUnavailable, "failing on purpose")
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, ev)
		r.traces = append(r.traces, trace.SpanContextFromContext(ctx).TraceID())
		return struct{}{}, nil
	})
}

func (r *recorder) snapshot() []state.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]state.Event(nil), r.events...)
}

// waitEvents waits until r has n events and returns them.
func (r *recorder) waitEvents(t testing.TB, n int) []state.Event {
	t.Helper()
	enginetest.Eventually(t, 5*time.Second, func() error {
		if got := len(r.snapshot()); got < n {
			return fmt.Errorf("%d of %d events", got, n)
		}
		return nil
	})
	return r.snapshot()
}

// startHandler registers fnID on a new worker of e, served by r.
func startHandler(t testing.TB, e *engine.Engine, worker, fnID string, r *recorder) *engine.Worker {
	t.Helper()
	w, err := e.Worker(worker)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: fnID, Handler: r.handler()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

func onChange(t testing.TB, v *env, e *engine.Engine, tr state.Trigger, opts ...state.TriggerOption) *state.Subscription {
	t.Helper()
	if e == nil {
		e = v.e
	}
	store := v.store
	if e != v.e {
		store = newStore(t, e)
	}
	sub, err := state.OnChange(context.Background(), e, store, tr, append([]state.TriggerOption{fastRetry}, opts...)...)
	if err != nil {
		t.Fatalf("OnChange: %v", err)
	}
	t.Cleanup(sub.Stop)
	return sub
}

// eventString renders an event for comparison; values as JSON.
func eventString(t testing.TB, ev state.Event) string {
	return fmt.Sprintf("%s %s/%s %s -> %s", ev.EventType, ev.Scope, ev.Key, toJSON(t, ev.OldValue), toJSON(t, ev.NewValue))
}

func TestTriggerEventTypes(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	r := &recorder{}
	startHandler(t, v.e, "h", "test::on_change", r)
	onChange(t, v, nil, state.Trigger{Scope: "orders", FunctionID: "test::on_change"}, state.WithMaxAckPending(1))

	s := v.store
	mustDo(t, func() error { _, _, err := s.Set(ctx, "orders", "o/1", map[string]any{"n": 1}); return err })
	mustDo(t, func() error {
		_, _, err := s.Update(ctx, "orders", "o/1", []state.Op{state.Increment("n", 1)})
		return err
	})
	mustDo(t, func() error { _, err := s.Delete(ctx, "orders", "o/1"); return err })
	mustDo(t, func() error { _, _, err := s.Set(ctx, "orders", "o/1", "back"); return err })
	mustDo(t, func() error { _, _, err := s.Set(ctx, "other", "o/1", "ignored"); return err })

	evs := r.waitEvents(t, 4)
	want := []string{
		`state:created orders/o/1 null -> {"n":1}`,
		`state:updated orders/o/1 {"n":1} -> {"n":2}`,
		`state:deleted orders/o/1 {"n":2} -> null`,
		`state:created orders/o/1 null -> "back"`,
	}
	for i, w := range want {
		if got := eventString(t, evs[i]); got != w {
			t.Errorf("event %d = %s, want %s", i, got, w)
		}
		if evs[i].OldValueUnavailable || evs[i].NewValueUnavailable {
			t.Errorf("event %d flags a missing value: %+v", i, evs[i])
		}
	}
	if evs[0].Revision == 0 || evs[1].OldRevision != evs[0].Revision || evs[2].OldRevision != evs[1].Revision {
		t.Errorf("revisions: %+v", evs)
	}
	if len(evs) != 4 {
		t.Fatalf("%d events, want 4 (other scope leaked?)", len(evs))
	}
}

func mustDo(t testing.TB, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
}

// TestTriggerHandlerOffline: the handler's worker is down when the write
// happens; the event is delivered with the right values when it returns.
func TestTriggerHandlerOffline(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	r := &recorder{}
	w := startHandler(t, v.e, "h", "test::on_change", r)
	onChange(t, v, nil, state.Trigger{Scope: "s", FunctionID: "test::on_change"})

	mustDo(t, func() error { _, _, err := v.store.Set(ctx, "s", "k", 1); return err })
	r.waitEvents(t, 1)

	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mustDo(t, func() error { _, _, err := v.store.Set(ctx, "s", "k", 2); return err })
	// The trigger is now retrying against function_not_found.
	enginetest.Eventually(t, 5*time.Second, func() error {
		if info := v.consumerInfo(t, subName(t, "s", "", "test::on_change")); info.NumRedelivered == 0 {
			return errors.New("no redelivery yet")
		}
		return nil
	})
	startHandler(t, v.e, "h", "test::on_change", r)
	evs := r.waitEvents(t, 2)
	if got := eventString(t, evs[1]); got != `state:updated s/k 1 -> 2` {
		t.Fatalf("event after the handler came back = %s", got)
	}
}

func subName(t testing.TB, scope, pattern, fn string) string {
	t.Helper()
	n, err := state.ConsumerName(state.Trigger{Scope: scope, KeyPattern: pattern, FunctionID: fn})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTriggerResume: no replica of the trigger runs when the write
// happens; the next start of the trigger delivers it.
func TestTriggerResume(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	r := &recorder{}
	startHandler(t, v.e, "h", "test::on_change", r)
	tr := state.Trigger{Scope: "s", FunctionID: "test::on_change"}
	sub := onChange(t, v, nil, tr)
	mustDo(t, func() error { _, _, err := v.store.Set(ctx, "s", "k", "a"); return err })
	r.waitEvents(t, 1)
	sub.Stop()

	mustDo(t, func() error { _, _, err := v.store.Set(ctx, "s", "k", "b"); return err })
	mustDo(t, func() error { _, err := v.store.Delete(ctx, "s", "k"); return err })
	onChange(t, v, nil, tr, state.WithMaxAckPending(1))
	evs := r.waitEvents(t, 3)
	if got := eventString(t, evs[1]) + " | " + eventString(t, evs[2]); got != `state:updated s/k "a" -> "b" | state:deleted s/k "b" -> null` {
		t.Fatalf("resumed events = %s", got)
	}
}

// TestTriggerRetries: a handler failing twice gets the event three times,
// then never again.
func TestTriggerRetries(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	r := &recorder{}
	r.fail.Store(2)
	startHandler(t, v.e, "h", "test::flaky", r)
	sub := onChange(t, v, nil, state.Trigger{Scope: "s", KeyPattern: "k", FunctionID: "test::flaky"})

	mustDo(t, func() error { _, _, err := v.store.Set(ctx, "s", "k", 1); return err })
	evs := r.waitEvents(t, 1)
	if got := eventString(t, evs[0]); got != `state:created s/k null -> 1` {
		t.Fatalf("event = %s", got)
	}
	// Nothing left to deliver: no pending, nothing waiting for an ack.
	enginetest.Eventually(t, 5*time.Second, func() error {
		info := v.consumerInfo(t, sub.Consumer())
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("pending %d, ack pending %d", info.NumPending, info.NumAckPending)
		}
		return nil
	})
	if n := r.calls.Load(); n != 3 {
		t.Fatalf("handler called %d times, want 3", n)
	}
}

// TestTriggerReplicas: two replicas of one trigger share one consumer; each
// event is handled once.
func TestTriggerReplicas(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	r := &recorder{}
	startHandler(t, v.e, "h", "test::on_change", r)
	tr := state.Trigger{Scope: "s", FunctionID: "test::on_change"}
	e2 := enginetest.NewEngine(t, v.ns)
	a := onChange(t, v, nil, tr)
	b := onChange(t, v, e2, tr)
	if a.Consumer() != b.Consumer() {
		t.Fatalf("replicas bound %q and %q", a.Consumer(), b.Consumer())
	}
	const n = 40
	for i := range n {
		mustDo(t, func() error { _, _, err := v.store.Set(ctx, "s", fmt.Sprintf("k%d", i), i); return err })
	}
	evs := r.waitEvents(t, n)
	enginetest.Eventually(t, 5*time.Second, func() error {
		if info := v.consumerInfo(t, a.Consumer()); info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("ack pending %d, pending %d", info.NumAckPending, info.NumPending)
		}
		return nil
	})
	seen := map[string]int{}
	for _, ev := range r.snapshot() {
		seen[ev.Key]++
	}
	if len(evs) != n || len(seen) != n {
		t.Fatalf("%d events for %d keys, want %d each once", len(r.snapshot()), len(seen), n)
	}
	streams, err := v.e.JetStream().Stream(ctx, "KV_"+v.store.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	info, err := streams.Info(ctx)
	if err != nil || info.State.Consumers != 1 {
		t.Fatalf("stream has %d consumers, want 1 (%v)", info.State.Consumers, err)
	}
}

func TestTriggerKeyPattern(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	exact, below := &recorder{}, &recorder{}
	startHandler(t, v.e, "h1", "test::exact", exact)
	startHandler(t, v.e, "h2", "test::below", below)
	onChange(t, v, nil, state.Trigger{Scope: "s", KeyPattern: "a", FunctionID: "test::exact"}, state.WithMaxAckPending(1))
	onChange(t, v, nil, state.Trigger{Scope: "s", KeyPattern: "a/", FunctionID: "test::below"}, state.WithMaxAckPending(1))
	for _, k := range []string{"ab", "a", "b/a", "a/b", "a/b/c"} {
		mustDo(t, func() error { _, _, err := v.store.Set(ctx, "s", k, k); return err })
	}
	keys := func(evs []state.Event) (out []string) {
		for _, ev := range evs {
			out = append(out, ev.Key)
		}
		return out
	}
	if got := fmt.Sprint(keys(exact.waitEvents(t, 3))); got != "[a a/b a/b/c]" {
		t.Errorf("pattern a saw %s", got)
	}
	if got := fmt.Sprint(keys(below.waitEvents(t, 2))); got != "[a/b a/b/c]" {
		t.Errorf("pattern a/ saw %s", got)
	}
	// A second trigger of one function on another pattern is its own consumer.
	if subName(t, "s", "a", "test::x") == subName(t, "s", "a/", "test::x") {
		t.Fatal("two patterns share a consumer name")
	}
}

// TestTriggerOldValueUnavailable: when the bucket no longer holds the old
// revision, the event says so instead of inventing a value.
func TestTriggerOldValueUnavailable(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	v := &env{ns: ns, e: e, store: newStore(t, e, state.WithHistory(2))}
	ctx := testCtx(t)
	r := &recorder{}
	startHandler(t, e, "h", "test::on_change", r)
	tr := state.Trigger{Scope: "s", FunctionID: "test::on_change"}
	onChange(t, v, nil, tr).Stop() // create the consumer, then go away
	for i := 1; i <= 4; i++ {
		mustDo(t, func() error { _, _, err := v.store.Set(ctx, "s", "k", i); return err })
	}
	onChange(t, v, nil, tr, state.WithMaxAckPending(1))
	evs := r.waitEvents(t, 2)
	if !evs[0].OldValueUnavailable || evs[0].OldValue != nil || eventString(t, evs[0]) != `state:updated s/k null -> 3` {
		t.Errorf("first retained event = %+v", evs[0])
	}
	if evs[1].OldValueUnavailable || eventString(t, evs[1]) != `state:updated s/k 3 -> 4` {
		t.Errorf("second event = %+v", evs[1])
	}
}

// TestTriggerForeignWrites: writes by clients that do not use this package
// (nats kv put) are classified from the key's history.
func TestTriggerForeignWrites(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	r := &recorder{}
	startHandler(t, v.e, "h", "test::on_change", r)
	onChange(t, v, nil, state.Trigger{Scope: "s", FunctionID: "test::on_change"}, state.WithMaxAckPending(1))
	kv := v.store.KeyValue()
	mustDo(t, func() error { _, err := kv.Put(ctx, "s.k", []byte(`{"a":1}`)); return err })
	mustDo(t, func() error { _, err := kv.Put(ctx, "s.k", []byte(`not json`)); return err })
	mustDo(t, func() error { return kv.Delete(ctx, "s.k") })
	evs := r.waitEvents(t, 3)
	want := []string{
		`state:created s/k null -> {"a":1}`,
		`state:updated s/k {"a":1} -> "not json"`,
		`state:deleted s/k "not json" -> null`,
	}
	for i, w := range want {
		if got := eventString(t, evs[i]); got != w {
			t.Errorf("event %d = %s, want %s", i, got, w)
		}
	}
}

// TestOnChangeFunc: the Go-callback variant, including a panicking
// callback, which is retried like an error.
func TestOnChangeFunc(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	var calls atomic.Int64
	got := make(chan state.Event, 10)
	sub, err := state.OnChangeFunc(ctx, v.e, v.store, state.Trigger{Scope: "s", FunctionID: "local::watch"},
		func(ctx context.Context, ev state.Event) error {
			if calls.Add(1) == 1 {
				panic("first call panics")
			}
			got <- ev
			return nil
		}, fastRetry)
	if err != nil {
		t.Fatal(err)
	}
	mustDo(t, func() error { _, _, err := v.store.Set(ctx, "s", "k", map[string]any{"x": 1}); return err })
	select {
	case ev := <-got:
		if eventString(t, ev) != `state:created s/k null -> {"x":1}` {
			t.Fatalf("event = %s", eventString(t, ev))
		}
		// Go callbacks get decoded JSON with exact numbers: integers are int64.
		if ev.NewValue.(map[string]any)["x"] != int64(1) {
			t.Fatalf("x = %T", ev.NewValue.(map[string]any)["x"])
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	if err := sub.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 {
		t.Fatalf("%d calls, want 2", calls.Load())
	}
}

// TestTriggerTraceContext: the write's trace context reaches the handler.
func TestTriggerTraceContext(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	r := &recorder{}
	startHandler(t, v.e, "h", "test::on_change", r)
	onChange(t, v, nil, state.Trigger{Scope: "s", FunctionID: "test::on_change"})
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(testCtx(t), sc)
	mustDo(t, func() error { _, _, err := v.store.Set(ctx, "s", "k", 1); return err })
	r.waitEvents(t, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.traces[0] != tid {
		t.Fatalf("handler trace id %s, want %s", r.traces[0], tid)
	}
}

func TestTriggerBadInput(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	for _, tr := range []state.Trigger{
		{Scope: "a.b", FunctionID: "f::g"},
		{Scope: "*", FunctionID: "f::g"},
		{Scope: "s", KeyPattern: "a//b", FunctionID: "f::g"},
		{Scope: "s", FunctionID: ""},
		{Scope: "s", FunctionID: "a b"},
	} {
		if _, err := state.OnChange(ctx, v.e, v.store, tr); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%+v: %v", tr, err)
		}
	}
	tr := state.Trigger{Scope: "s", FunctionID: "f::g"}
	for i, opt := range []state.TriggerOption{
		state.WithBackoff(0, time.Second), state.WithBackoff(time.Second, time.Millisecond), state.WithMaxDeliver(0),
		state.WithAckWait(0), state.WithCallTimeout(0), state.WithConcurrency(0), state.WithMaxAckPending(0),
	} {
		if _, err := state.OnChange(ctx, v.e, v.store, tr, opt); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("option %d: %v", i, err)
		}
	}
	if _, err := state.OnChange(ctx, v.e, v.store, tr, state.WithCallTimeout(time.Minute), state.WithAckWait(time.Second)); !errors.Is(err, engine.ErrInvalidOption) {
		t.Errorf("ack wait below call timeout: %v", err)
	}
}

// TestTriggerDelete: deleting the subscription removes the consumer.
func TestTriggerDelete(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	sub := onChange(t, v, nil, state.Trigger{Scope: "s", FunctionID: "f::g"}, state.WithMaxDeliver(3))
	if err := sub.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.JetStream().Consumer(ctx, "KV_"+v.store.Bucket(), sub.Consumer()); err == nil {
		t.Fatal("consumer still exists")
	}
}

// TestTriggerStopAfterDisconnect: Stop returns even when the connection is
// already gone.
func TestTriggerStopAfterDisconnect(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	v := &env{ns: ns, e: e, store: newStore(t, e)}
	sub, err := state.OnChange(testCtx(t), e, v.store, state.Trigger{Scope: "s", FunctionID: "f::g"})
	if err != nil {
		t.Fatal(err)
	}
	e.Conn().Close()
	done := make(chan struct{})
	go func() { sub.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop hangs after the connection closed")
	}
}

func TestConsumerName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("segment::", 28) + "end"
	n, err := state.ConsumerName(state.Trigger{Scope: "s", FunctionID: long})
	if err != nil || len(n) > 128 || strings.ContainsAny(n, ".*> ") {
		t.Fatalf("ConsumerName(long) = %q (%d), %v", n, len(n), err)
	}
	a, _ := state.ConsumerName(state.Trigger{Scope: "s", FunctionID: "orders::on_change"})
	b, _ := state.ConsumerName(state.Trigger{Scope: "s", FunctionID: "orders::on_change"})
	c, _ := state.ConsumerName(state.Trigger{Scope: "t", FunctionID: "orders::on_change"})
	if a != b || a == c || !strings.HasPrefix(a, "state_orders~~on_change_") {
		t.Fatalf("names %q %q %q", a, b, c)
	}
}

// TestTriggerQueuedEventNotRedeliveredWhileRunning: an event that waits for
// a call slot keeps a full ack wait for its own call, so the server does not
// hand it out a second time while that call runs.
func TestTriggerQueuedEventNotRedeliveredWhileRunning(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	ctx := testCtx(t)
	const call = 700 * time.Millisecond
	var mu sync.Mutex
	runs := map[string]int{}
	done := make(chan struct{}, 4)
	// One slot, a call of 0.7 s, an ack wait of 1.1 s: the second event
	// waits 0.7 s for the slot, then runs 0.7 s, 1.4 s after its delivery.
	sub, err := state.OnChangeFunc(ctx, v.e, v.store, state.Trigger{Scope: "q", FunctionID: "local::slow"},
		func(ctx context.Context, ev state.Event) error {
			mu.Lock()
			runs[ev.Key]++
			mu.Unlock()
			time.Sleep(call)
			done <- struct{}{}
			return nil
		}, state.WithConcurrency(1), state.WithCallTimeout(time.Second), state.WithAckWait(1100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Stop)
	for _, k := range []string{"a", "b"} {
		mustDo(t, func() error { _, _, err := v.store.Set(ctx, "q", k, 1); return err })
	}
	for range 2 {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("events not handled")
		}
	}
	// A redelivery would come 1.1 s after the second event's delivery and
	// run once the slot frees: give it the time to show.
	time.Sleep(2 * call)
	mu.Lock()
	defer mu.Unlock()
	if runs["a"] != 1 || runs["b"] != 1 {
		t.Fatalf("runs = %v, want each event once", runs)
	}
}
