package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestDiscoverContext: a caller that gives up stops the discovery at once
// with its error, rather than waiting out the collection (up to 1.5 s
// with nobody on the bus) and getting a catalog as if it were complete; a
// context ended before the call discovers nothing and says so. A deadline
// during the collection ends it with what arrived (package doc).
func TestDiscoverContext(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	echoWorker(t, e, "echo", nil)

	t.Run("canceled during the collection", func(t *testing.T) {
		t.Parallel()
		qs := enginetest.RunServer(t)
		quiet := enginetest.NewEngine(t, qs)
		// A service that never answers: the collection waits for one.
		silent := enginetest.Connect(t, qs)
		if _, err := silent.Subscribe("$SRV.INFO", func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		if err := silent.Flush(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		_, err := quiet.FunctionsList(ctx)
		if !errors.Is(err, wire.ErrCanceled) {
			t.Fatalf("FunctionsList = %v, want canceled", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("FunctionsList returned %v after the cancel", d)
		}
	})
	t.Run("nobody on the bus", func(t *testing.T) {
		t.Parallel()
		empty := enginetest.NewEngine(t, enginetest.RunServer(t))
		fns, err := empty.FunctionsList(context.Background())
		if err != nil || len(fns) != 0 {
			t.Fatalf("FunctionsList = %+v, %v; want none, no error", fns, err)
		}
	})
	t.Run("ended before the call", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if fns, err := e.FunctionsList(ctx); !errors.Is(err, wire.ErrCanceled) {
			t.Fatalf("FunctionsList = %d functions, %v; want canceled", len(fns), err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), -time.Second)
		defer cancel()
		if ws, err := e.WorkersList(ctx); !errors.Is(err, wire.ErrTimeout) {
			t.Fatalf("WorkersList = %d workers, %v; want timeout", len(ws), err)
		}
	})
	t.Run("deadline during the collection", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		fns, err := e.FunctionsList(ctx)
		if err != nil || len(fns) != 1 || fns[0].ID != "test::echo" {
			t.Fatalf("FunctionsList = %+v, %v", fns, err)
		}
	})
}
