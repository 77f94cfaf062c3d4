package region_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func init() {
	// Gateways wait 1 s before soliciting by default.
	server.SetGatewaysSolicitDelay(10 * time.Millisecond)
}

// supercluster is one single-server cluster per region, joined by gateways
// into one JetStream meta group.
type supercluster struct {
	t       testing.TB
	servers map[string]*server.Server
	net     *network
}

// startSupercluster starts one server per region name and waits until the
// meta group has every server as a peer and a leader.
//
// Every gateway link goes through a proxy that adds delay one way (so 2×delay
// round trip between regions); each server advertises its proxy's address.
// The system account has user "admin" (password "admin"); clients without
// credentials land in the global account.
func startSupercluster(t testing.TB, delay time.Duration, regions ...string) *supercluster {
	t.Helper()
	sc := &supercluster{t: t, servers: map[string]*server.Server{}, net: &network{isolated: map[string]bool{}}}
	cports, gports, proxies := map[string]int{}, map[string]int{}, map[string]*delayProxy{}
	// A one-server cluster lists a route (to itself) before it starts, so
	// its ports are picked up front.
	free := enginetest.FreePorts(t, 2*len(regions))
	for i, r := range regions {
		cports[r], gports[r] = free[2*i], free[2*i+1]
		proxies[r] = sc.net.startProxy(t, r, fmt.Sprintf("127.0.0.1:%d", gports[r]), delay)
	}
	for _, r := range regions {
		var gws []*server.RemoteGatewayOpts
		for _, other := range regions {
			if other == r {
				continue
			}
			u, _ := url.Parse("nats://" + proxies[other].addr())
			gws = append(gws, &server.RemoteGatewayOpts{Name: other, URLs: []*url.URL{u}})
		}
		o := &server.Options{}
		if err := o.ProcessConfigString(`accounts { $SYS { users = [ { user: "admin", pass: "admin" } ] } }`); err != nil {
			t.Fatalf("config: %v", err)
		}
		o.ServerName = "srv-" + r
		o.Host, o.Port = "127.0.0.1", server.RANDOM_PORT
		o.JetStream, o.StoreDir = true, t.TempDir()
		o.JetStreamMaxMemory, o.JetStreamMaxStore = 64<<20, 256<<20
		o.NoLog, o.NoSigs = true, true
		o.Cluster = server.ClusterOpts{Name: r, Host: "127.0.0.1", Port: cports[r]}
		o.Routes = server.RoutesFromStr(fmt.Sprintf("nats://127.0.0.1:%d", cports[r]))
		o.Gateway = server.GatewayOpts{Name: r, Host: "127.0.0.1", Port: gports[r], Gateways: gws,
			Advertise: proxies[r].addr()}
		ns, err := server.NewServer(o)
		if err != nil {
			t.Fatalf("server %s: %v", r, err)
		}
		ns.Start()
		t.Cleanup(func() {
			ns.Shutdown()
			ns.WaitForShutdown()
		})
		sc.servers[r] = ns
	}
	for r, ns := range sc.servers {
		if !ns.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %s not ready (cluster port %d, gateway port %d: taken by another process?)", r, cports[r], gports[r])
		}
	}
	enginetest.Eventually(t, 20*time.Second, func() error {
		leader := sc.metaLeader()
		if leader == "" {
			return fmt.Errorf("no meta leader")
		}
		// Only the leader answers; it counts peers with current stats.
		if n := len(sc.servers[leader].JetStreamClusterPeers()); n != len(regions) {
			return fmt.Errorf("meta leader %s sees %d peers", leader, n)
		}
		return nil
	})
	return sc
}

// moveMetaLeader asks the meta leader to step down in favour of a server
// of region (system account API).
func (sc *supercluster) moveMetaLeader(region string) {
	sc.t.Helper()
	if sc.metaLeader() == region {
		return
	}
	var any *server.Server
	for _, ns := range sc.servers {
		any = ns
	}
	nc := enginetest.Connect(sc.t, any, nats.UserInfo("admin", "admin"))
	enginetest.Eventually(sc.t, 20*time.Second, func() error {
		if sc.metaLeader() == region {
			return nil
		}
		req := fmt.Sprintf(`{"placement":{"cluster":%q}}`, region)
		if _, err := nc.Request("$JS.API.META.LEADER.STEPDOWN", []byte(req), 2*time.Second); err != nil {
			return err
		}
		return fmt.Errorf("meta leader is %q", sc.metaLeader())
	})
}

// metaLeader is the region whose server leads the meta group ("" if none).
func (sc *supercluster) metaLeader() string {
	for r, ns := range sc.servers {
		if ns.Running() && ns.JetStreamIsLeader() {
			return r
		}
	}
	return ""
}

// js connects a client to region's server.
func (sc *supercluster) js(region string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	sc.t.Helper()
	nc := enginetest.Connect(sc.t, sc.servers[region], opts...)
	js, err := jetstream.New(nc)
	if err != nil {
		sc.t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// writer puts keys w000000, w000001 … into a bucket as fast as it can and
// keeps the ones acknowledged.
type writer struct {
	mu     sync.Mutex
	acked  []ack
	writes atomic.Int64
	done   chan struct{}
}

// startWriter writes to kv until ctx ends; with stopOnErr also at the
// first failed put (else it keeps trying).
func startWriter(ctx context.Context, kv jetstream.KeyValue, stopOnErr bool) *writer {
	w := &writer{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ctx.Err() == nil; i++ {
			key := fmt.Sprintf("w%06d", i)
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			rev, err := kv.Put(pctx, key, []byte(key))
			cancel()
			if err != nil {
				if stopOnErr {
					return
				}
				continue
			}
			w.mu.Lock()
			w.acked = append(w.acked, ack{key, rev})
			w.mu.Unlock()
			w.writes.Add(1)
		}
	}()
	return w
}

// atLeast waits until n writes were acknowledged.
func (w *writer) atLeast(t testing.TB, n int64) {
	t.Helper()
	enginetest.Eventually(t, 10*time.Second, func() error {
		if got := w.writes.Load(); got < n {
			return fmt.Errorf("%d writes", got)
		}
		return nil
	})
}

// stop waits for the writer to end (its context ended, or a put failed
// with stopOnErr) and returns the acknowledged writes.
func (w *writer) stop() []ack {
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}

// mirrorCaughtUp runs Mirror into region and waits until the mirrors of
// streams there have no lag.
func mirrorCaughtUp(t testing.TB, ctx context.Context, js jetstream.JetStream, reg string, streams ...string) {
	t.Helper()
	if _, err := region.Mirror(ctx, js, reg); err != nil {
		t.Fatalf("mirror: %v", err)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		lag, err := region.Lag(ctx, js, reg)
		for _, s := range streams {
			if l, ok := lag[region.MirrorName(s, reg)]; err != nil || !ok || l > 0 {
				return fmt.Errorf("lag %v, %v", lag, err)
			}
		}
		return nil
	})
}

// waitLost waits until stream's home answers as lost (offline or
// silent) to js.
func waitLost(t testing.TB, ctx context.Context, js jetstream.JetStream, stream string) {
	t.Helper()
	enginetest.Eventually(t, 30*time.Second, func() error {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := region.Home(hctx, js, stream)
		if errors.Is(err, region.ErrOffline) || errors.Is(err, region.ErrUnreachable) {
			return nil
		}
		return fmt.Errorf("home: %v", err)
	})
}
