package membership_test

// The proto.actor side of the conformance test runs every cluster member
// in its own child process: several protoactor-go members in one process
// race inside the library (grpclog.SetLoggerV2 called by every
// remote.Start, among others; see docs/UPSTREAM.md), which `go test -race`
// would report against this package. A child is this test binary
// re-executed with envMember set; TestMain then runs runMember instead of
// the tests. It reports over NATS and obeys commands from the parent test.
// Children run under the race detector too; the parent reads their reports
// (races_test.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/iii-on-nats/iii/cluster/membership"
)

// Environment of a child member.
const (
	envMember  = "MEMBERSHIP_TEST_MEMBER"  // member name; set = run as a child
	envRole    = "MEMBERSHIP_TEST_ROLE"    // "member" or "client"
	envNATS    = "MEMBERSHIP_TEST_NATS"    // server URL
	envCluster = "MEMBERSHIP_TEST_CLUSTER" // proto.actor cluster name
	envPrefix  = "MEMBERSHIP_TEST_PREFIX"  // subject prefix of events and commands
)

// Timings of the tests: a short TTL so that crash detection is quick.
const (
	testTTL       = 1500 * time.Millisecond
	testHeartbeat = 300 * time.Millisecond
	// crashSeen bounds crash detection: the entry expires at most a TTL
	// after the crash, and the marker arrives at once (typical: 1.4-1.7 s).
	// The slack is for a loaded 2-core machine under -race: a whole-suite
	// run beside other work once took over TTL + 2 s. The lower bound is
	// checked apart.
	crashSeen = testTTL + 6*time.Second
	// joinSeen bounds the start of child processes until all see them.
	joinSeen = 10 * time.Second
)

func TestMain(m *testing.M) {
	if name := os.Getenv(envMember); name != "" {
		os.Exit(runMember(name))
	}
	os.Exit(m.Run())
}

// event is what a child publishes on "<prefix>.ev.<name>".
type event struct {
	Type    string   `json:"type"` // "ready", "topology", "error"
	ID      string   `json:"id,omitempty"`
	Addr    string   `json:"addr,omitempty"`
	Members []string `json:"members,omitempty"`
	Text    string   `json:"text,omitempty"`
}

// command is what the parent sends on "<prefix>.cmd.<name>".
type command struct {
	Op     string   `json:"op"` // call, drain, accepting, members, crash, leave, exit
	IDs    []string `json:"ids,omitempty"`
	Member string   `json:"member,omitempty"`
	Kind   string   `json:"kind,omitempty"`
}

type reply struct {
	Err       string             `json:"err,omitempty"`
	Addrs     []string           `json:"addrs,omitempty"`
	Accepting bool               `json:"accepting,omitempty"`
	Members   []membership.Entry `json:"members,omitempty"`
}

// echoGrain answers a StringValue with its member's address.
type echoGrain struct{ addr string }

func (g *echoGrain) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*wrapperspb.StringValue); ok {
		ctx.Respond(wrapperspb.String(g.addr))
	}
}

// observed is the provider with a hook run when the cluster starts it:
// after proto.actor's identity lookup has subscribed to topology events.
type observed struct {
	*membership.Provider
	starting func()
}

func (o observed) StartMember(c *cluster.Cluster) error {
	o.starting()
	return o.Provider.StartMember(c)
}

func (o observed) StartClient(c *cluster.Cluster) error {
	o.starting()
	return o.Provider.StartClient(c)
}

// runMember is a child process: one proto.actor member (or client) of the
// cluster, with this package's provider.
func runMember(name string) int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("child", name)
	fail := func(msg string, err error) int {
		logger.Error(msg, "error", err)
		return 2
	}
	nc, err := nats.Connect(os.Getenv(envNATS))
	if err != nil {
		return fail("connect", err)
	}
	prefix := os.Getenv(envPrefix)
	emit := func(ev event) {
		b, _ := json.Marshal(ev)
		_ = nc.Publish(prefix+".ev."+name, b)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail("jetstream", err)
	}
	p, err := membership.New(js,
		membership.WithTTL(testTTL), membership.WithHeartbeat(testHeartbeat),
		membership.WithMeta(map[string]string{"name": name}), membership.WithLogger(logger))
	if err != nil {
		return fail("provider", err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})).With("child", name)
	}))
	kind := cluster.NewKind("echo", actor.PropsFromProducer(func() actor.Actor { return &echoGrain{addr: sys.Address()} }))
	// Topologies reach the test in the order proto.actor's own subscribers
	// see them: the emitter subscribes when the cluster starts the
	// provider (observed), after disthash has subscribed, so for every
	// topology disthash has updated its placement table before the test
	// hears of it. topoMu links what the emitter saw to the grain calls
	// the test sends after it: without it the race detector cannot know
	// that a call made on seeing a topology comes after disthash's write
	// (the news went out over NATS and back). A call that really overlaps
	// a topology change is still reported.
	var topoMu sync.Mutex
	emitter := func() {
		sys.EventStream.Subscribe(func(evt any) {
			t, ok := evt.(*cluster.ClusterTopology)
			if !ok {
				return
			}
			ids := make([]string, 0, len(t.Members))
			for _, m := range t.Members {
				ids = append(ids, m.Id)
			}
			slices.Sort(ids)
			topoMu.Lock()
			defer topoMu.Unlock()
			emit(event{Type: "topology", Members: ids})
		})
	}
	c := cluster.New(sys, cluster.Configure(os.Getenv(envCluster), observed{p, emitter}, disthash.New(),
		remote.Configure("127.0.0.1", 0), cluster.WithKinds(kind), cluster.WithRequestTimeout(2*time.Second)))
	if os.Getenv(envRole) == "client" {
		c.StartClient()
	} else {
		c.StartMember()
	}

	done := make(chan struct{})
	_, err = nc.Subscribe(prefix+".cmd."+name, func(m *nats.Msg) {
		var cmd command
		var r reply
		if err := json.Unmarshal(m.Data, &cmd); err != nil {
			r.Err = err.Error()
		}
		after := func() {}
		switch cmd.Op {
		case "call":
			topoMu.Lock() // see topoMu
			topoMu.Unlock()
			for _, id := range cmd.IDs {
				res, err := c.Request(id, "echo", wrapperspb.String(id), cluster.WithTimeout(3*time.Second))
				if err != nil {
					r.Err = fmt.Sprintf("call %s: %v", id, err)
					break
				}
				s, ok := res.(*wrapperspb.StringValue)
				if !ok {
					r.Err = fmt.Sprintf("call %s: answer %T", id, res)
					break
				}
				r.Addrs = append(r.Addrs, s.Value)
			}
		case "drain":
			if err := p.Drain(context.Background()); err != nil {
				r.Err = err.Error()
			}
		case "accepting":
			r.Accepting = p.Accepting(cmd.Member, cmd.Kind)
		case "members":
			r.Members = p.Members()
		case "crash":
			p.Crash()
		case "leave":
			after = func() {
				c.Shutdown(true)
				close(done)
			}
		case "exit":
			after = func() { close(done) }
		default:
			r.Err = "unknown op " + cmd.Op
		}
		b, _ := json.Marshal(r)
		_ = m.Respond(b)
		_ = nc.Flush()
		after()
	})
	if err != nil {
		return fail("subscribe", err)
	}
	if err := nc.Flush(); err != nil {
		return fail("flush", err)
	}
	emit(event{Type: "ready", ID: sys.ID, Addr: sys.Address()})
	_ = nc.Flush()
	<-done
	return 0
}
