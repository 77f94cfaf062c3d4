package membership_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/membership"
	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// These tests drive the provider without proto.actor: StartForTest runs
// the same start as StartMember/StartClient with a recorder in place of
// MemberList.UpdateClusterTopology. TestConformance covers the real thing.

// recorder stands in for proto.actor's MemberList.
type recorder struct {
	mu   sync.Mutex
	last []string
	n    int
}

func (r *recorder) publish(ms cluster.Members) {
	ids := make([]string, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.Id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last, r.n = ids, r.n+1
}

func (r *recorder) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// sees waits until r's latest topology is want.
func (r *recorder) sees(t *testing.T, timeout time.Duration, want ...string) {
	t.Helper()
	enginetest.Eventually(t, timeout, func() error {
		if got := r.ids(); !slices.Equal(got, want) {
			return fmt.Errorf("topology %v, want %v", got, want)
		}
		return nil
	})
}

func newJS(t *testing.T, ns *server.Server) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(enginetest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func testOpts(opts ...membership.Option) []membership.Option {
	return append([]membership.Option{membership.WithTTL(testTTL), membership.WithHeartbeat(testHeartbeat)}, opts...)
}

func testEntry(id string, port int) *membership.Entry {
	return &membership.Entry{ID: id, Host: "127.0.0.1", Port: port, Kinds: []string{"echo"},
		Status: membership.StatusUp, Started: time.Now().UTC()}
}

// start runs a provider as member self (a client when self is nil) of
// cluster "c" on its own connection to ns.
func start(t *testing.T, ns *server.Server, self *membership.Entry, opts ...membership.Option) (*membership.Provider, *recorder) {
	t.Helper()
	p, err := membership.New(newJS(t, ns), testOpts(opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := p.StartForTest("c", self, rec.publish); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(false) })
	return p, rec
}

func kvOf(t *testing.T, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), subjects.MembersBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func present(kv jetstream.KeyValue, key string) bool {
	_, err := kv.Get(context.Background(), key)
	return err == nil
}

func TestOptions(t *testing.T) {
	t.Parallel()
	js := newJS(t, enginetest.RunServer(t))
	for _, tc := range []struct {
		name string
		opts []membership.Option
		ok   bool
	}{
		{"defaults", nil, true},
		{"all", []membership.Option{membership.WithBucket("b-1"), membership.WithTTL(3 * time.Second),
			membership.WithHeartbeat(time.Second), membership.WithReplicas(3),
			membership.WithLogger(slog.Default()), membership.WithMeta(map[string]string{"node": "n1"}), nil}, true},
		{"ttl zero", []membership.Option{membership.WithTTL(0)}, false},
		{"ttl under the marker minimum", []membership.Option{membership.WithTTL(500 * time.Millisecond), membership.WithHeartbeat(100 * time.Millisecond)}, false},
		{"heartbeat zero", []membership.Option{membership.WithHeartbeat(0)}, false},
		{"heartbeat negative", []membership.Option{membership.WithHeartbeat(-time.Second)}, false},
		{"ttl under 3 heartbeats", []membership.Option{membership.WithTTL(2 * time.Second), membership.WithHeartbeat(time.Second)}, false},
		{"ttl under 3 heartbeats, other order", []membership.Option{membership.WithHeartbeat(time.Second), membership.WithTTL(2 * time.Second)}, false},
		{"ttl exactly 3 heartbeats", []membership.Option{membership.WithTTL(3 * time.Second), membership.WithHeartbeat(time.Second)}, true},
		{"replicas 0", []membership.Option{membership.WithReplicas(0)}, false},
		{"replicas 6", []membership.Option{membership.WithReplicas(6)}, false},
		{"bucket empty", []membership.Option{membership.WithBucket("")}, false},
		{"bucket with a dot", []membership.Option{membership.WithBucket("a.b")}, false},
		{"bucket with a space", []membership.Option{membership.WithBucket("a b")}, false},
		{"nil logger", []membership.Option{membership.WithLogger(nil)}, false},
		{"empty meta key", []membership.Option{membership.WithMeta(map[string]string{"": "x"})}, false},
		{"huge meta", []membership.Option{membership.WithMeta(map[string]string{"k": strings.Repeat("x", 17<<10)})}, false},
	} {
		p, err := membership.New(js, tc.opts...)
		if tc.ok && (err != nil || p == nil) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, membership.ErrInvalidOption) {
			t.Errorf("%s: err %v, want ErrInvalidOption", tc.name, err)
		}
	}
	if _, err := membership.New(nil); !errors.Is(err, membership.ErrInvalidOption) {
		t.Errorf("New(nil) = %v, want ErrInvalidOption", err)
	}
}

func TestBadClusterName(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js := newJS(t, ns)
	bad := []string{"", "a.b", "a b", "a*", "a>", "ünï", strings.Repeat("x", 129)}
	for _, name := range bad {
		p, err := membership.New(js, testOpts()...)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.StartForTest(name, testEntry("m1", 1), func(cluster.Members) {}); !errors.Is(err, membership.ErrInvalidClusterName) {
			t.Errorf("start(%q) = %v, want ErrInvalidClusterName", name, err)
		}
		if _, err := membership.Key(name, "m1"); !errors.Is(err, membership.ErrInvalidClusterName) {
			t.Errorf("Key(%q) = %v", name, err)
		}
		if _, err := membership.List(context.Background(), js, name); !errors.Is(err, membership.ErrInvalidClusterName) {
			t.Errorf("List(%q) = %v", name, err)
		}
	}
	// Through proto.actor's own types: StartMember and StartClient refuse
	// the name before touching the network (cluster.StartMember would
	// panic with this error).
	p, err := membership.New(js, testOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	c := cluster.New(sys, cluster.Configure("my.cluster", p, disthash.New(), remote.Configure("127.0.0.1", 0)))
	if err := p.StartMember(c); !errors.Is(err, membership.ErrInvalidClusterName) {
		t.Errorf("StartMember = %v, want ErrInvalidClusterName", err)
	}
	if err := p.StartClient(c); !errors.Is(err, membership.ErrInvalidClusterName) {
		t.Errorf("StartClient = %v, want ErrInvalidClusterName", err)
	}
	sys.Shutdown()
	// Nothing was written.
	if _, err := js.KeyValue(context.Background(), subjects.MembersBucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("bucket after refused starts: %v", err)
	}
}

// TestOversizedEntry starts a member whose entry encodes to more than the
// decoder takes (many long kinds): every member, itself included, would
// ignore its entry and it would run unseen. The start must refuse it.
func TestOversizedEntry(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := testEntry("big", 1)
	e.Kinds = nil
	for i := range 300 {
		e.Kinds = append(e.Kinds, fmt.Sprintf("%03d%s", i, strings.Repeat("k", 250)))
	}
	if _, err := e.Encode(); !errors.Is(err, membership.ErrInvalidEntry) {
		t.Errorf("Encode = %v, want ErrInvalidEntry", err)
	}
	p, err := membership.New(newJS(t, ns), testOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	err = p.StartForTest("c", e, rec.publish)
	t.Cleanup(func() { _ = p.Shutdown(false) })
	if !errors.Is(err, membership.ErrInvalidEntry) {
		t.Fatalf("start = %v (topology %v), want ErrInvalidEntry", err, rec.ids())
	}
}

func TestBucket(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js := newJS(t, ns)
	start(t, ns, testEntry("m1", 1), membership.WithTTL(2*time.Second), membership.WithHeartbeat(500*time.Millisecond))
	st, err := kvOf(t, js).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The bucket's own expiry is only garbage collection (a minute at
	// least): liveness is the members' sweep, which a NATS outage cannot
	// trip.
	cfg := st.Config()
	if cfg.TTL != time.Minute || cfg.LimitMarkerTTL != time.Minute || cfg.History != 1 ||
		cfg.Storage != jetstream.MemoryStorage || cfg.Replicas != 1 {
		t.Errorf("bucket config %+v", cfg)
	}
	// Members write their entries again: a region takeover may replace a
	// bucket re-created meanwhile.
	if cfg.Metadata[region.MetaRewritten] == "" {
		t.Errorf("bucket metadata %v lacks %s", cfg.Metadata, region.MetaRewritten)
	}
	// A second provider with another member TTL uses the bucket as it is.
	_, rec := start(t, ns, testEntry("m2", 2), membership.WithTTL(4*time.Second))
	rec.sees(t, 2*time.Second, "m1", "m2")
	if st, _ := kvOf(t, js).Status(context.Background()); st.TTL() != time.Minute {
		t.Errorf("TTL changed to %v", st.TTL())
	}
}

// TestMixedMemberTTL runs members configured with different member TTLs
// (a rolling change of member_ttl): all of them, and clients, must judge
// liveness by the one the bucket's creator stored, or the member that
// heartbeats slower than another's TTL is swept and expelled over and over.
func TestMixedMemberTTL(t *testing.T) {
	t.Parallel()
	short := testOpts()
	long := []membership.Option{membership.WithTTL(6 * time.Second), membership.WithHeartbeat(2 * time.Second)}
	for _, tc := range []struct {
		name          string
		first, second []membership.Option
		want          time.Duration // the bucket's member TTL
	}{
		{"short first", short, long, testTTL},
		{"long first", long, short, 6 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			a, recA := start(t, ns, testEntry("a", 1), tc.first...)
			b, recB := start(t, ns, testEntry("b", 2), tc.second...)
			_, recC := start(t, ns, nil, tc.second...)
			st, err := kvOf(t, newJS(t, ns)).Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Metadata()[membership.MetaMemberTTL]; got != tc.want.String() {
				t.Errorf("bucket metadata %s = %q, want %q", membership.MetaMemberTTL, got, tc.want)
			}
			for _, r := range []*recorder{recA, recB, recC} {
				r.sees(t, 2*time.Second, "a", "b")
			}
			// Two heartbeats of the slow member, then some.
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
				for i, r := range []*recorder{recA, recB, recC} {
					if got := r.ids(); !slices.Equal(got, []string{"a", "b"}) {
						t.Fatalf("observer %d: topology %v, want [a b]", i, got)
					}
				}
				if expelled(a) || expelled(b) {
					t.Fatalf("expelled: a %v, b %v", expelled(a), expelled(b))
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

func TestGracefulLeave(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	start(t, ns, testEntry("a", 1))
	kv := kvOf(t, newJS(t, ns))
	_, recA := start(t, ns, testEntry("a2", 2))
	b, recB := start(t, ns, testEntry("b", 3))
	recA.sees(t, 2*time.Second, "a", "a2", "b")
	recB.sees(t, 2*time.Second, "a", "a2", "b")

	began := time.Now()
	if err := b.Shutdown(true); err != nil {
		t.Fatal(err)
	}
	if present(kv, "c.b") {
		t.Error("entry still there after Shutdown(true)")
	}
	recA.sees(t, testTTL/2, "a", "a2")
	t.Logf("graceful leave seen after %v", time.Since(began))
	if err := b.Shutdown(true); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if got := recB.ids(); len(got) != 3 {
		t.Errorf("a stopped provider still publishes: %v", got)
	}
}

func TestCrashDetectedByTTL(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js := newJS(t, ns)
	a, recA := start(t, ns, testEntry("a", 1))
	_, recClient := start(t, ns, nil) // a client sees the same
	b, _ := start(t, ns, testEntry("b", 2))
	recA.sees(t, 2*time.Second, "a", "b")
	recClient.sees(t, 2*time.Second, "a", "b")
	// Heartbeats keep the entry alive well past the TTL.
	kv := kvOf(t, js)
	e1, err := kv.Get(context.Background(), "c.b")
	if err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 2*time.Second, func() error {
		e2, err := kv.Get(context.Background(), "c.b")
		if err != nil || e2.Revision() == e1.Revision() {
			return fmt.Errorf("no heartbeat yet: %v", err)
		}
		return nil
	})

	b.Crash()
	began := time.Now()
	recA.sees(t, crashSeen, "a")
	took := time.Since(began)
	recClient.sees(t, time.Second, "a")
	if took < testTTL-2*testHeartbeat {
		t.Errorf("crash seen after %v, before the entry could expire", took)
	}
	// The member that swept b deletes its key right after it told
	// proto.actor, so the delete may trail what a saw by a moment.
	enginetest.Eventually(t, 2*time.Second, func() error {
		if present(kv, "c.b") {
			return errors.New("crashed member's entry still in the bucket")
		}
		return nil
	})
	t.Logf("crash detected after %v (TTL %v, heartbeat %v)", took, testTTL, testHeartbeat)
	if a.Accepting("b", "echo") {
		t.Error("a crashed member is accepting")
	}

	// A late write under the departed id (a member that was only paused)
	// is ignored, since proto.actor has blocked that id for good, and
	// deleted again, so that the writer sees its key go and knows it is
	// out.
	data, err := testEntry("b", 2).Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "c.b", data); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 2*time.Second, func() error {
		if present(kv, "c.b") {
			return errors.New("late write of a departed member not deleted")
		}
		return nil
	})
	if got := recA.ids(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("departed id came back: %v", got)
	}
	if slices.ContainsFunc(a.Members(), func(e membership.Entry) bool { return e.ID == "b" }) {
		t.Errorf("Members lists the departed id: %+v", a.Members())
	}
}

func TestSweepWithoutMarkers(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js := newJS(t, ns)
	// A bucket someone made without LimitMarkerTTL: expiries are silent.
	if _, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{
		Bucket: subjects.MembersBucket, History: 1, TTL: time.Second, Storage: jetstream.MemoryStorage,
	}); err != nil {
		t.Fatal(err)
	}
	_, recA := start(t, ns, testEntry("a", 1))
	b, _ := start(t, ns, testEntry("b", 2))
	recA.sees(t, 2*time.Second, "a", "b")
	b.Crash()
	began := time.Now()
	// The stale sweep drops b about 2 TTLs after its last heartbeat.
	recA.sees(t, 2*time.Second+crashSeen-testTTL, "a")
	took := time.Since(began)
	if took < time.Second {
		t.Errorf("b dropped after %v, before its entry expired", took)
	}
	t.Logf("crash without limit markers detected after %v (bucket TTL 1s)", took)
}

func TestDrainAccepting(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js := newJS(t, ns)
	meta := map[string]string{"node": "n1", "region": "eu"}
	a, recA := start(t, ns, testEntry("a", 1), membership.WithMeta(meta))
	b, _ := start(t, ns, &membership.Entry{ID: "b", Host: "10.0.0.2", Port: 2, Kinds: []string{"echo", "session"},
		Status: membership.StatusUp})
	recA.sees(t, 2*time.Second, "a", "b")
	if !a.Accepting("b", "session") || !a.Accepting("b", "echo") || a.Accepting("b", "nope") || a.Accepting("x", "echo") {
		t.Error("Accepting before the drain")
	}
	if err := b.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 2*time.Second, func() error {
		if a.Accepting("b", "session") {
			return errors.New("a still sees b accepting")
		}
		return nil
	})
	if b.Accepting("b", "session") {
		t.Error("b still sees itself accepting")
	}
	if !a.Accepting("a", "echo") {
		t.Error("a is not accepting")
	}
	ms := a.Members()
	if len(ms) != 2 || ms[0].ID != "a" || ms[1].ID != "b" || ms[1].Status != membership.StatusDraining ||
		ms[0].Status != membership.StatusUp || ms[0].Meta["region"] != "eu" || ms[1].Host != "10.0.0.2" {
		t.Errorf("Members = %+v", ms)
	}
	// Draining members stay in the topology.
	if got := recA.ids(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("topology after drain %v", got)
	}
	list, err := membership.List(context.Background(), js, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[1].Status != membership.StatusDraining || list[0].Meta["node"] != "n1" {
		t.Errorf("List = %+v", list)
	}
	// A caller's Members copy cannot change the provider's view.
	ms[0].Meta["node"] = "changed"
	ms[0].Kinds[0] = "changed"
	if m := a.Members()[0]; m.Meta["node"] != "n1" || m.Kinds[0] != "echo" {
		t.Errorf("Members shares memory: %+v", m)
	}
	meta["node"] = "changed" // WithMeta copied the map
	if m := a.Members()[0]; m.Meta["node"] != "n1" {
		t.Errorf("WithMeta kept the caller's map: %+v", m)
	}
}

func TestExpelled(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js := newJS(t, ns)
	a, recA := start(t, ns, testEntry("a", 1))
	recA.sees(t, 2*time.Second, "a")
	select {
	case <-a.Expelled():
		t.Fatal("expelled at start")
	default:
	}
	kv := kvOf(t, js)
	if err := kv.Delete(context.Background(), "c.a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Expelled():
	case <-time.After(2 * time.Second):
		t.Fatal("not expelled after its entry was deleted")
	}
	recA.sees(t, time.Second)
	if err := a.Drain(context.Background()); !errors.Is(err, membership.ErrExpelled) {
		t.Errorf("Drain after expulsion = %v, want ErrExpelled", err)
	}
	// Heartbeats stopped: no zombie entry comes back.
	_, w := start(t, ns, nil)
	w.sees(t, time.Second)
	if present(kv, "c.a") {
		t.Error("heartbeats went on after the expulsion")
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js := newJS(t, ns)
	p, err := membership.New(js, testOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Drain(context.Background()); !errors.Is(err, membership.ErrNotRunning) {
		t.Errorf("Drain before start = %v", err)
	}
	if p.Accepting("a", "echo") || p.Members() != nil {
		t.Error("a provider that never started has members")
	}
	if err := p.Shutdown(true); err != nil {
		t.Errorf("Shutdown before start = %v", err)
	}
	rec := &recorder{}
	if err := p.StartForTest("c", testEntry("a", 1), rec.publish); err != nil {
		t.Fatal(err)
	}
	if got := rec.ids(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("start returned before the first topology: %v", got)
	}
	if !p.Accepting("a", "echo") {
		t.Error("own entry not accepting right after start")
	}
	if err := p.StartForTest("c", testEntry("a", 1), rec.publish); !errors.Is(err, membership.ErrAlreadyStarted) {
		t.Errorf("second start = %v", err)
	}
	if err := p.Shutdown(true); err != nil {
		t.Fatal(err)
	}
	if err := p.Drain(context.Background()); !errors.Is(err, membership.ErrNotRunning) {
		t.Errorf("Drain after shutdown = %v", err)
	}
	if err := p.StartForTest("c", testEntry("a", 1), rec.publish); !errors.Is(err, membership.ErrAlreadyStarted) {
		t.Errorf("start after shutdown = %v", err)
	}

	client, _ := start(t, ns, nil)
	if err := client.Drain(context.Background()); !errors.Is(err, membership.ErrNotRunning) {
		t.Errorf("client Drain = %v", err)
	}
	select {
	case <-client.Expelled():
		t.Error("a client was expelled")
	default:
	}
	// A client writes nothing.
	entries, err := membership.List(context.Background(), js, "c")
	if err != nil || len(entries) != 0 {
		t.Errorf("List with a client only = %v, %v", entries, err)
	}

	// An invalid own entry is refused before any write.
	q, _ := membership.New(js, testOpts()...)
	bad := testEntry("a", 0)
	if err := q.StartForTest("c", bad, rec.publish); !errors.Is(err, membership.ErrInvalidEntry) {
		t.Errorf("start with port 0 = %v", err)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	js := newJS(t, ns)
	ctx := context.Background()
	got, err := membership.List(ctx, js, "c")
	if err != nil || len(got) != 0 {
		t.Fatalf("List without bucket = %v, %v", got, err)
	}
	start(t, ns, testEntry("zz", 1))
	start(t, ns, testEntry("aa", 2))
	_, rec := start(t, ns, testEntry("mm", 3))
	rec.sees(t, 2*time.Second, "aa", "mm", "zz")
	kv := kvOf(t, js)
	other, _ := testEntry("o1", 4).Encode()
	for key, val := range map[string][]byte{
		"other.o1": other,         // another cluster
		"c.junk":   []byte("{"),   // not an entry
		"c.o2":     other,         // an entry under someone else's id
		"c.gone":   other,         // deleted below
		"cx.o1":    other,         // a cluster name with the same prefix
		"c":        []byte("bad"), // not a member key
	} {
		if _, err := kv.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "c.gone"); err != nil {
		t.Fatal(err)
	}
	got, err = membership.List(ctx, js, "c")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range got {
		ids = append(ids, e.ID)
	}
	if !slices.Equal(ids, []string{"aa", "mm", "zz"}) {
		t.Errorf("List ids = %v", ids)
	}
	if got, err := membership.List(ctx, js, "c", membership.WithBucket("elsewhere")); err != nil || len(got) != 0 {
		t.Errorf("List of a missing bucket = %v, %v", got, err)
	}
	if _, err := membership.List(ctx, js, "c", membership.WithBucket("a.b")); !errors.Is(err, membership.ErrInvalidOption) {
		t.Errorf("List with a bad bucket = %v", err)
	}
	if _, err := membership.List(ctx, nil, "c"); !errors.Is(err, membership.ErrInvalidOption) {
		t.Errorf("List(nil js) = %v", err)
	}
}

// TestServerRestart restarts a single NATS server under running members:
// the memory-stored bucket is gone afterwards. The members re-create it
// with their next heartbeat, keep their views (nobody is dropped for being
// absent), and crash detection works again.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ns := enginetest.RunServer(t, enginetest.WithStoreDir(dir))
	port := ns.Addr().(*net.TCPAddr).Port
	var logs enginetest.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("a's log:\n%s", logs.String())
		}
	})
	a, recA := start(t, ns, testEntry("a", 1), membership.WithLogger(logger))
	b, recB := start(t, ns, testEntry("b", 2))
	recA.sees(t, 2*time.Second, "a", "b")

	ns.Shutdown()
	ns.WaitForShutdown()
	ns2 := enginetest.RunServer(t, enginetest.WithStoreDir(dir), enginetest.WithPort(port))
	js2 := newJS(t, ns2)
	enginetest.Eventually(t, 5*time.Second, func() error {
		kv, err := js2.KeyValue(context.Background(), subjects.MembersBucket)
		if err != nil {
			return err
		}
		for _, k := range []string{"c.a", "c.b"} {
			if !present(kv, k) {
				return fmt.Errorf("%s not back", k)
			}
		}
		return nil
	})
	recA.sees(t, time.Second, "a", "b")
	recB.sees(t, time.Second, "a", "b")

	b.Crash()
	recA.sees(t, crashSeen+time.Second, "a")
	// Stopped while the server still runs (cleanups run in reverse order:
	// ns2 would go first).
	if err := a.Shutdown(true); err != nil {
		t.Error(err)
	}
}

// A member that starts before its JetStream answers (a cluster still
// forming; here a server whose JetStream is enabled a moment later) waits
// and joins once it does, instead of failing its start.
func TestStartBeforeJetStreamIsReady(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ns := enginetest.RunServer(t, func(o *server.Options) { o.JetStream = false })
	p, err := membership.New(newJS(t, ns), testOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(false) })
	rec := &recorder{}
	started := make(chan error, 1)
	go func() { started <- p.StartForTest("c", testEntry("a", 1), rec.publish) }()
	select {
	case err := <-started:
		t.Fatalf("the start ended before JetStream was there: %v", err)
	case <-time.After(time.Second):
	}
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: dir, MaxMemory: 64 << 20, MaxStore: 256 << 20}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the member did not join once JetStream answered")
	}
	rec.sees(t, 5*time.Second, "a")
}

