package httpgw_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/httpgw"
)

// TestRoutesBucketCreatedAgain: a routes bucket deleted and created again
// (`nats kv rm`/`add`, a restore) is followed again: the gateway serves
// what the new bucket holds, not the routes of the old one (it went on
// serving those, and missed the new bucket's routes, for good or until
// nats.go noticed missing heartbeats).
func TestRoutesBucketCreatedAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []httpgw.Option{httpgw.WithBucketCheck(100 * time.Millisecond)})
	ctx := context.Background()
	f.route(t, "GET", "/old", "test::echo")
	e := enginetest.NewEngine(t, f.ns)
	kv := enginetest.RecreateKV(t, e.JetStream(), httpgw.RoutesBucketConfig())
	// Another gateway (here a plain put, as that gateway's AddRoute does)
	// stores a route in the new bucket.
	if _, err := kv.Create(ctx, "GET.new", []byte(`{"method":"GET","path":"/new","function_id":"test::echo"}`)); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if resp, b := do(t, "GET", f.srv.URL+"/new", "", nil); resp.StatusCode != 200 {
			return fmt.Errorf("/new: %d %s; routes %v", resp.StatusCode, b, f.gw.Routes())
		}
		if resp, _ := do(t, "GET", f.srv.URL+"/old", "", nil); resp.StatusCode != 404 {
			return fmt.Errorf("/old: %d; routes %v", resp.StatusCode, f.gw.Routes())
		}
		return nil
	})
	// And it follows the new bucket live.
	f.route(t, "GET", "/later", "test::echo")
	if err := kv.Delete(ctx, "GET.new"); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if resp, _ := do(t, "GET", f.srv.URL+"/new", "", nil); resp.StatusCode != 404 {
			return fmt.Errorf("/new: %d; routes %v", resp.StatusCode, f.gw.Routes())
		}
		return nil
	})
}
