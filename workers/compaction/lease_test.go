package compaction

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/enginetest"
)

// runCluster starts a cluster of n embedded servers with JetStream (the
// routes from the first server's port) and answers a JetStream client on
// each.
func runCluster(t *testing.T, n int) []jetstream.JetStream {
	t.Helper()
	ports := enginetest.FreePorts(t, n)
	srvs := make([]*server.Server, n)
	for i := range n {
		ns, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: t.TempDir(), JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 256 << 20,
			NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "c", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(fmt.Sprintf("nats://127.0.0.1:%d", ports[0])),
		})
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		t.Cleanup(func() {
			ns.Shutdown()
			ns.WaitForShutdown()
		})
		srvs[i] = ns
	}
	js := make([]jetstream.JetStream, n)
	for i, ns := range srvs {
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatalf("server %d not ready", i)
		}
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		if js[i], err = jetstream.New(nc); err != nil {
			t.Fatal(err)
		}
	}
	return js
}

// Nodes racing for the lease of one session in a replicated bucket (a
// clustered deployment's): one takes it, every other is told who holds
// it. Before, over a released lease (its purge marker stays a minute) a
// loser's Create failed with the replicated "wrong last sequence" (code
// 10164) that jetstream.ErrKeyExists does not match, and the caller got
// unavailable instead of in_progress (or its wait); and a read that did
// not show a Create still in flight yet made the loser give up after
// three tries in a row ("keeps changing hands").
func TestLeaseRaceReplicated(t *testing.T) {
	t.Parallel()
	js := runCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	enginetest.Eventually(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js[0].CreateKeyValue(ctx, LeaseBucketConfig(3))
		return err
	})
	nodes := make([]*leases, len(js))
	for i, j := range js {
		kv, err := j.KeyValue(ctx, LeaseBucket)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &leases{kv: kv, js: j, subject: "$KV." + LeaseBucket + ".", ttl: 10 * time.Second,
			poll: DefaultPollInterval, log: slog.New(slog.DiscardHandler)}
	}
	const racers = 6
	for round := range 30 {
		key := fmt.Sprintf("s%d", round%5) // a key raced for again is a released one
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			won     []*lease
			holders []leaseValue
			errs    []error
		)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, holder, err := nodes[i%len(nodes)].acquire(ctx, key, ReasonThreshold)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case l != nil:
					won = append(won, l)
				default:
					holders = append(holders, holder)
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 || len(won) != 1 {
			t.Fatalf("round %d: %d holders, errors %v", round, len(won), errs)
		}
		for _, h := range holders {
			if h.Owner != won[0].owner || h.StartedAt <= 0 {
				t.Fatalf("round %d: a loser was told the holder is %+v, not %s", round, h, won[0].owner)
			}
		}
		won[0].release(ctx)
	}
}
