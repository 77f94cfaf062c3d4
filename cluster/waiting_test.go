package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// A JetStream cluster whose routes name only this node is refused at
// start: nats-server's meta group needs a second server to elect its
// leader, and the node waited for ever ("Waiting for routing to be
// established...") instead.
func TestClusterOfOneRefused(t *testing.T) {
	t.Parallel()
	ports := enginetest.FreePorts(t, 3)
	listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	for name, cc := range map[string]cluster.ClusterConfig{
		"self route":        {Name: "c", Listen: listen, Routes: []string{"nats-route://" + listen}},
		"self by localhost": {Name: "c", Listen: fmt.Sprintf("0.0.0.0:%d", ports[1]), Routes: []string{fmt.Sprintf("nats-route://localhost:%d", ports[1])}},
		"no routes":         {Name: "c", Listen: fmt.Sprintf("127.0.0.1:%d", ports[2])},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n, err := cluster.Start(ctx, cluster.Config{Name: "n1", Port: -1, StoreDir: t.TempDir(), Cluster: cc})
			if err == nil {
				_ = n.Close(ctx)
				t.Fatal("Start of a one-node JetStream cluster succeeded; its meta group never elects a leader")
			}
			if !errors.Is(err, cluster.ErrInvalidConfig) || !strings.Contains(err.Error(), "standalone") {
				t.Fatalf("Start = %v, want ErrInvalidConfig telling to run standalone", err)
			}
		})
	}
}

// The first member of a cluster waits for the others, says so in its log
// and, at the bound, says what is missing; it works once they are up.
func TestFirstMemberWaitsAndSaysWhy(t *testing.T) {
	t.Parallel()
	ports := enginetest.FreePorts(t, 3)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	cfg := func(i int, log *slog.Logger) cluster.Config {
		return cluster.Config{Name: fmt.Sprintf("n%d", i+1), Port: -1, StoreDir: t.TempDir(), Logger: log,
			MaxMemory: 32 << 20, MaxStore: 256 << 20,
			Cluster: cluster.ClusterConfig{Name: "east", Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), Routes: routes}}
	}
	sink := &logSink{}
	n1 := startNode(t, cfg(0, slog.New(sink)))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := n1.WaitJetStream(ctx)
	cancel()
	if !errors.Is(err, cluster.ErrNotReady) {
		t.Fatalf("WaitJetStream alone = %v, want ErrNotReady", err)
	}
	for _, want := range []string{"expects 3 servers", "routes to 0 other servers", routes[1], routes[2], `cluster "east"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if l := sink.find("waiting for JetStream"); !strings.Contains(l, "expects 3 servers") {
		t.Errorf("no log line saying what the node waits for (got %q)", l)
	}

	// A brand-new cluster elects once every member its routes name is up
	// (2 of 3 did not elect in 20 s with nats-server 2.15).
	n2, n3 := startNode(t, cfg(1, nil)), startNode(t, cfg(2, nil))
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitAll(t, ctx, n1, n2, n3)
	_, js := connect(t, n1)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b", Replicas: 3}); err != nil {
		t.Fatal(err)
	}
}

// A standalone node's store is refused to a clustered start: the
// clustered server does not see the streams it holds (a bucket created
// standalone was "not found" once the node joined a cluster).
func TestClusteredStartRefusesStandaloneStore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	n := startNode(t, cluster.Config{Name: "n1", Port: -1, StoreDir: dir})
	_, js := connect(t, n)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "sessions"}); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ports := enginetest.FreePorts(t, 2)
	cc := cluster.ClusterConfig{Name: "east", Listen: fmt.Sprintf("127.0.0.1:%d", ports[0]), Routes: []string{
		fmt.Sprintf("nats-route://127.0.0.1:%d", ports[0]), fmt.Sprintf("nats-route://127.0.0.1:%d", ports[1])}}
	c, err := cluster.Start(ctx, cluster.Config{Name: "n1", Port: -1, StoreDir: dir, Cluster: cc})
	if err == nil {
		_ = c.Close(ctx)
		t.Fatal("a clustered start on a standalone store succeeded: its bucket would be lost from view")
	}
	if !errors.Is(err, cluster.ErrInvalidConfig) || !strings.Contains(err.Error(), "KV_sessions") {
		t.Fatalf("Start = %v, want ErrInvalidConfig naming KV_sessions", err)
	}
	// The same store still starts standalone, and an empty one clustered.
	startNode(t, cluster.Config{Name: "n1", Port: -1, StoreDir: dir}).Close(ctx)
	startNode(t, cluster.Config{Name: "n1", Port: -1, StoreDir: t.TempDir(), Cluster: cc})
}

// A cluster member's store is refused to a standalone start: it would
// serve the member's copies of the cluster's streams alone, and diverge.
// (A member restarted without its cluster settings started standalone.)
func TestStandaloneStartRefusesMemberStore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	ports := enginetest.FreePorts(t, 2)
	cc := cluster.ClusterConfig{Name: "east", Listen: fmt.Sprintf("127.0.0.1:%d", ports[0]), Routes: []string{
		fmt.Sprintf("nats-route://127.0.0.1:%d", ports[0]), fmt.Sprintf("nats-route://127.0.0.1:%d", ports[1])}}
	if err := startNode(t, cluster.Config{Name: "n1", Port: -1, StoreDir: dir, Cluster: cc}).Close(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := cluster.Start(ctx, cluster.Config{Name: "n1", Port: -1, StoreDir: dir})
	if err == nil {
		_ = s.Close(ctx)
		t.Fatal("a standalone start on a cluster member's store succeeded")
	}
	if !errors.Is(err, cluster.ErrInvalidConfig) || !strings.Contains(err.Error(), `cluster "east"`) {
		t.Fatalf("Start = %v, want ErrInvalidConfig naming cluster east", err)
	}
	// The same store still starts clustered.
	startNode(t, cluster.Config{Name: "n1", Port: -1, StoreDir: dir, Cluster: cc})
}
