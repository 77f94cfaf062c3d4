package state_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/state"
)

// loggedEnv is newEnv with the engine's log kept in a buffer.
func loggedEnv(t *testing.T) (*env, *enginetest.Buffer) {
	t.Helper()
	ns := enginetest.RunServer(t)
	var buf enginetest.Buffer
	e := enginetest.NewEngine(t, ns, engine.WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	return &env{ns: ns, e: e, store: newStore(t, e)}, &buf
}

// runs counts the successful calls per key.
func runs(evs []state.Event) map[string]int {
	n := map[string]int{}
	for _, ev := range evs {
		n[ev.Key]++
	}
	return n
}

// waitRuns waits until r's successful calls per key are want, then checks
// they stay so a while (no event runs a second time).
func waitRuns(t *testing.T, r *recorder, want map[string]int) {
	t.Helper()
	enginetest.Eventually(t, 10*time.Second, func() error {
		if got := runs(r.snapshot()); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("runs %v, want %v", got, want)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	if got := runs(r.snapshot()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
}

// TestTriggerConsumerDeleted: a trigger whose consumer is deleted under it
// (nats consumer rm) notices, says so, re-creates the consumer and goes
// on: an event acked before is not called again, one that was failing is
// still delivered, one written after arrives, and the trigger can be
// started again on the re-created consumer.
func TestTriggerConsumerDeleted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		checkEvery time.Duration // how soon a running trigger asks for its consumer
	}{
		// The consume reports the deletion at once.
		{"reported", time.Hour},
		// The floor is learnt before the deletion.
		{"floor known", 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, logs := loggedEnv(t)
			ctx := testCtx(t)
			r := &recorder{}
			startHandler(t, v.e, "h", "test::on_change", r)
			// Written before the trigger: never delivered, not even from
			// a re-created consumer.
			mustDo(t, func() error { _, _, err := v.store.Set(ctx, "orders", "before", 1); return err })
			tr := state.Trigger{Scope: "orders", FunctionID: "test::on_change"}
			sub := onChange(t, v, nil, tr, state.WithCheckEvery(tc.checkEvery))
			mustDo(t, func() error { _, _, err := v.store.Set(ctx, "orders", "a", 1); return err })
			r.waitEvents(t, 1)
			// b fails until after the deletion.
			r.fail.Store(1 << 30)
			mustDo(t, func() error { _, _, err := v.store.Set(ctx, "orders", "b", 1); return err })
			enginetest.Eventually(t, 5*time.Second, func() error {
				if r.calls.Load() < 3 {
					return fmt.Errorf("%d calls", r.calls.Load())
				}
				return nil
			})
			time.Sleep(200 * time.Millisecond) // a floor check or two
			if err := v.e.JetStream().DeleteConsumer(ctx, "KV_"+v.store.Bucket(), sub.Consumer()); err != nil {
				t.Fatal(err)
			}
			r.fail.Store(0)
			mustDo(t, func() error { _, _, err := v.store.Set(ctx, "orders", "c", 1); return err })
			waitRuns(t, r, map[string]int{"a": 1, "b": 1, "c": 1})
			if l := logs.String(); !strings.Contains(l, "state trigger lost its consumer") || !strings.Contains(l, "function_id=test::on_change") {
				t.Fatalf("no warning naming the trigger:\n%s", l)
			}
			// Another replica starts on the re-created consumer.
			onChange(t, v, nil, tr)
			mustDo(t, func() error { _, _, err := v.store.Set(ctx, "orders", "d", 1); return err })
			waitRuns(t, r, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1})
		})
	}
}

