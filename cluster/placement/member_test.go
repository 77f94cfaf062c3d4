package placement_test

// The child side of the test harness: one proto.actor member (or client)
// per process, driven by the parent test over NATS. protoactor's
// remote.Start writes the global gRPC logger that the gRPC goroutines of
// members already running read, so several members in one process always
// trip the race detector (docs/UPSTREAM.md); one member per process does
// not, and every process still runs under -race.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/iii-on-nats/iii/cluster/placement"
)

const (
	kind          = "counter"
	membersBucket = "test-members"
	clusterName   = "test"
	// Environment of a child process.
	envURL  = "PLACEMENT_TEST_NATS"  // set: run as a member, not as tests
	envName = "PLACEMENT_TEST_NAME"  // control subject token
	envRole = "PLACEMENT_TEST_ROLE"  // "member" or "client"
	envLog  = "PLACEMENT_TEST_DEBUG" // set: debug logs on stderr
)

// drainNow is the drain message of the test grains.
type drainNow struct{}

// counter counts its calls and answers "<member address>:<count>"; the
// message "passivate" makes it stop after answering, drainNow stops it.
type counter struct {
	n       int
	drained *atomic.Int32
}

func (g *counter) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *wrapperspb.StringValue:
		g.n++
		ctx.Respond(wrapperspb.String(fmt.Sprintf("%s:%d", ctx.Self().Address, g.n)))
		if m.Value == "passivate" {
			ctx.Stop(ctx.Self())
		}
	case drainNow:
		g.drained.Add(1)
		ctx.Stop(ctx.Self())
	}
}

// kvProvider is a minimal cluster provider over a KV bucket: a member puts
// its entry, everyone watches the bucket; the parent deletes a crashed
// member's entry to stand for its membership TTL expiring.
type kvProvider struct {
	kv        jetstream.KeyValue
	key       string
	published atomic.Int32 // members in the last topology handed to the cluster
}

type memberEntry struct {
	ID    string   `json:"id"`
	Host  string   `json:"host"`
	Port  int      `json:"port"`
	Kinds []string `json:"kinds"`
}

func (p *kvProvider) StartMember(c *cluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(memberEntry{ID: c.ActorSystem.ID, Host: host, Port: port, Kinds: c.GetClusterKinds()})
	if _, err := p.kv.Put(context.Background(), c.ActorSystem.ID, b); err != nil {
		return err
	}
	p.key = c.ActorSystem.ID
	return p.watch(c)
}

func (p *kvProvider) StartClient(c *cluster.Cluster) error { return p.watch(c) }

func (p *kvProvider) watch(c *cluster.Cluster) error {
	w, err := p.kv.WatchAll(context.Background())
	if err != nil {
		return err
	}
	go func() {
		members := map[string]*cluster.Member{}
		ready := false
		for e := range w.Updates() {
			switch {
			case e == nil:
				ready = true
			case e.Operation() == jetstream.KeyValuePut:
				var m memberEntry
				if json.Unmarshal(e.Value(), &m) == nil {
					members[e.Key()] = &cluster.Member{Id: m.ID, Host: m.Host, Port: int32(m.Port), Kinds: m.Kinds}
				}
			default:
				delete(members, e.Key())
			}
			if ready {
				c.MemberList.UpdateClusterTopology(slices.Collect(func(yield func(*cluster.Member) bool) {
					for _, m := range members {
						if !yield(m) {
							return
						}
					}
				}))
				p.published.Store(int32(len(members)))
			}
		}
	}()
	return nil
}

func (p *kvProvider) Shutdown(graceful bool) error {
	if graceful && p.key != "" {
		return p.kv.Delete(context.Background(), p.key)
	}
	return nil
}

// node is the member of a child process.
type node struct {
	c        *cluster.Cluster
	l        *placement.Lookup
	provider *kvProvider
	drained  atomic.Int32
	accept   atomic.Pointer[string] // "", "self" or "not:<member id>"
	frozen   atomic.Bool
	client   bool
}

func logger() *slog.Logger {
	if os.Getenv(envLog) != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func startNode(js jetstream.JetStream, client bool) (*node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: membersBucket, Storage: jetstream.MemoryStorage})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, membersBucket)
	}
	if err != nil {
		return nil, err
	}
	n := &node{provider: &kvProvider{kv: kv}, client: client}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	self := sys.ID
	n.l, err = placement.New(js,
		placement.WithLogger(logger().With("member", self)),
		placement.WithActivationTimeout(2*time.Second),
		placement.WithDrainMessage(func() any { return drainNow{} }),
		placement.WithAccepting(func(id, _ string) bool {
			switch mode := *n.accept.Load(); {
			case mode == "self":
				return id == self
			case strings.HasPrefix(mode, "not:"):
				return id != mode[len("not:"):]
			}
			return true
		}))
	if err != nil {
		return nil, err
	}
	n.accept.Store(new(string))
	k := cluster.NewKind(kind, actor.PropsFromProducer(func() actor.Actor { return &counter{drained: &n.drained} }))
	cfg := cluster.Configure(clusterName, n.provider, n.l,
		remote.Configure("127.0.0.1", 0), cluster.WithKinds(k), cluster.WithRequestTimeout(3*time.Second))
	// Gossip off: every gossip round of "topology" rewrites the remote's
	// BlockList, which inbound connections read without its lock
	// (docs/UPSTREAM.md). Placement does not use gossip.
	cfg.GossipInterval = time.Hour
	n.c = cluster.New(sys, cfg)
	if client {
		n.c.StartClient()
	} else {
		n.c.StartMember()
	}
	return n, nil
}

