package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// follower is a [engine.BucketFollower]'s view: the keys and values it
// mirrors, and how many loads it saw.
type follower struct {
	mu     sync.Mutex
	fresh  map[string]string // the snapshot being loaded
	mirror map[string]string
	begins int
	loads  []bool // the first argument of each Loaded
}

func (f *follower) handlers() engine.KVMirror {
	return engine.KVMirror{
		Begin: func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.begins++
			f.fresh = map[string]string{}
		},
		Entry: func(ent jetstream.KeyValueEntry, live bool) {
			f.mu.Lock()
			defer f.mu.Unlock()
			target := f.fresh
			if live {
				target = f.mirror
			}
			if ent.Operation() == jetstream.KeyValuePut {
				target[ent.Key()] = string(ent.Value())
			} else {
				delete(target, ent.Key())
			}
		},
		Loaded: func(first bool) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.mirror, f.fresh = f.fresh, nil
			f.loads = append(f.loads, first)
		},
	}
}

// follow runs FollowBucket from w, named "test", checking every 50 ms;
// the channel gets what it returns.
func (f *follower) follow(ctx context.Context, e *engine.Engine, w *engine.KVWatch) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- engine.FollowBucket(ctx, e, w, engine.BucketFollower{
			Name: "test", Check: 50 * time.Millisecond, KVMirror: f.handlers(),
		})
	}()
	return done
}

// keys is the mirror's keys, sorted, once a snapshot is loaded.
func (f *follower) keys() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprint(slices.Sorted(maps.Keys(f.mirror)))
}

// TestFollowBucketCreatedAgain: a bucket deleted and created again under
// FollowBucket (`nats kv rm`/`add`, a restore) is followed again: its
// snapshot replaces what the old bucket held, and its changes follow live.
// While it is gone, what the follower holds stays.
func TestFollowBucketCreatedAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// gone is a log message to wait for while the bucket is away;
		// empty creates it again at once (the old watch stays open,
		// silent: only the bucket check sees it).
		gone string
	}{
		{name: "recreated at once"},
		{name: "gone a while", gone: "test watch not reopened; retrying"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			var logs enginetest.Buffer
			e := enginetest.NewEngine(t, ns, engine.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := jetstream.KeyValueConfig{Bucket: "follow-test"}
			kv, err := e.EnsureKV(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"a", "b"} {
				if _, err := kv.PutString(ctx, k, "old"); err != nil {
					t.Fatal(err)
				}
			}
			w, err := engine.WatchKV(ctx, e.Conn(), kv, engine.KVWatchConfig{})
			if err != nil {
				t.Fatal(err)
			}
			var f follower
			done := f.follow(ctx, e, w)
			want := func(keys string) {
				t.Helper()
				enginetest.Eventually(t, 10*time.Second, func() error {
					if got := f.keys(); got != keys {
						return fmt.Errorf("keys %s, want %s", got, keys)
					}
					return nil
				})
			}
			want("[a b]")

			js := e.JetStream()
			if err := js.DeleteKeyValue(ctx, cfg.Bucket); err != nil {
				t.Fatal(err)
			}
			if tc.gone != "" {
				enginetest.Eventually(t, 10*time.Second, func() error {
					if !strings.Contains(logs.String(), tc.gone) {
						return fmt.Errorf("no %q logged yet", tc.gone)
					}
					return nil
				})
				if got := f.keys(); got != "[a b]" {
					t.Errorf("keys while the bucket is away = %s, want [a b] kept", got)
				}
			}
			kv = enginetest.CreateKV(t, js, cfg)
			if _, err := kv.PutString(ctx, "c", "new"); err != nil {
				t.Fatal(err)
			}
			want("[c]")
			// And it follows the new bucket live.
			if _, err := kv.PutString(ctx, "d", "new"); err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			want("[d]")
			if !strings.Contains(logs.String(), "test watch reopened") {
				t.Errorf("reopening not logged:\n%s", logs.String())
			}

			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("FollowBucket after ctx ended = %v, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("FollowBucket did not return after ctx ended")
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.loads) < 2 || !f.loads[0] || slices.Contains(f.loads[1:], true) || f.begins != len(f.loads) {
				t.Errorf("Begin %d times, Loaded(first) %v: want first true once, then false, a Begin each", f.begins, f.loads)
			}
		})
	}
}

// TestFollowBucketFirstWatchEnds: a first watch that ends before its
// snapshot loaded (here one that never loads, UpdatesOnly, on a bucket
// then deleted) is not opened again: FollowBucket returns why, so that its
// caller's start fails rather than waits.
func TestFollowBucketFirstWatchEnds(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := e.EnsureKV(ctx, jetstream.KeyValueConfig{Bucket: "follow-first"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := engine.WatchKV(ctx, e.Conn(), kv, engine.KVWatchConfig{UpdatesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var f follower
	done := f.follow(ctx, e, w)
	if err := e.JetStream().DeleteKeyValue(ctx, "follow-first"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("FollowBucket = %v, want why the first watch ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("FollowBucket did not return when its first watch ended before loading")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.begins != 1 || len(f.loads) != 0 {
		t.Errorf("Begin %d times, Loaded %v: want one Begin, no load", f.begins, f.loads)
	}
}