// TestFirstTopologyHasMembersBeingRewritten starts clients while a member's
// entry is rewritten in a tight loop: a KV watch's "initial values done"
// marker can come before such a key (docs/UPSTREAM.md), and a first
// topology without a live member lets placement take over its grains.
func TestFirstTopologyHasMembersBeingRewritten(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ids := []string{"a", "b", "c", "d", "e"}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i, id := range ids {
		start(t, ns, testEntry(id, i+1))
		js := newJS(t, ns)
		val, err := testEntry(id, i+1).Encode()
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				_, _ = js.PublishAsync("$KV."+subjects.MembersBucket+".c."+id, val)
				select {
				case <-js.PublishAsyncComplete():
				case <-ctx.Done():
				}
			}
		})
	}
	for i := range 40 {
		p, err := membership.New(newJS(t, ns), testOpts()...)
		if err != nil {
			t.Fatal(err)
		}
		var first []string
		var once sync.Once
		publish := func(ms cluster.Members) {
			once.Do(func() {
				for _, m := range ms {
					first = append(first, m.Id)
				}
			})
		}
		if err := p.StartForTest("c", nil, publish); err != nil {
			t.Fatal(err)
		}
		_ = p.Shutdown(false)
		if !slices.Equal(first, ids) {
			t.Fatalf("client %d: first topology %v, want %v", i, first, ids)
		}
	}
}
