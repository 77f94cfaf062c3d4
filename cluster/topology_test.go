package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// startNode starts a node and stops it at the end of the test.
func startNode(t testing.TB, cfg cluster.Config) *cluster.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Close(ctx)
	})
	return n
}

// connect opens an in-process connection closed at the end of the test.
func connect(t testing.TB, n *cluster.Node) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := n.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// waitAll runs WaitJetStream on every node concurrently.
func waitAll(t testing.TB, ctx context.Context, nodes ...*cluster.Node) {
	t.Helper()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.WaitJetStream(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// threeNodes starts a 3-node JetStream cluster from one static route list
// (every node lists all three, itself included) and waits for JetStream.
func threeNodes(t testing.TB) ([]*cluster.Node, time.Duration) {
	t.Helper()
	// A JetStream cluster's nodes need their route ports before the first
	// one starts, so the test picks them up front.
	ports := enginetest.FreePorts(t, 3)
	var routes []string
	for i := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i]))
	}
	start := time.Now()
	nodes := make([]*cluster.Node, 3)
	for i := range nodes {
		cfg := cluster.Config{
			Name: fmt.Sprintf("n%d", i+1), Port: -1, StoreDir: t.TempDir(),
			MaxMemory: 32 << 20, MaxStore: 256 << 20,
			Cluster: cluster.ClusterConfig{Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), Routes: routes},
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		if p, r := cfg.Peers(), cfg.Replicas(); p != 3 || r != 3 {
			t.Fatalf("Peers, Replicas = %d, %d; want 3, 3", p, r)
		}
		nodes[i] = startNode(t, cfg)
	}
	// Usually < 1.5 s; when the first RAFT votes split, the next election
	// comes after nats-server's fixed 4-9 s election timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	waitAll(t, ctx, nodes...)
	return nodes, time.Since(start)
}

