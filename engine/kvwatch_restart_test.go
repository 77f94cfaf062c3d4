package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// resumeWithin bounds the lag of a watch after its connection is back.
const resumeWithin = 3 * time.Second

// outage restarts ns (same port and store) under e and writes to bucket
// around it: one put through e's connection while it is away (nats.go
// buffers it and sends it on reconnect), keys w.<i> every 5 ms through a
// connection of the new server's own from its start until 300 ms after e's
// connection is back, then a last key. It returns when e's connection
// reconnected and the last key's revision; every write made it the
// bucket's only new revisions.
func outage(t *testing.T, e *engine.Engine, ns *server.Server, bucket string) (reconnected time.Time, last uint64) {
	t.Helper()
	ctx := context.Background()
	kv, err := e.JetStream().KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	back := e.Conn().StatusChanged(nats.CONNECTED)
	defer e.Conn().RemoveStatusListener(back)

	start := enginetest.StopServer(t, ns)
	enginetest.Eventually(t, 5*time.Second, func() error {
		if st := e.Conn().Status(); st == nats.CONNECTED {
			return fmt.Errorf("connection %v", st)
		}
		return nil
	})
	buffered := make(chan error, 1)
	go func() {
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := kv.PutString(bctx, "w.buffered", "v")
		buffered <- err
	}()

	ns = start()
	js, err := jetstream.New(enginetest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	wkv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	stop, written := make(chan struct{}), make(chan int, 1)
	go func() {
		n := 0
		for i := 0; ; i++ {
			select {
			case <-stop:
				written <- n
				return
			default:
			}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if _, err := wkv.PutString(pctx, fmt.Sprintf("w.%d", i), "v"); err == nil {
				n++
			}
			cancel()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	select {
	case <-back:
		reconnected = time.Now()
	case <-time.After(10 * time.Second):
		close(stop)
		t.Fatal("connection not back 10 s after the server restarted")
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	n := <-written
	berr := <-buffered
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	last, err = wkv.PutString(pctx, "w.last", "v")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d writes around the outage (buffered put: %v); last revision %d at %v after the reconnect", n, berr, last, time.Since(reconnected))
	return reconnected, last
}

// revisions records what a follower was handed.
type revisions struct {
	mu      sync.Mutex
	revs    []uint64
	markers int
}

func (r *revisions) entry(ent jetstream.KeyValueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.revs = append(r.revs, ent.Revision())
}

func (r *revisions) loaded() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.markers++
}

// exactly reports how the revisions handed on differ from first..last,
// each once and in order.
func (r *revisions) exactly(first, last uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	want := first
	for i, rev := range r.revs {
		if rev != want {
			return fmt.Errorf("entry %d is revision %d, want %d (revisions %d..%d wanted; got %v)", i, rev, want, first, last, r.revs)
		}
		want++
	}
	if want != last+1 {
		return fmt.Errorf("revisions up to %d handed on, want up to %d", want-1, last)
	}
	return nil
}

// within checks check until d after since, then fails the test.
func within(t *testing.T, since time.Time, d time.Duration, check func() error) {
	t.Helper()
	deadline := since.Add(d)
	for {
		err := check()
		if err == nil {
			t.Logf("caught up %v after the reconnect", time.Since(since).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not caught up %v after the reconnect: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWatchKVAcrossServerRestart: a WatchKV watch followed with FollowKV,
// whose server restarts on the same port and store, hands on every write
// made while its connection is away, at its return and right after,
// once each and in order, within resumeWithin of the reconnect (nats.go's
// own watch waits for missed heartbeats: ≈ 20 s), with no reopen by the
// caller and without FollowKV returning.
func TestWatchKVAcrossServerRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     engine.KVWatchConfig
		first   uint64 // revision of the first entry handed on
		markers int
	}{
		{name: "every key", cfg: engine.KVWatchConfig{}, first: 1, markers: 1},
		{name: "updates only, meta only", cfg: engine.KVWatchConfig{UpdatesOnly: true, MetaOnly: true}, first: 2},
		{name: "filtered, ignore deletes", cfg: engine.KVWatchConfig{Keys: []string{"w.>"}, IgnoreDeletes: true}, first: 2, markers: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			e := enginetest.NewEngine(t, ns)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			kv, err := e.EnsureKV(ctx, jetstream.KeyValueConfig{Bucket: "restart-test", Storage: jetstream.FileStorage})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.PutString(ctx, "a", "1"); err != nil { // revision 1
				t.Fatal(err)
			}
			w, err := engine.WatchKV(ctx, e.Conn(), kv, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var got revisions
			done := make(chan error, 1)
			go func() { done <- engine.FollowKV(ctx, w, got.entry, got.loaded) }()
			rev, err := kv.PutString(ctx, "w.first", "1") // revision 2
			if err != nil {
				t.Fatal(err)
			}
			enginetest.Eventually(t, 5*time.Second, func() error { return got.exactly(tc.first, rev) })

			reconnected, last := outage(t, e, ns, "restart-test")
			within(t, reconnected, resumeWithin, func() error {
				select {
				case err := <-done:
					t.Fatalf("FollowKV returned %v", err)
				default:
				}
				return got.exactly(tc.first, last)
			})
			time.Sleep(200 * time.Millisecond) // nothing more comes
			if err := got.exactly(tc.first, last); err != nil {
				t.Fatal(err)
			}
			got.mu.Lock()
			defer got.mu.Unlock()
			if got.markers != tc.markers {
				t.Fatalf("%d end-of-initial-values markers, want %d", got.markers, tc.markers)
			}
		})
	}
}

// TestMirrorKVAcrossServerRestart: MirrorKV's mirror has the writes made
// around a restart of its server within resumeWithin of the reconnect,
// without loading the bucket again.
func TestMirrorKVAcrossServerRestart(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := e.EnsureKV(ctx, jetstream.KeyValueConfig{Bucket: "restart-test", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		begins int
		live   revisions
	)
	loaded := make(chan struct{})
	go engine.MirrorKV(ctx, e.Conn(), kv, e.Logger(), engine.KVMirror{
		Begin: func() {
			mu.Lock()
			begins++
			mu.Unlock()
		},
		Entry: func(ent jetstream.KeyValueEntry, isLive bool) {
			if isLive {
				live.entry(ent)
			}
		},
		Loaded: func(first bool) {
			if first {
				close(loaded)
			}
		},
	})
	<-loaded
	reconnected, last := outage(t, e, ns, "restart-test")
	within(t, reconnected, resumeWithin, func() error { return live.exactly(2, last) })
	mu.Lock()
	defer mu.Unlock()
	if begins != 1 {
		t.Fatalf("bucket loaded %d times, want once", begins)
	}
}

// TestWatchKVReopenBeforeLoaded: a watch whose connection comes back
// before all of its initial values were handed on loads them again as
// they are then: it hands on each key that was not handed on yet with
// its value of then, never a value the bucket had replaced before the
// watch began, and the marker once.
func TestWatchKVReopenBeforeLoaded(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := e.EnsureKV(ctx, jetstream.KeyValueConfig{Bucket: "restart-test", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 300
	for i := range keys {
		if _, err := kv.PutString(ctx, fmt.Sprintf("k.%03d", i), "old"); err != nil {
			t.Fatal(err)
		}
	}
	// Replaced before the watch: "old" must never be handed on for these.
	if _, err := kv.PutString(ctx, "k.299", "new"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "k.100"); err != nil {
		t.Fatal(err)
	}
	w, err := engine.WatchKV(ctx, e.Conn(), kv, engine.KVWatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		handed  []jetstream.KeyValueEntry
		markers int
	)
	blocked, release := make(chan struct{}), make(chan struct{})
	go func() {
		_ = engine.FollowKV(ctx, w, func(ent jetstream.KeyValueEntry) {
			mu.Lock()
			handed = append(handed, ent)
			n := len(handed)
			mu.Unlock()
			if n == 1 { // hold the rest back until the connection is back
				close(blocked)
				<-release
			}
		}, func() {
			mu.Lock()
			markers++
			mu.Unlock()
		})
	}()
	<-blocked
	reconnected, last := outage(t, e, ns, "restart-test")
	time.Sleep(200 * time.Millisecond) // the watch reopens meanwhile
	close(release)

	within(t, reconnected, resumeWithin, func() error {
		mu.Lock()
		defer mu.Unlock()
		if markers != 1 || handed[len(handed)-1].Revision() != last {
			return fmt.Errorf("%d markers, %d entries", markers, len(handed))
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if markers != 1 {
		t.Fatalf("%d markers, want 1", markers)
	}
	var prev uint64
	for _, ent := range handed {
		if ent.Revision() <= prev {
			t.Fatalf("revision %d (%s) handed on after %d", ent.Revision(), ent.Key(), prev)
		}
		prev = ent.Revision()
		switch {
		case ent.Key() == "k.299" && string(ent.Value()) != "new":
			t.Fatalf("k.299 handed on with %q, replaced before the watch began", ent.Value())
		case ent.Key() == "k.100" && ent.Operation() != jetstream.KeyValueDelete:
			t.Fatalf("k.100 handed on as %v, deleted before the watch began", ent.Operation())
		}
	}
	seen := map[string]bool{}
	for _, ent := range handed {
		seen[ent.Key()] = true
	}
	for i := range keys {
		if k := fmt.Sprintf("k.%03d", i); !seen[k] {
			t.Fatalf("%s never handed on", k)
		}
	}
}

// TestWatchKVBucketLostInRestart: a watch on a memory-storage bucket,
// which a single server loses when it restarts, ends within resumeWithin
// of the reconnect with ErrWatchClosed saying so (nats.go's own watch
// stalls silently), so the caller can create the bucket and watch it
// again.
func TestWatchKVBucketLostInRestart(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := e.EnsureKV(ctx, jetstream.KeyValueConfig{Bucket: "restart-mem", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	w, err := engine.WatchKV(ctx, e.Conn(), kv, engine.KVWatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- engine.FollowKV(ctx, w, func(jetstream.KeyValueEntry) {}, nil) }()
	back := e.Conn().StatusChanged(nats.CONNECTED)
	defer e.Conn().RemoveStatusListener(back)
	enginetest.RestartServer(t, ns)
	var reconnected time.Time
	select {
	case <-back:
		reconnected = time.Now()
	case <-time.After(10 * time.Second):
		t.Fatal("connection not back 10 s after the server restarted")
	}
	select {
	case err := <-done:
		if !errors.Is(err, engine.ErrWatchClosed) || !(errors.Is(err, nats.ErrStreamNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)) {
			t.Fatalf("FollowKV returned %v, want ErrWatchClosed for a stream not found", err)
		}
		t.Logf("ended %v after the reconnect: %v", time.Since(reconnected).Round(time.Millisecond), err)
	case <-time.After(time.Until(reconnected.Add(resumeWithin))):
		t.Fatalf("watch still open %v after the reconnect", resumeWithin)
	}
}
