package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// fastReconnect is what the tests' connections reconnect with: at once,
// for good.
var fastReconnect = []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0)}

// logEngine is an engine over a new fast-reconnecting connection to ns
// that logs to the returned buffer.
func logEngine(t *testing.T, ns *server.Server, opts ...engine.Option) (*engine.Engine, *enginetest.Buffer) {
	t.Helper()
	var buf enginetest.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e, err := engine.New(enginetest.Connect(t, ns, fastReconnect...), append([]engine.Option{engine.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	return e, &buf
}

// A worker's server restarts: its functions and its catalog entry come
// back by themselves, once each, and the engine logs the loss and the
// return once each however many reconnect attempts it took.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e, logs := logEngine(t, ns)
	w, err := e.Worker("restart")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "restart::echo", Handler: engine.Typed(func(_ context.Context, r map[string]string) (map[string]string, error) {
		return r, nil
	})}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	start := enginetest.StopServer(t, ns)
	time.Sleep(300 * time.Millisecond) // the server is away for a dozen reconnect attempts
	ns = start()
	caller, _ := logEngine(t, ns)

	enginetest.Eventually(t, 10*time.Second, func() error {
		var resp map[string]string
		if err := caller.Trigger(ctx, "restart::echo", map[string]string{"a": "b"}, &resp); err != nil {
			return err
		}
		if resp["a"] != "b" {
			return fmt.Errorf("reply %v", resp)
		}
		return nil
	})
	ws, err := caller.WorkersList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, wi := range ws {
		if wi.Name == "restart" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("worker listed %d times after the restart: %+v", n, ws)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		got := logs.String()
		lost, back := strings.Count(got, "nats connection lost"), strings.Count(got, "nats connection restored")
		if lost != 1 || back != 1 {
			return fmt.Errorf("logged the loss %d times and the return %d times, want 1 and 1:\n%s", lost, back, got)
		}
		return nil
	})
}

// A handler still running when its worker's connection closes for good
// can send no reply: its context ends at once, and the engine says why,
// once.
func TestConnClosedEndsHandlers(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e, logs := logEngine(t, ns)
	w, err := e.Worker("closing")
	if err != nil {
		t.Fatal(err)
	}
	started, ended := make(chan struct{}), make(chan error, 1)
	if err := w.Register(engine.Function{ID: "closing::wait", Timeout: time.Minute, Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
		close(started)
		<-ctx.Done()
		ended <- ctx.Err()
		return nil, ctx.Err()
	}}); err != nil {
		t.Fatal(err)
	}
	caller, _ := logEngine(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	called := make(chan error, 1)
	go func() { called <- caller.Trigger(ctx, "closing::wait", nil, nil) }()
	<-started
	e.Conn().Close()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler's context ended with %v, want canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("handler's context still running 2s after its connection closed")
	}
	// Nobody answers: the caller times out at its own deadline.
	if err := <-called; !errors.Is(err, wire.ErrTimeout) {
		t.Fatalf("caller got %v, want timeout", err)
	}
	if got := strings.Count(logs.String(), "nats connection closed"); got != 1 {
		t.Fatalf("logged the close %d times:\n%s", got, logs.String())
	}
}

// A worker whose subscription overflows (its handlers cannot keep up)
// drops requests: that is logged once per overflow, with its code.
func TestSlowConsumerLogged(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(8<<20))
	e, logs := logEngine(t, ns, engine.WithConcurrency(1))
	w, err := e.Worker("slow")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	if err := w.Register(engine.Function{ID: "slow::hold", Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	}}); err != nil {
		t.Fatal(err)
	}
	caller, _ := logEngine(t, ns)
	ctx := context.Background()
	// One request holds the only handler slot, the next holds the
	// delivery goroutine; the rest fill the pending buffer (64 MiB) and
	// overflow it.
	big := engine.Raw(make([]byte, 7<<20))
	for range 14 {
		if err := caller.Void(ctx, "slow::hold", big); err != nil {
			t.Fatal(err)
		}
	}
	if err := caller.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), "worker subscription error") {
			return errors.New("no subscription error logged")
		}
		return nil
	})
	close(release)
	got := logs.String()
	if n := strings.Count(got, "worker subscription error"); n != 1 || !strings.Contains(got, "code=unavailable") {
		t.Fatalf("logged %d subscription errors, want 1 with code=unavailable:\n%s", n, got)
	}
}

// A handler that ends after its connection closed cannot send its reply:
// that is logged once as a lost connection, not as the function's
// internal failure.
func TestReplyAfterConnClosed(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e, logs := logEngine(t, ns)
	w, err := e.Worker("late")
	if err != nil {
		t.Fatal(err)
	}
	started, finish := make(chan struct{}), make(chan struct{})
	if err := w.Register(engine.Function{ID: "late::answer", Handler: func(context.Context, *engine.Request) (any, error) {
		close(started)
		<-finish // ignores its context
		return map[string]string{"ok": "yes"}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	caller, _ := logEngine(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	called := make(chan error, 1)
	go func() { called <- caller.Trigger(ctx, "late::answer", nil, nil) }()
	<-started
	e.Conn().Close()
	close(finish)
	if err := <-called; !errors.Is(err, wire.ErrTimeout) {
		t.Fatalf("caller got %v, want timeout", err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if !strings.Contains(logs.String(), "reply not sent") {
			return errors.New("lost reply not logged")
		}
		return nil
	})
	got := logs.String()
	if strings.Count(got, "reply not sent") != 1 || strings.Contains(got, "function failed") || strings.Contains(got, "error reply failed") {
		t.Fatalf("want one \"reply not sent\" and no function failure:\n%s", got)
	}
}