func TestThreeNodeCluster(t *testing.T) {
	t.Parallel()
	nodes, formed := threeNodes(t)
	t.Logf("3-node JetStream cluster formed (start → WaitJetStream on all) in %v", formed)
	for i, n := range nodes {
		if n.ClusterAddr() != strings.TrimPrefix(n.Config().Cluster.Routes[i], "nats-route://") {
			t.Errorf("node %d ClusterAddr = %q, routes %v", i, n.ClusterAddr(), n.Config().Cluster.Routes)
		}
		if n.GatewayAddr() != "" || n.LeafAddr() != "" {
			t.Errorf("gateway %q / leaf %q should be off", n.GatewayAddr(), n.LeafAddr())
		}
	}
	// Room for two RAFT elections (meta and the bucket's group) after a
	// node goes: nats-server's election timeout is a fixed 4-9 s each.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	// Write on one node, read on another, then lose the bucket's leader
	// (the slow case: a RAFT election, up to its 9 s timeout) and write
	// and read on the two left.
	kvOn := func(n *cluster.Node) jetstream.KeyValue {
		_, js := connect(t, n)
		kv, err := js.KeyValue(ctx, "r3")
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	_, js1 := connect(t, nodes[0])
	kv, err := js1.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "r3", Replicas: nodes[0].Config().Replicas()})
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ci := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Cluster
	if ci == nil || len(ci.Replicas) != 2 {
		t.Fatalf("bucket cluster info %+v, want a leader and 2 replicas", ci)
	}
	leader := -1
	for i, n := range nodes {
		if n.Config().Name == ci.Leader {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("bucket leader %q is none of the nodes", ci.Leader)
	}
	var left []*cluster.Node
	for i, n := range nodes {
		if i != leader {
			left = append(left, n)
		}
	}
	writer, reader := kvOn(left[0]), kvOn(left[1])
	if _, err := kv.Put(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	// KV buckets allow direct get: a node answers from its own replica,
	// which may not have applied the put yet (no read-your-writes across
	// nodes), hence Eventually.
	read := func(want string) func() error {
		return func() error {
			e, err := reader.Get(ctx, "k")
			if err != nil {
				return err
			}
			if string(e.Value()) != want {
				return fmt.Errorf("%s reads %q, want %q", left[1].Config().Name, e.Value(), want)
			}
			return nil
		}
	}
	enginetest.Eventually(t, 3*time.Second, read("v1"))

	// Lose one node of three: quorum stays, the bucket stays writable
	// after its group elects a new leader.
	if err := nodes[leader].Close(ctx); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	enginetest.Eventually(t, 20*time.Second, func() error {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := writer.Put(pctx, "k", []byte("v2"))
		return err
	})
	t.Logf("writable again %v after the bucket's leader %s went down", time.Since(lost), ci.Leader)
	enginetest.Eventually(t, 3*time.Second, read("v2"))
}

func TestGatewayRegions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	b := startNode(t, cluster.Config{
		Name: "b1", Port: -1, StoreDir: t.TempDir(), MaxMemory: 32 << 20, MaxStore: 256 << 20,
		Region: "B", Gateway: cluster.GatewayConfig{Listen: "127.0.0.1:0"},
	})
	a := startNode(t, cluster.Config{
		Name: "a1", Port: -1, StoreDir: t.TempDir(), MaxMemory: 32 << 20, MaxStore: 256 << 20,
		Region: "A", Gateway: cluster.GatewayConfig{Listen: "127.0.0.1:0",
			Gateways: []cluster.RemoteGateway{{Name: "B", URLs: []string{"nats://" + b.GatewayAddr()}}}},
	})
	if a.GatewayAddr() == "" || strings.HasSuffix(a.GatewayAddr(), ":0") {
		t.Fatalf("GatewayAddr = %q", a.GatewayAddr())
	}
	// A one-node region routes to itself on a loopback port.
	if !strings.HasPrefix(a.ClusterAddr(), "127.0.0.1:") {
		t.Fatalf("ClusterAddr = %q, want the loopback self-route listener", a.ClusterAddr())
	}
	waitAll(t, ctx, a, b)
	t.Logf("2 regions with gateways: JetStream ready in %v", time.Since(start))
	// One JetStream meta group spans the supercluster.
	jsz, err := a.Server().Jsz(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("meta group seen from A: cluster %q leader %q size %d", jsz.Meta.Name, jsz.Meta.Leader, jsz.Meta.Size)
	if jsz.Meta.Size != 2 {
		t.Errorf("meta group size %d, want 2 (one per region)", jsz.Meta.Size)
	}

	ncA, jsA := connect(t, a)
	ncB, jsB := connect(t, b)
	sub, err := ncA.Subscribe("svc.where", func(m *nats.Msg) { _ = m.Respond([]byte("A:" + string(m.Data))) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	enginetest.Eventually(t, 5*time.Second, func() error {
		m, err := ncB.Request("svc.where", []byte("from-B"), 300*time.Millisecond)
		if err != nil {
			return err
		}
		if string(m.Data) != "A:from-B" {
			return fmt.Errorf("reply %q", m.Data)
		}
		return nil
	})

	kvB, err := jsB.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "geo"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := kvB.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Cluster; ci == nil || ci.Name != "B" {
		t.Errorf("bucket created from B is placed in %+v, want cluster B", ci)
	}
	kvA, err := jsA.KeyValue(ctx, "geo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvA.Put(ctx, "from", []byte("A")); err != nil {
		t.Fatal(err)
	}
	if e, err := kvB.Get(ctx, "from"); err != nil || string(e.Value()) != "A" {
		t.Fatalf("B reads %v, %v", e, err)
	}
	if e, err := kvA.Get(ctx, "from"); err != nil || string(e.Value()) != "A" {
		t.Fatalf("A reads %v, %v", e, err)
	}
}

// logSink collects log records' text.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.Value.String()); return true })
	s.mu.Lock()
	s.lines = append(s.lines, b.String())
	s.mu.Unlock()
	return nil
}
func (s *logSink) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *logSink) WithGroup(string) slog.Handler      { return s }
func (s *logSink) find(sub string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if strings.Contains(strings.ToLower(l), strings.ToLower(sub)) {
			return l
		}
	}
	return ""
}

func leafHub(t testing.TB) *cluster.Node {
	return startNode(t, cluster.Config{
		Name: "hub", Port: -1, StoreDir: t.TempDir(), MaxMemory: 32 << 20, MaxStore: 256 << 20,
		LeafNodes: cluster.LeafNodeConfig{Listen: "127.0.0.1:0", Users: []cluster.LeafUser{{User: "edge", Password: "secret"}}},
	})
}

