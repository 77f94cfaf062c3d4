package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// TestFollowKVAcrossServerRestart: a watch followed with FollowKV sees
// writes made after its server restarted on the same port and store, with
// no reopen by the caller (nats.go recreates the ordered consumer once its
// heartbeats are missed: ≈ 20 s), and FollowKV does not return meanwhile.
func TestFollowKVAcrossServerRestart(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := e.EnsureKV(ctx, jetstream.KeyValueConfig{Bucket: "restart-test", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var last atomic.Value
	last.Store("")
	done := make(chan error, 1)
	go func() {
		done <- engine.FollowKV(ctx, w, func(ent jetstream.KeyValueEntry) { last.Store(ent.Key()) }, nil)
	}()
	if _, err := kv.PutString(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if last.Load() != "a" {
			return context.DeadlineExceeded
		}
		return nil
	})
	ns = enginetest.RestartServer(t, ns)
	start := time.Now()
	for time.Since(start) < 60*time.Second {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := kv.PutString(pctx, "b", "2")
		pcancel()
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	put := time.Since(start)
	for time.Since(start) < 60*time.Second {
		select {
		case err := <-done:
			t.Fatalf("FollowKV returned %v after %v", err, time.Since(start))
		default:
		}
		if last.Load() == "b" {
			t.Logf("put after %v, seen after %v", put, time.Since(start))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("put after %v; never seen", put)
}