// TestTriggerStreamRecreated: the bucket's stream is deleted and created
// again (its sequences start over); the trigger re-creates its consumer on
// the new stream and delivers what is written there, from its start.
func TestTriggerStreamRecreated(t *testing.T) {
	t.Parallel()
	v, logs := loggedEnv(t)
	ctx := testCtx(t)
	r := &recorder{}
	startHandler(t, v.e, "h", "test::on_change", r)
	// A stream deletion is not always reported to the consume: the trigger
	// finds it when it next looks at its consumer.
	onChange(t, v, nil, state.Trigger{Scope: "orders", FunctionID: "test::on_change"}, state.WithCheckEvery(100*time.Millisecond))
	for _, k := range []string{"a", "b", "c"} {
		mustDo(t, func() error { _, _, err := v.store.Set(ctx, "orders", k, 1); return err })
	}
	r.waitEvents(t, 3)
	if err := v.e.JetStream().DeleteStream(ctx, "KV_"+v.store.Bucket()); err != nil {
		t.Fatal(err)
	}
	store := newStore(t, v.e) // creates the bucket again
	// Sequences 1 and 2 again: neither skipped as done on the old stream.
	for _, k := range []string{"x", "y"} {
		mustDo(t, func() error { _, _, err := store.Set(ctx, "orders", k, 1); return err })
	}
	waitRuns(t, r, map[string]int{"a": 1, "b": 1, "c": 1, "x": 1, "y": 1})
	if !strings.Contains(logs.String(), "state trigger lost its consumer") {
		t.Fatalf("no warning:\n%s", logs.String())
	}
}

// TestTriggerLostConsumerBackoff: while its consumer cannot be re-created
// (the bucket's stream is gone), a trigger retries with a growing delay
// instead of spinning, and recovers when the stream is back.
func TestTriggerLostConsumerBackoff(t *testing.T) {
	t.Parallel()
	v, logs := loggedEnv(t)
	ctx := testCtx(t)
	r := &recorder{}
	startHandler(t, v.e, "h", "test::on_change", r)
	onChange(t, v, nil, state.Trigger{Scope: "orders", FunctionID: "test::on_change"}, state.WithCheckEvery(100*time.Millisecond))
	if err := v.e.JetStream().DeleteStream(ctx, "KV_"+v.store.Bucket()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	// Attempts after 0.5, 1.5, 3.5 s: two in 2 s.
	if n := strings.Count(logs.String(), "could not re-create its consumer"); n == 0 || n > 3 {
		t.Fatalf("%d failed attempts in 2 s:\n%s", n, logs.String())
	}
	store := newStore(t, v.e)
	mustDo(t, func() error { _, _, err := store.Set(ctx, "orders", "a", 1); return err })
	waitRuns(t, r, map[string]int{"a": 1})
}

// TestOnChangeWaitsOutUnavailableJetStream: OnChange started while
// JetStream does not answer (here: the hub serving it is down, so the leaf
// node the engine is on has no responders) retries until it is back,
// instead of failing on the first error.
func TestOnChangeWaitsOutUnavailableJetStream(t *testing.T) {
	t.Parallel()
	ports := enginetest.FreePorts(t, 1)
	dir := t.TempDir()
	hubOpts := []enginetest.ServerOption{enginetest.WithStoreDir(dir), func(o *server.Options) {
		o.LeafNode.Host, o.LeafNode.Port = "127.0.0.1", ports[0]
		o.JsAccDefaultDomain = map[string]string{"$G": ""} // JetStream API through the leaf node
	}}
	hub := enginetest.RunServer(t, hubOpts...)
	leaf := enginetest.RunServer(t, func(o *server.Options) {
		o.JetStream = false
		o.JsAccDefaultDomain = map[string]string{"$G": ""}
		o.LeafNode.ReconnectInterval = 50 * time.Millisecond
		o.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{{Scheme: "nats-leaf", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}}}}
	})
	enginetest.Eventually(t, 5*time.Second, func() error {
		if leaf.NumLeafNodes() != 1 {
			return fmt.Errorf("leaf not connected")
		}
		return nil
	})
	e := enginetest.NewEngine(t, leaf)
	store := newStore(t, e)
	start := enginetest.StopServer(t, hub, hubOpts...)
	go func() {
		time.Sleep(time.Second)
		start()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	got := make(chan state.Event, 1)
	t0 := time.Now()
	sub, err := state.OnChangeFunc(ctx, e, store, state.Trigger{Scope: "s", FunctionID: "local::watch"},
		func(_ context.Context, ev state.Event) error { got <- ev; return nil })
	if err != nil {
		t.Fatalf("OnChange while JetStream is away: %v", err)
	}
	t.Logf("OnChange took %v", time.Since(t0))
	t.Cleanup(sub.Stop)
	mustDo(t, func() error { _, _, err := store.Set(ctx, "s", "k", 1); return err })
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
}
