package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// TestUnregisterFailureClosesWorker: an Unregister whose restart fails
// (here the connection closed, so no new service can subscribe) leaves
// the worker closed, not half up: its functions are withdrawn from local
// calls as they are from the bus, Register and Unregister say ErrClosed
// (before, a later Register failed on the stopped service and the
// remaining functions stayed listed for local calls), and Close works.
func TestUnregisterFailureClosesWorker(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	e, err := engine.New(nc, engine.WithLocalCalls(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	w, err := e.Worker("unreg")
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *engine.Request) (any, error) { return engine.Empty{}, nil }
	for _, id := range []string{"unreg::one", "unreg::two"} {
		if err := w.Register(engine.Function{ID: id, Handler: noop}); err != nil {
			t.Fatal(err)
		}
	}
	if got := engine.LocalIDs(w); !slices.Equal(got, []string{"unreg::one", "unreg::two"}) {
		t.Fatalf("listed for local calls: %v", got)
	}

	nc.Close()
	err = w.Unregister("unreg::one")
	if !errors.Is(err, engine.ErrClosed) || !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("Unregister = %v, want ErrClosed wrapping the connection's error", err)
	}
	if errors.Is(err, engine.ErrInvalidWorker) {
		t.Fatalf("Unregister = %v: the worker is not invalid, its connection closed", err)
	}
	if got := engine.LocalIDs(w); len(got) != 0 {
		t.Fatalf("still listed for local calls after the failed restart: %v", got)
	}
	if err := w.Register(engine.Function{ID: "unreg::three", Handler: noop}); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Register after the failed restart = %v, want ErrClosed", err)
	}
	if err := w.Unregister("unreg::two"); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Unregister after the failed restart = %v, want ErrClosed", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
}
