package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// MirrorKV loads a snapshot (deletes included), then follows changes.
func TestMirrorKV(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := e.EnsureKV(ctx, jetstream.KeyValueConfig{Bucket: "mirror-test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "gone"} {
		if _, err := kv.PutString(ctx, k, "v-"+k); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		mirror map[string]string
		fresh  map[string]string
		firsts int
	)
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		engine.MirrorKV(ctx, kv, e.Logger(), engine.KVMirror{
			Begin: func() { fresh = map[string]string{} },
			Entry: func(ent jetstream.KeyValueEntry, live bool) {
				target := fresh
				if live {
					mu.Lock()
					defer mu.Unlock()
					target = mirror
				}
				if ent.Operation() == jetstream.KeyValuePut {
					target[ent.Key()] = string(ent.Value())
				} else {
					delete(target, ent.Key())
				}
			},
			Loaded: func(first bool) {
				mu.Lock()
				mirror = fresh
				if first {
					firsts++
				}
				mu.Unlock()
				if first {
					close(ready)
				}
			},
		})
	}()
	<-ready
	mu.Lock()
	if fmt.Sprint(mirror) != "map[a:v-a b:v-b]" || firsts != 1 {
		t.Fatalf("snapshot %v (first %d)", mirror, firsts)
	}
	mu.Unlock()
	if _, err := kv.PutString(ctx, "c", "v-c"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if got := fmt.Sprint(mirror); got != "map[b:v-b c:v-c]" {
			return fmt.Errorf("mirror %s", got)
		}
		return nil
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("MirrorKV did not return after ctx ended")
	}
}
