package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
		engine.MirrorKV(ctx, e.Conn(), kv, e.Logger(), engine.KVMirror{
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

// collect follows w until its marker (marker) or until want entries came,
// and returns "key@revision:op:value" for each entry.
func collect(t *testing.T, w jetstream.KeyWatcher, marker bool, want int) []string {
	t.Helper()
	var got []string
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ent, ok := <-w.Updates():
			if !ok {
				t.Fatalf("updates closed after %v", got)
			}
			if ent == nil {
				if !marker {
					t.Fatal("marker from an updates-only watch")
				}
				return got
			}
			got = append(got, fmt.Sprintf("%s@%d:%v:%q", ent.Key(), ent.Revision(), ent.Operation(), ent.Value()))
			if !marker && len(got) == want {
				return got
			}
		case <-timeout:
			t.Fatalf("no marker after %v", got)
		}
	}
}

// WatchKV hands on what kv.WatchFiltered with the same options does.
func TestWatchKVMatchesWatchFiltered(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := e.EnsureKV(ctx, jetstream.KeyValueConfig{Bucket: "watch-match", History: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a.1", "a.2", "b.1", "a.1"} {
		if _, err := kv.PutString(ctx, k, "v-"+k); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "a.2"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cfg     engine.KVWatchConfig
		opts    []jetstream.WatchOpt
		changes int // of the put, delete and purge below that it sees
	}{
		{name: "every key", changes: 3},
		{name: "filtered", cfg: engine.KVWatchConfig{Keys: []string{"a.*"}}, changes: 2},
		{name: "two filters", cfg: engine.KVWatchConfig{Keys: []string{"a.2", "b.*"}}, changes: 2},
		{name: "ignore deletes", cfg: engine.KVWatchConfig{IgnoreDeletes: true}, opts: []jetstream.WatchOpt{jetstream.IgnoreDeletes()}, changes: 1},
		{name: "meta only", cfg: engine.KVWatchConfig{MetaOnly: true}, opts: []jetstream.WatchOpt{jetstream.MetaOnly()}, changes: 3},
		{name: "updates only", cfg: engine.KVWatchConfig{UpdatesOnly: true}, opts: []jetstream.WatchOpt{jetstream.UpdatesOnly()}, changes: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := append([]string(nil), tc.cfg.Keys...)
			if len(keys) == 0 {
				keys = []string{">"}
			}
			want, err := kv.WatchFiltered(ctx, keys, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer want.Stop()
			got, err := engine.WatchKV(ctx, e.Conn(), kv, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Stop()
			if !tc.cfg.UpdatesOnly {
				initial := collect(t, want, true, 0)
				if g := collect(t, got, true, 0); fmt.Sprint(g) != fmt.Sprint(initial) {
					t.Fatalf("initial values %v, want %v", g, initial)
				}
			}
			if _, err := kv.PutString(ctx, "a.2", "again"); err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, "b.1"); err != nil {
				t.Fatal(err)
			}
			if err := kv.Purge(ctx, "a.1"); err != nil {
				t.Fatal(err)
			}
			changes := collect(t, want, false, tc.changes)
			if g := collect(t, got, false, tc.changes); fmt.Sprint(g) != fmt.Sprint(changes) {
				t.Fatalf("changes %v, want %v", g, changes)
			}
		})
	}
}

// A WatchKV watch ends on Stop and with its ctx (Err nil), and with its
// connection (FollowKV says ErrWatchClosed, the connection closed);
// WatchKV without a connection is an error, not a panic.
func TestWatchKVEnds(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	kv, err := e.EnsureKV(ctx, jetstream.KeyValueConfig{Bucket: "watch-ends"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.WatchKV(ctx, nil, kv, engine.KVWatchConfig{}); err == nil {
		t.Fatal("WatchKV without a connection: no error")
	}
	own := enginetest.Connect(t, ns)
	ojs, err := jetstream.New(own)
	if err != nil {
		t.Fatal(err)
	}
	okv, err := ojs.KeyValue(ctx, "watch-ends")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		nc      *nats.Conn
		kv      jetstream.KeyValue
		end     func(w *engine.KVWatch, cancel context.CancelFunc)
		wantErr error
	}{
		{name: "stop", nc: e.Conn(), kv: kv, end: func(w *engine.KVWatch, _ context.CancelFunc) { _ = w.Stop() }},
		{name: "ctx", nc: e.Conn(), kv: kv, end: func(_ *engine.KVWatch, cancel context.CancelFunc) { cancel() }},
		{name: "connection closed", nc: own, kv: okv, end: func(*engine.KVWatch, context.CancelFunc) { own.Close() }, wantErr: nats.ErrConnectionClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			w, err := engine.WatchKV(wctx, tc.nc, tc.kv, engine.KVWatchConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if ent := <-w.Updates(); ent != nil {
				t.Fatalf("first update %v, want the marker", ent)
			}
			done := make(chan error, 1)
			go func() { done <- engine.FollowKV(context.Background(), w, func(jetstream.KeyValueEntry) {}, nil) }()
			tc.end(w, cancel)
			select {
			case err := <-done:
				if !errors.Is(err, engine.ErrWatchClosed) {
					t.Fatalf("FollowKV returned %v, want ErrWatchClosed", err)
				}
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Fatalf("FollowKV returned %v, want %v", err, tc.wantErr)
				}
				if !errors.Is(w.Err(), tc.wantErr) {
					t.Fatalf("Err %v, want %v", w.Err(), tc.wantErr)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("watch did not end")
			}
		})
	}
}
