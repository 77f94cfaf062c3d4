package membership_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/membership"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// child is one member process seen from the parent test.
type child struct {
	name   string
	cmd    *exec.Cmd
	stderr *enginetest.Buffer
	exited chan struct{}

	mu    sync.Mutex
	id    string
	addr  string
	topo  []string // latest topology (member ids, sorted)
	ready chan struct{}
}

// harness runs child members against one embedded server and follows
// their events.
type harness struct {
	t       *testing.T
	ns      *server.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	cluster string
	prefix  string

	mu       sync.Mutex
	children map[string]*child
}

func newHarness(t *testing.T) *harness {
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ns: ns, nc: nc, js: js, cluster: "conf", prefix: "mtest", children: map[string]*child{}}
	_, err = nc.Subscribe(h.prefix+".ev.*", func(m *nats.Msg) {
		name := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		h.mu.Lock()
		c := h.children[name]
		h.mu.Unlock()
		var ev event
		if c == nil || json.Unmarshal(m.Data, &ev) != nil {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		switch ev.Type {
		case "ready":
			c.id, c.addr = ev.ID, ev.Addr
			close(c.ready)
		case "topology":
			c.topo = ev.Members
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return h
}

// spawn starts child name ("member" or "client" role) without waiting.
func (h *harness) spawn(t *testing.T, name, role string) *child {
	t.Helper()
	c := &child{name: name, stderr: &enginetest.Buffer{}, exited: make(chan struct{}), ready: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0])
	// atexit_sleep_ms: the race runtime otherwise waits 1 s at exit.
	c.cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0",
		envMember+"="+name, envRole+"="+role, envNATS+"="+h.ns.ClientURL(),
		envCluster+"="+h.cluster, envPrefix+"="+h.prefix)
	c.cmd.Stderr = c.stderr
	h.mu.Lock()
	h.children[name] = c
	h.mu.Unlock()
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", name, err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	h.t.Cleanup(func() { h.reap(c) })
	return c
}

// reap ends a child (an exit command, then a kill) and fails the test if
// it reported a data race.
func (h *harness) reap(c *child) {
	select {
	case <-c.exited:
	default:
		b, _ := json.Marshal(command{Op: "exit"})
		_, _ = h.nc.Request(h.prefix+".cmd."+c.name, b, time.Second)
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	out := c.stderr.String()
	for _, r := range parseRaces(out) {
		if fn, ok := r.knownUpstream(); ok {
			h.t.Logf("child %s: known protoactor-go data race in %s (docs/UPSTREAM.md)", c.name, fn)
			continue
		}
		h.t.Errorf("child %s reported a data race:\n%s", c.name, r.text)
	}
	if h.t.Failed() && out != "" {
		h.t.Logf("child %s stderr:\n%s", c.name, out)
	}
}

// wait blocks until the children are ready.
func (h *harness) wait(t *testing.T, cs ...*child) {
	t.Helper()
	for _, c := range cs {
		select {
		case <-c.ready:
		case <-c.exited:
			t.Fatalf("child %s exited before it was ready:\n%s", c.name, c.stderr.String())
		case <-time.After(20 * time.Second):
			t.Fatalf("child %s not ready in 20s:\n%s", c.name, c.stderr.String())
		}
	}
}

// do sends a command to c and returns its reply.
func (h *harness) do(t *testing.T, c *child, cmd command) reply {
	t.Helper()
	b, _ := json.Marshal(cmd)
	m, err := h.nc.Request(h.prefix+".cmd."+c.name, b, 15*time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", c.name, cmd.Op, err)
	}
	var r reply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatalf("%s %s: reply %q: %v", c.name, cmd.Op, m.Data, err)
	}
	if r.Err != "" {
		t.Fatalf("%s %s: %s", c.name, cmd.Op, r.Err)
	}
	return r
}

// converge waits until every observer's latest *cluster.ClusterTopology
// event lists exactly members.
func (h *harness) converge(t *testing.T, timeout time.Duration, observers []*child, members ...*child) {
	t.Helper()
	want := make([]string, 0, len(members))
	for _, m := range members {
		want = append(want, m.memberID())
	}
	slices.Sort(want)
	enginetest.Eventually(t, timeout, func() error {
		for _, o := range observers {
			o.mu.Lock()
			got := o.topo
			o.mu.Unlock()
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s sees %v, want %v", o.name, got, want)
			}
		}
		return nil
	})
}

func (c *child) memberID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id
}

func (c *child) address() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// call asks from to call the echo grains ids and checks that every answer
// comes from one of hosts; it returns the answering addresses.
func (h *harness) call(t *testing.T, from *child, ids []string, hosts ...*child) map[string]int {
	t.Helper()
	r := h.do(t, from, command{Op: "call", IDs: ids})
	if len(r.Addrs) != len(ids) {
		t.Fatalf("%s: %d answers for %d calls", from.name, len(r.Addrs), len(ids))
	}
	allowed := map[string]bool{}
	for _, c := range hosts {
		allowed[c.address()] = true
	}
	got := map[string]int{}
	for i, a := range r.Addrs {
		if !allowed[a] {
			t.Fatalf("%s: grain %s answered from %s, not one of %v", from.name, ids[i], a, allowed)
		}
		got[a]++
	}
	return got
}

