package orchestrator

import (
	"context"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// A decision on a function's idempotency (approval mode auto, a re-run
// after a crash) sees the function as it is registered now: one
// re-registered as not idempotent is not taken for idempotent from an
// entry older than the cache's ttl. lookup kept such an entry until a
// miss or a run::start refreshed the catalog.
func TestCatalogCurrentSeesReRegistration(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := enginetest.Engine(t)
	w, err := e.Worker("flip")
	if err != nil {
		t.Fatal(err)
	}
	register := func(idempotent bool) {
		t.Helper()
		if err := w.Register(engine.Function{ID: "flip::op", Idempotent: idempotent, Handler: func(context.Context, *engine.Request) (any, error) {
			return nil, nil
		}}); err != nil {
			t.Fatal(err)
		}
	}
	register(true)
	c := &catalogCache{e: e, ttl: 200 * time.Millisecond}
	if info, ok := c.current(ctx, "flip::op"); !ok || !info.Idempotent {
		t.Fatalf("first look: %+v, %v", info, ok)
	}
	if err := w.Unregister("flip::op"); err != nil {
		t.Fatal(err)
	}
	register(false)
	time.Sleep(300 * time.Millisecond) // past the ttl
	if info, ok := c.current(ctx, "flip::op"); !ok || info.Idempotent {
		t.Fatalf("after re-registration: %+v, %v, want not idempotent", info, ok)
	}
	// lookup (timeouts, on every call) may answer from the old entry.
	if _, ok := c.lookup(ctx, "flip::op"); !ok {
		t.Fatal("lookup lost the function")
	}
}
