package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// busCalls counts the function calls that travel over ns's bus.
func busCalls(t *testing.T, ns *server.Server) *atomic.Int64 {
	t.Helper()
	nc := enginetest.Connect(t, ns)
	var n atomic.Int64
	if _, err := nc.Subscribe("iii.fn.>", func(*nats.Msg) { n.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// localPair returns a worker on an engine with local calls on and a
// caller engine with them on, on one server.
func localPair(t *testing.T, name string, calleeOpts ...engine.Option) (caller *engine.Engine, w *engine.Worker) {
	t.Helper()
	ns := enginetest.RunServer(t)
	callee := enginetest.NewEngine(t, ns, append([]engine.Option{engine.WithLocalCalls(true)}, calleeOpts...)...)
	caller = enginetest.NewEngine(t, ns, engine.WithLocalCalls(true))
	w, err := callee.Worker(name)
	if err != nil {
		t.Fatal(err)
	}
	return caller, w
}

// serveLocalTest registers the test functions on a worker of e.
func serveLocalTest(t *testing.T, e *engine.Engine, opts ...engine.WorkerOption) *engine.Worker {
	t.Helper()
	w, err := e.Worker("local", opts...)
	if err != nil {
		t.Fatal(err)
	}
	type echoReq struct {
		Text string `json:"text"`
	}
	for _, f := range []engine.Function{
		{ID: "t::echo", Handler: engine.Typed(func(_ context.Context, r echoReq) (echoReq, error) { return r, nil })},
		{ID: "t::refuse", Handler: func(context.Context, *engine.Request) (any, error) {
			return nil, wire.Errorf(wire.CodeInvalidPayload, "no thanks")
		}},
		{ID: "t::panic", Handler: func(context.Context, *engine.Request) (any, error) { panic("boom") }},
	} {
		if err := w.Register(f); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func TestLocalCalls(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name           string
		caller, callee bool // WithLocalCalls on each side
		wantBus        int64
	}{
		{"both on", true, true, 0},
		{"both off", false, false, 3},
		{"caller only", true, false, 3},
		{"function's engine only", false, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			bus := busCalls(t, ns)
			callee := enginetest.NewEngine(t, ns, engine.WithLocalCalls(c.callee))
			caller := enginetest.NewEngine(t, ns, engine.WithLocalCalls(c.caller))
			serveLocalTest(t, callee)
			ctx := context.Background()

			var got map[string]string
			if err := caller.Trigger(ctx, "t::echo", map[string]string{"text": "hi"}, &got); err != nil || got["text"] != "hi" {
				t.Fatalf("t::echo = %v, %v", got, err)
			}
			err := caller.Trigger(ctx, "t::refuse", nil, nil)
			if we := wire.From(err); we.Code != wire.CodeInvalidPayload || we.Message != "no thanks" {
				t.Fatalf("t::refuse = %v", err)
			}
			err = caller.Trigger(ctx, "t::panic", nil, nil)
			if we := wire.From(err); we.Code != wire.CodeInternal {
				t.Fatalf("t::panic = %v", err)
			}
			time.Sleep(20 * time.Millisecond) // let the watcher see what went over the bus
			if n := bus.Load(); n != c.wantBus {
				t.Fatalf("%d calls went over the bus, want %d", n, c.wantBus)
			}
		})
	}
}

// TestLocalCallsStayOnTheirServer: a function served in this process on
// another server (another bus) is not called locally.
func TestLocalCallsStayOnTheirServer(t *testing.T) {
	t.Parallel()
	ns1, ns2 := enginetest.RunServer(t), enginetest.RunServer(t)
	serveLocalTest(t, enginetest.NewEngine(t, ns1, engine.WithLocalCalls(true)))
	caller := enginetest.NewEngine(t, ns2, engine.WithLocalCalls(true))
	err := caller.Trigger(context.Background(), "t::echo", map[string]string{"text": "hi"}, nil)
	if we := wire.From(err); we.Code != wire.CodeFunctionNotFound {
		t.Fatalf("a call on another server's bus = %v, want function_not_found", err)
	}
}

// TestLocalCallsAfterClose: a closed worker, or an unregistered function,
// is no longer called locally; the call goes over the bus, where nobody
// serves it.
func TestLocalCallsAfterClose(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	callee := enginetest.NewEngine(t, ns, engine.WithLocalCalls(true))
	caller := enginetest.NewEngine(t, ns, engine.WithLocalCalls(true))
	w := serveLocalTest(t, callee)
	ctx := context.Background()
	if err := w.Unregister("t::echo"); err != nil {
		t.Fatal(err)
	}
	if we := wire.From(caller.Trigger(ctx, "t::echo", nil, nil)); we.Code != wire.CodeFunctionNotFound {
		t.Fatalf("an unregistered function = %v, want function_not_found", we)
	}
	if err := caller.Trigger(ctx, "t::refuse", nil, nil); wire.From(err).Code != wire.CodeInvalidPayload {
		t.Fatalf("the worker's other function = %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The service's subscriptions drain asynchronously: until the server
	// has taken them away, a call over the bus may still reach them. A
	// local call would reach the closed worker for ever.
	enginetest.Eventually(t, 5*time.Second, func() error {
		if we := wire.From(caller.Trigger(ctx, "t::refuse", nil, nil)); we.Code != wire.CodeFunctionNotFound {
			return fmt.Errorf("a closed worker's function = %v, want function_not_found", we)
		}
		return nil
	})
}

// TestLocalCallsTwoReplicas: two workers of one process serving the same
// function on the same server: calls stay local while either serves it,
// whichever closes first.
func TestLocalCallsTwoReplicas(t *testing.T) {
	t.Parallel()
	for _, first := range []int{0, 1} {
		t.Run(fmt.Sprintf("close %d first", first), func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			bus := busCalls(t, ns)
			caller := enginetest.NewEngine(t, ns, engine.WithLocalCalls(true))
			ws := []*engine.Worker{
				serveLocalTest(t, enginetest.NewEngine(t, ns, engine.WithLocalCalls(true))),
				serveLocalTest(t, enginetest.NewEngine(t, ns, engine.WithLocalCalls(true))),
			}
			ctx := context.Background()
			echo := func() {
				t.Helper()
				var got map[string]string
				if err := caller.Trigger(ctx, "t::echo", map[string]string{"text": "hi"}, &got); err != nil || got["text"] != "hi" {
					t.Fatalf("t::echo = %v, %v", got, err)
				}
			}
			echo()
			if err := ws[first].Close(ctx); err != nil {
				t.Fatal(err)
			}
			echo()
			time.Sleep(20 * time.Millisecond) // let the watcher see what went over the bus
			if n := bus.Load(); n != 0 {
				t.Fatalf("%d calls went over the bus, want none", n)
			}
		})
	}
}

// TestLocalCallGivesUp: a caller whose context ends gets its error at once,
// as over the bus, and the handler is cancelled.
func TestLocalCallGivesUp(t *testing.T) {
	t.Parallel()
	caller, w := localPair(t, "slow")
	cancelled := make(chan struct{})
	if err := w.Register(engine.Function{ID: "t::wait", Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := caller.Trigger(ctx, "t::wait", nil, nil)
	if we := wire.From(err); we.Code != wire.CodeTimeout {
		t.Fatalf("a call that ran out of time = %v, want timeout", err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler was not cancelled")
	}
}

// TestLocalCallsConcurrency: the worker's concurrency bound holds for local
// calls; a call waiting for a slot gives up with its context.
func TestLocalCallsConcurrency(t *testing.T) {
	t.Parallel()
	caller, w := localPair(t, "one", engine.WithConcurrency(1))
	var running, most atomic.Int64
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	if err := w.Register(engine.Function{ID: "t::one", Handler: func(context.Context, *engine.Request) (any, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		entered <- struct{}{}
		<-release
		return map[string]int{}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() { errs <- caller.Trigger(context.Background(), "t::one", nil, nil) })
	}
	<-entered
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := caller.Trigger(short, "t::one", nil, nil); wire.From(err).Code != wire.CodeTimeout {
		t.Fatalf("a call waiting for a slot past its deadline = %v, want timeout", err)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("%d handlers ran at once, bound 1", m)
	}
}

// TestLocalCallCopiesRawBody: a handler of a TriggerRaw call gets its own
// copy of the body, as over the bus.
func TestLocalCallCopiesRawBody(t *testing.T) {
	t.Parallel()
	caller, w := localPair(t, "keep")
	var kept []byte
	if err := w.Register(engine.Function{ID: "t::keep", Handler: func(_ context.Context, r *engine.Request) (any, error) {
		kept = r.Data
		return engine.Raw(`{}`), nil
	}}); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"a":1}`)
	if _, _, err := caller.TriggerRaw(context.Background(), "t::keep", body, wire.JSON); err != nil {
		t.Fatal(err)
	}
	copy(body, `{"b":2}`)
	if string(kept) != `{"a":1}` {
		t.Fatalf("the handler's body changed with the caller's buffer: %s", kept)
	}
}

// TestBeforeBus: a call's BeforeBus hook runs once, before its request
// goes on the bus, and not for a call served locally; a hook's error
// fails the call unsent; the handler's own calls do not carry the hook.
func TestBeforeBus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		local    bool  // local calls on both engines
		hookErr  error // what the hook returns
		wantHook int64
		wantRun  int64 // handler runs
		wantCode wire.Code
	}{
		{"over the bus", false, nil, 1, 1, ""},
		{"local", true, nil, 0, 1, ""},
		{"hook fails", false, wire.Errorf(wire.CodeUnavailable, "cannot subscribe"), 1, 0, wire.CodeUnavailable},
		{"hook fails, local", true, wire.Errorf(wire.CodeUnavailable, "cannot subscribe"), 0, 1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			callee := enginetest.NewEngine(t, ns, engine.WithLocalCalls(c.local))
			caller := enginetest.NewEngine(t, ns, engine.WithLocalCalls(c.local))
			serveLocalTest(t, callee)
			// t::outer calls t::echo on the bus (its engine has no local
			// calls) with the context it was given.
			other := enginetest.NewEngine(t, ns)
			var runs atomic.Int64
			w, err := callee.Worker("outer")
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Register(engine.Function{ID: "t::outer", Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
				runs.Add(1)
				var got map[string]string
				if err := other.Trigger(ctx, "t::echo", map[string]string{"text": "in"}, &got); err != nil {
					return nil, err
				}
				return got, nil
			}}); err != nil {
				t.Fatal(err)
			}
			var hooks atomic.Int64
			ctx := engine.BeforeBus(context.Background(), func(context.Context) error {
				hooks.Add(1)
				return c.hookErr
			})
			var got map[string]string
			err = caller.Trigger(ctx, "t::outer", nil, &got)
			if c.wantCode != "" {
				if we := wire.From(err); we.Code != c.wantCode {
					t.Fatalf("t::outer = %v, want %s", err, c.wantCode)
				}
			} else if err != nil || got["text"] != "in" {
				t.Fatalf("t::outer = %v, %v", got, err)
			}
			if n := hooks.Load(); n != c.wantHook {
				t.Fatalf("hook ran %d times, want %d", n, c.wantHook)
			}
			if n := runs.Load(); n != c.wantRun {
				t.Fatalf("handler ran %d times, want %d", n, c.wantRun)
			}
		})
	}
}
