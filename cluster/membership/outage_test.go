package membership_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/membership"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// gate is a TCP proxy to a NATS server that can hold all traffic, both
// ways, without closing anything: to the members behind it the bucket is
// out (their puts and the watch get no answer), as during a stream leader
// election, while the server and the members connected directly go on.
type gate struct {
	ln     net.Listener
	mu     sync.Mutex
	open   *sync.Cond
	closed bool
	held   bool
	conns  []net.Conn
}

func newGate(t *testing.T, ns *server.Server) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln}
	g.open = sync.NewCond(&g.mu)
	target := ns.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			g.mu.Lock()
			g.conns = append(g.conns, c, s)
			g.mu.Unlock()
			go g.pipe(c, s)
			go g.pipe(s, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		g.mu.Lock()
		g.closed, g.held = true, false
		g.open.Broadcast()
		for _, c := range g.conns {
			_ = c.Close()
		}
		g.mu.Unlock()
	})
	return g
}

// pipe copies from src to dst, waiting while the gate holds.
func (g *gate) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		g.mu.Lock()
		for g.held && !g.closed {
			g.open.Wait()
		}
		g.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			_ = dst.Close()
			_ = src.Close()
			return
		}
	}
}

func (g *gate) hold(on bool) {
	g.mu.Lock()
	g.held = on
	g.open.Broadcast()
	g.mu.Unlock()
}

// startVia runs member self of cluster "c" on a connection through g.
func startVia(t *testing.T, g *gate, self *membership.Entry, opts ...membership.Option) (*membership.Provider, *recorder) {
	t.Helper()
	nc, err := nats.Connect("nats://"+g.ln.Addr().String(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := membership.New(js, testOpts(opts...)...)
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

func expelled(p *membership.Provider) bool {
	select {
	case <-p.Expelled():
		return true
	default:
		return false
	}
}

// TestOutage holds the bucket away from members for longer than the member
// TTL and checks who is out afterwards.
//
//   - "everyone, a node joins": nothing at all lands for 1.5 TTLs (the
//     stream leader's node was killed; the election takes longer than the
//     TTL), and a member joins as the bucket comes back (the killed node
//     restarting) before the survivors' first heartbeats land. The joiner
//     saw the survivors' last puts from before the outage and its own:
//     it swept them and deleted their keys, and both survivors were
//     expelled at once. Nobody may be expelled.
//   - "one member cut off": a alone is cut off while the others heartbeat:
//     it is swept, its key deleted, and it learns it is out when it is
//     back (proto.actor blocks its id).
func TestOutage(t *testing.T) {
	t.Parallel()
	const ttl, hb = 2 * time.Second, 200 * time.Millisecond
	opts := []membership.Option{membership.WithTTL(ttl), membership.WithHeartbeat(hb)}
	for _, tc := range []struct {
		name   string
		cutOff bool // only a is behind the gate, b and c heartbeat throughout
	}{
		{"everyone, a node joins", false},
		{"one member cut off", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			g := newGate(t, ns)
			a, recA := startVia(t, g, testEntry("a", 1), opts...)
			var (
				b    *membership.Provider
				recB *recorder
			)
			if tc.cutOff {
				b, recB = start(t, ns, testEntry("b", 2), opts...)
			} else {
				b, recB = startVia(t, g, testEntry("b", 2), opts...)
			}
			var (
				c    *membership.Provider
				recC *recorder
			)
			if tc.cutOff {
				c, recC = start(t, ns, testEntry("c", 3), opts...)
			}
			want := []string{"a", "b"}
			if tc.cutOff {
				want = append(want, "c")
			}
			recA.sees(t, 2*time.Second, want...)
			recB.sees(t, 2*time.Second, want...)

			g.hold(true)
			time.Sleep(ttl + ttl/2) // the outage; nothing to poll for
			if !tc.cutOff {
				// Joins on a connection that is not held: its start
				// returns once it has read the initial values.
				c, recC = start(t, ns, testEntry("c", 3), opts...)
			}
			g.hold(false)

			if tc.cutOff {
				select {
				case <-a.Expelled():
				case <-time.After(2 * ttl):
					t.Fatal("a member cut off while the others heartbeat was not expelled")
				}
				recB.sees(t, time.Second, "b", "c")
				recC.sees(t, time.Second, "b", "c")
				if expelled(b) || expelled(c) {
					t.Error("a member that kept heartbeating was expelled")
				}
				return
			}
			for _, r := range []*recorder{recA, recB, recC} {
				r.sees(t, 2*ttl, "a", "b", "c")
			}
			// Stays so for more than a TTL of heartbeats.
			time.Sleep(ttl + ttl/2)
			for name, p := range map[string]*membership.Provider{"a": a, "b": b, "c": c} {
				if expelled(p) {
					t.Errorf("%s expelled after the outage", name)
				}
			}
			for _, r := range []*recorder{recA, recB, recC} {
				r.sees(t, time.Second, "a", "b", "c")
			}
		})
	}
}