// call sends one message to grain id and returns the answering member's
// address and the grain's count.
func (n *node) call(id, msg string) (addr string, count int, err error) {
	res, err := n.c.Request(id, kind, wrapperspb.String(msg), cluster.WithTimeout(3*time.Second), cluster.WithRetryCount(20))
	if err != nil {
		return "", 0, err
	}
	s, ok := res.(*wrapperspb.StringValue)
	if !ok {
		return "", 0, fmt.Errorf("answer %T", res)
	}
	i := strings.LastIndexByte(s.Value, ':')
	_, err = fmt.Sscan(s.Value[i+1:], &count)
	return s.Value[:i], count, err
}

// Control messages between the parent test and a child.
type (
	ctlReq struct {
		ID      string `json:"id,omitempty"`
		Msg     string `json:"msg,omitempty"`
		Mode    string `json:"mode,omitempty"`
		N       int    `json:"n,omitempty"`
		Timeout int64  `json:"timeout,omitempty"` // ns
	}
	ctlResp struct {
		ID    string `json:"id,omitempty"`
		Addr  string `json:"addr,omitempty"`
		N     int    `json:"n,omitempty"`
		Err   string `json:"err,omitempty"`
		Bench *bench `json:"bench,omitempty"`
	}
	bench struct {
		Local, Remote        int   // activations
		LocalNs, RemoteNs    int64 // their total latency
		Warm                 int   // calls to active grains
		WarmNs               int64
		LocalMaxNs, RemMaxNs int64
	}
)

func ctlSubject(name, op string) string { return "ctl." + name + "." + op }

// runChild is a child process's main: start the member, serve control
// requests until "stop", exit 0. Races are reported by the race runtime
// on stderr and in the exit status, which the parent checks.
func runChild() int {
	url, name := os.Getenv(envURL), os.Getenv(envName)
	stop := make(chan struct{})
	var once sync.Once
	// The parent's server going away ends the child too.
	nc, err := nats.Connect(url, nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) {
		once.Do(func() { close(stop) })
	}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: connect:", err)
		return 2
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: jetstream:", err)
		return 2
	}
	n, err := startNode(js, os.Getenv(envRole) == "client")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: start:", err)
		return 2
	}
	sub, err := nc.Subscribe(ctlSubject(name, "*"), func(m *nats.Msg) {
		go func() {
			var req ctlReq
			_ = json.Unmarshal(m.Data, &req)
			op := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
			resp := n.control(op, req)
			b, _ := json.Marshal(resp)
			_ = m.Respond(b)
			if op == "stop" {
				once.Do(func() { close(stop) })
			}
		}()
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: subscribe:", err)
		return 2
	}
	_ = nc.Flush()
	select {
	case <-stop:
	case <-time.After(2 * time.Minute): // the parent is gone
		fmt.Fprintln(os.Stderr, "child: never stopped")
		return 3
	}
	_ = sub.Unsubscribe()
	_ = nc.Flush()
	return 0
}

func (n *node) control(op string, req ctlReq) ctlResp {
	errResp := func(err error) ctlResp {
		if err == nil {
			return ctlResp{}
		}
		return ctlResp{Err: err.Error()}
	}
	switch op {
	case "info":
		return ctlResp{ID: n.c.ActorSystem.ID, Addr: n.c.ActorSystem.Address()}
	case "call":
		addr, count, err := n.call(req.ID, req.Msg)
		r := errResp(err)
		r.Addr, r.N = addr, count
		return r
	case "members":
		return ctlResp{N: int(n.provider.published.Load())}
	case "local":
		return ctlResp{N: n.l.Local()}
	case "drained":
		return ctlResp{N: int(n.drained.Load())}
	case "drain":
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(req.Timeout))
		defer cancel()
		return errResp(n.l.Drain(ctx))
	case "accept":
		mode := req.Mode
		n.accept.Store(&mode)
		return ctlResp{}
	case "freeze": // crash as seen from the cluster: no remote, nothing released
		n.frozen.Store(true)
		n.c.Shutdown(false)
		return ctlResp{}
	case "stop":
		n.l.Shutdown() // releases what this member still owns
		switch {
		case n.frozen.Load():
		case n.client:
			// cluster.Shutdown of a client dereferences its gossiper,
			// which only members start.
			n.c.ActorSystem.Shutdown()
			n.c.Remote.Shutdown(false)
		default:
			_ = n.provider.Shutdown(true)
			n.c.Shutdown(false)
		}
		return ctlResp{}
	case "bench":
		return ctlResp{Bench: n.bench(req.ID, req.N)}
	}
	return ctlResp{Err: "unknown op " + op}
}

// bench activates n fresh grains (prefix-i) one after the other, then
// calls each once more, and sums the latencies by where the grain landed.
func (n *node) bench(prefix string, count int) *bench {
	b := &bench{}
	self := n.c.ActorSystem.Address()
	for i := range count {
		start := time.Now()
		addr, _, err := n.call(fmt.Sprintf("%s-%d", prefix, i), "inc")
		d := time.Since(start).Nanoseconds()
		if err != nil {
			continue
		}
		if addr == self {
			b.Local++
			b.LocalNs += d
			b.LocalMaxNs = max(b.LocalMaxNs, d)
		} else {
			b.Remote++
			b.RemoteNs += d
			b.RemMaxNs = max(b.RemMaxNs, d)
		}
	}
	for i := range count {
		start := time.Now()
		if _, _, err := n.call(fmt.Sprintf("%s-%d", prefix, i), "inc"); err == nil {
			b.Warm++
			b.WarmNs += time.Since(start).Nanoseconds()
		}
	}
	return b
}