// keyGone waits until member c's entry is absent from the bucket.
func (h *harness) keyGone(t *testing.T, timeout time.Duration, c *child) {
	t.Helper()
	kv, err := h.js.KeyValue(context.Background(), subjects.MembersBucket)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := membership.Key(h.cluster, c.memberID())
	enginetest.Eventually(t, timeout, func() error {
		_, err := kv.Get(context.Background(), key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return nil
		}
		return fmt.Errorf("key %s: %v", key, err)
	})
}

func grainIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("g%02d", i)
	}
	return ids
}

// TestConformance runs real proto.actor cluster members (one process each)
// through what proto.actor expects of a cluster provider: join, grain
// placement, drain, graceful leave, crash detection by TTL and rejoin. The
// subtests share their members and run in order.
func TestConformance(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ids := grainIDs(24)
	var a, b, c, d, e *child

	// Each step needs the members of the steps before it: stop at the
	// first failure.
	for _, step := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"join", func(t *testing.T) {
			a, b = h.spawn(t, "a", "member"), h.spawn(t, "b", "member")
			h.wait(t, a, b)
			h.converge(t, joinSeen, []*child{a, b}, a, b)
			c, e = h.spawn(t, "c", "member"), h.spawn(t, "e", "client")
			h.wait(t, c, e)
			h.converge(t, joinSeen, []*child{a, b, c, e}, a, b, c)

			spread := h.call(t, a, ids, a, b, c)
			if len(spread) < 2 {
				t.Errorf("24 grains all on one member: %v", spread)
			}
			h.call(t, e, ids, a, b, c) // the client reaches the same grains
			t.Logf("grains per member: %v", spread)
		}},

		{"drain", func(t *testing.T) {
			h.do(t, b, command{Op: "drain"})
			enginetest.Eventually(t, 2*time.Second, func() error {
				if h.do(t, a, command{Op: "accepting", Member: b.memberID(), Kind: "echo"}).Accepting {
					return errors.New("a still sees b accepting")
				}
				return nil
			})
			if !h.do(t, a, command{Op: "accepting", Member: c.memberID(), Kind: "echo"}).Accepting {
				t.Error("c (up) is not accepting echo")
			}
			if h.do(t, a, command{Op: "accepting", Member: c.memberID(), Kind: "nope"}).Accepting {
				t.Error("c accepts a kind it does not host")
			}
			statuses := map[string]string{}
			for _, m := range h.do(t, a, command{Op: "members"}).Members {
				statuses[m.ID] = m.Status
			}
			want := map[string]string{a.memberID(): "up", b.memberID(): "draining", c.memberID(): "up"}
			if fmt.Sprint(statuses) != fmt.Sprint(want) {
				t.Errorf("a's members %v, want %v", statuses, want)
			}
			list, err := membership.List(context.Background(), h.js, h.cluster)
			if err != nil {
				t.Fatal(err)
			}
			listed := map[string]string{}
			for _, x := range list {
				listed[x.ID] = x.Status
			}
			if fmt.Sprint(listed) != fmt.Sprint(want) {
				t.Errorf("List: %+v, want %v", list, want)
			}
			// Draining members stay in the topology: they still host grains.
			h.converge(t, time.Second, []*child{a, b, c, e}, a, b, c)
			h.call(t, a, ids, a, b, c)
		}},

		{"graceful_leave", func(t *testing.T) {
			start := time.Now()
			h.do(t, c, command{Op: "leave"})
			h.keyGone(t, time.Second, c)
			h.converge(t, time.Second, []*child{a, b, e}, a, b)
			took := time.Since(start)
			// Well under the TTL: the delete, not the expiry, removed it.
			if took >= testTTL-testHeartbeat {
				t.Errorf("graceful leave seen after %v; TTL is %v", took, testTTL)
			}
			t.Logf("graceful leave seen by all after %v", took)
			h.call(t, a, ids, a, b)
		}},

		{"crash_detected_by_ttl", func(t *testing.T) {
			h.do(t, b, command{Op: "crash"})
			start := time.Now()
			h.converge(t, crashSeen, []*child{a, e}, a)
			took := time.Since(start)
			if took < testTTL-2*testHeartbeat {
				t.Errorf("crash seen after %v, before the entry could expire (TTL %v)", took, testTTL)
			}
			h.keyGone(t, time.Second, b)
			t.Logf("crash detected after %v (TTL %v, heartbeat %v)", took, testTTL, testHeartbeat)
		}},

		{"rejoin", func(t *testing.T) {
			d = h.spawn(t, "d", "member")
			h.wait(t, d)
			h.converge(t, joinSeen, []*child{a, d, e}, a, d)
			h.call(t, a, ids, a, d)
			h.call(t, d, ids, a, d)
			h.call(t, e, ids, a, d)
			list, err := membership.List(context.Background(), h.js, h.cluster)
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, x := range list {
				got = append(got, x.ID+"="+x.Status)
			}
			want := []string{a.memberID() + "=up", d.memberID() + "=up"}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("List = %v, want %v", got, want)
			}
		}},
	} {
		if !t.Run(step.name, step.run) {
			return
		}
	}
}