func TestLeafNode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	hub := leafHub(t)
	if hub.LeafAddr() == "" || strings.HasSuffix(hub.LeafAddr(), ":0") {
		t.Fatalf("LeafAddr = %q", hub.LeafAddr())
	}
	edgeCfg := cluster.Config{
		Name: "edge1", Port: -1,
		Leaf: cluster.LeafConfig{URLs: []string{"nats-leaf://" + hub.LeafAddr()}, User: "edge", Password: "secret"},
	}
	start := time.Now()
	edge := startNode(t, edgeCfg)
	if edge.Server().JetStreamEnabled() {
		t.Fatal("a leaf must run without JetStream")
	}
	if err := edge.WaitJetStream(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("leaf: hub JetStream answers through the leaf %v after edge start", time.Since(start))
	if hub.Server().NumLeafNodes() != 1 || edge.Server().NumLeafNodes() != 1 {
		t.Fatalf("leaf connections: hub %d, edge %d", hub.Server().NumLeafNodes(), edge.Server().NumLeafNodes())
	}

	ncHub, jsHub := connect(t, hub)
	// An edge client over TCP, as a worker on the edge machine would.
	ncEdge, err := nats.Connect(edge.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer ncEdge.Close()
	sub, err := ncHub.Subscribe("svc.hub", func(m *nats.Msg) { _ = m.Respond([]byte("hub:" + string(m.Data))) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	enginetest.Eventually(t, 5*time.Second, func() error {
		m, err := ncEdge.Request("svc.hub", []byte("edge"), 300*time.Millisecond)
		if err != nil {
			return err
		}
		if string(m.Data) != "hub:edge" {
			return fmt.Errorf("reply %q", m.Data)
		}
		return nil
	})

	kvHub, err := jsHub.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "edgekv"})
	if err != nil {
		t.Fatal(err)
	}
	jsEdge, err := jetstream.New(ncEdge)
	if err != nil {
		t.Fatal(err)
	}
	kvEdge, err := jsEdge.KeyValue(ctx, "edgekv")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvEdge.Put(ctx, "k", []byte("from-edge")); err != nil {
		t.Fatal(err)
	}
	if e, err := kvHub.Get(ctx, "k"); err != nil || string(e.Value()) != "from-edge" {
		t.Fatalf("hub reads %v, %v", e, err)
	}
	if e, err := kvEdge.Get(ctx, "k"); err != nil || string(e.Value()) != "from-edge" {
		t.Fatalf("edge reads %v, %v", e, err)
	}

	// A watch on the edge (an ordered push consumer delivering through the
	// leaf) sees a put made on the hub.
	w, err := kvEdge.Watch(ctx, "w", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := kvHub.Put(ctx, "w", []byte("from-hub")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w.Updates():
		if e == nil || string(e.Value()) != "from-hub" {
			t.Fatalf("watch got %v", e)
		}
	case <-ctx.Done():
		t.Fatal("watch on the edge saw nothing")
	}

	// A work queue: publish, pull and ack from the edge.
	if _, err := jsHub.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	if _, err := jsEdge.Publish(ctx, "jobs.1", []byte("job")); err != nil {
		t.Fatal(err)
	}
	cons, err := jsEdge.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{Durable: "edge", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil || string(m.Data()) != "job" {
			t.Fatalf("job %q ack %v", m.Data(), err)
		}
	}
	enginetest.Eventually(t, 2*time.Second, func() error {
		info, err := jsHub.Stream(ctx, "JOBS")
		if err != nil {
			return err
		}
		if n := info.CachedInfo().State.Msgs; n != 0 {
			return fmt.Errorf("%d jobs left", n)
		}
		return nil
	})
}

func TestLeafNodeWrongPassword(t *testing.T) {
	t.Parallel()
	hub := leafHub(t)
	sink := &logSink{}
	edge := startNode(t, cluster.Config{
		Name: "edge-bad", Port: -1, Logger: slog.New(sink),
		Leaf: cluster.LeafConfig{URLs: []string{"nats-leaf://" + hub.LeafAddr()}, User: "edge", Password: "wrong"},
	})
	t.Cleanup(func() {
		if t.Failed() {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			t.Logf("edge log:\n%s", strings.Join(sink.lines, "\n"))
		}
	})
	// The edge retries every second; allow for a loaded machine.
	enginetest.Eventually(t, 10*time.Second, func() error {
		if l := sink.find("authorization violation"); l != "" {
			t.Logf("edge logged: %s", l)
			return nil
		}
		return errors.New("no auth error logged yet")
	})
	if n, m := hub.Server().NumLeafNodes(), edge.Server().NumLeafNodes(); n != 0 || m != 0 {
		t.Fatalf("leaf connections with a wrong password: hub %d, edge %d", n, m)
	}
	// And JetStream never answers through it.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := edge.WaitJetStream(ctx); !errors.Is(err, cluster.ErrNotReady) {
		t.Fatalf("WaitJetStream = %v, want ErrNotReady", err)
	}
}

// A fatal start error ends Start at once with the server's reason, not
// after the ready timeout.
func TestStartFatalIsImmediate(t *testing.T) {
	t.Parallel()
	n1 := startNode(t, cluster.Config{Name: "n", Port: -1, StoreDir: t.TempDir(),
		LeafNodes: cluster.LeafNodeConfig{Listen: "127.0.0.1:0"}})
	start := time.Now()
	_, err := cluster.Start(context.Background(), cluster.Config{Port: -1, StoreDir: t.TempDir(),
		LeafNodes: cluster.LeafNodeConfig{Listen: n1.LeafAddr()}})
	if !errors.Is(err, cluster.ErrNotReady) {
		t.Fatalf("Start on a used leaf port = %v, want ErrNotReady", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v", d)
	}
	t.Logf("%v", err)
}
