package placement_test

// The parent side of the test harness: it starts members as child
// processes (this test binary again, see TestMain) and drives them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/placement"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(envURL) != "" {
		os.Exit(runChild())
	}
	code := m.Run()
	if err := closeBenchCluster(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// proc is a member (or client) running in a child process.
type proc struct {
	name   string
	nc     *nats.Conn
	id     string // proto.actor member id
	addr   string // remote address
	cmd    *exec.Cmd
	out    *enginetest.Buffer
	exited chan struct{}
	err    error // of cmd.Wait, once exited is closed
}

// spawn starts members (or a client) named names in child processes, in
// parallel, and waits until each answers. Each is stopped, and its output
// checked for data races and panics, by t.Cleanup.
func spawn(t testing.TB, ns *server.Server, client bool, names ...string) []*proc {
	t.Helper()
	nc := enginetest.Connect(t, ns)
	ps, err := spawnProcs(nc, ns.ClientURL(), client, names...)
	for _, p := range ps {
		t.Cleanup(func() {
			if err := p.stop(); err != nil {
				t.Error(err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func spawnProcs(nc *nats.Conn, url string, client bool, names ...string) ([]*proc, error) {
	role := "member"
	if client {
		role = "client"
	}
	var ps []*proc
	for _, name := range names {
		p := &proc{name: name, nc: nc, out: &enginetest.Buffer{}, exited: make(chan struct{})}
		p.cmd = exec.Command(os.Args[0], "-test.run=^$")
		p.cmd.Env = append(os.Environ(), envURL+"="+url, envName+"="+name, envRole+"="+role)
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		if err := p.cmd.Start(); err != nil {
			return ps, fmt.Errorf("start %s: %w", name, err)
		}
		go func() {
			p.err = p.cmd.Wait()
			close(p.exited)
		}()
		ps = append(ps, p)
	}
	for _, p := range ps {
		deadline := time.Now().Add(20 * time.Second)
		for {
			var r ctlResp
			if err := p.req("info", ctlReq{}, &r, 100*time.Millisecond); err == nil {
				p.id, p.addr = r.ID, r.Addr
				break
			}
			select {
			case <-p.exited:
				return ps, fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.out)
			default:
			}
			if time.Now().After(deadline) {
				return ps, fmt.Errorf("%s not ready in 20s\n%s", p.name, p.out)
			}
		}
	}
	return ps, nil
}

// stop asks the child to shut down and waits for it; the error says if it
// reported a data race, panicked or exited badly. Idempotent.
func (p *proc) stop() error {
	select {
	case <-p.exited:
	default:
		_ = p.req("stop", ctlReq{}, nil, 10*time.Second)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			return fmt.Errorf("%s did not exit after stop:\n%s", p.name, p.out)
		}
	}
	out := p.out.String()
	switch {
	case strings.Contains(out, "WARNING: DATA RACE"):
		return fmt.Errorf("%s: data race in the child process:\n%s", p.name, out)
	case strings.Contains(out, "panic:"):
		return fmt.Errorf("%s: panic in the child process:\n%s", p.name, out)
	case p.err != nil:
		return fmt.Errorf("%s exited with %v:\n%s", p.name, p.err, out)
	}
	return nil
}

func (p *proc) req(op string, in ctlReq, out *ctlResp, timeout time.Duration) error {
	b, _ := json.Marshal(in)
	m, err := p.nc.Request(ctlSubject(p.name, op), b, timeout)
	if err != nil {
		return fmt.Errorf("%s %s: %w", p.name, op, err)
	}
	var r ctlResp
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("%s %s: %w", p.name, op, err)
	}
	if out != nil {
		*out = r
	}
	if r.Err != "" {
		return fmt.Errorf("%s %s: %s", p.name, op, r.Err)
	}
	return nil
}

func (p *proc) do(t testing.TB, op string, in ctlReq) ctlResp {
	t.Helper()
	var r ctlResp
	if err := p.req(op, in, &r, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return r
}

// call sends msg to grain id through member p.
func (p *proc) call(id, msg string) (addr string, n int, err error) {
	var r ctlResp
	err = p.req("call", ctlReq{ID: id, Msg: msg}, &r, 10*time.Second)
	return r.Addr, r.N, err
}

func (p *proc) mustCall(t testing.TB, id string) (addr string, n int) {
	t.Helper()
	addr, n, err := p.call(id, "inc")
	if err != nil {
		t.Fatalf("call %s: %v", id, err)
	}
	return addr, n
}

func (p *proc) accept(t testing.TB, mode string) { p.do(t, "accept", ctlReq{Mode: mode}) }
func (p *proc) local(t testing.TB) int           { return p.do(t, "local", ctlReq{}).N }
func (p *proc) drained(t testing.TB) int         { return p.do(t, "drained", ctlReq{}).N }

func owner(t testing.TB, js jetstream.JetStream, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	o, err := placement.Owner(ctx, js, kind, id)
	if errors.Is(err, placement.ErrNoOwner) {
		return ""
	}
	if err != nil {
		t.Fatalf("Owner(%s): %v", id, err)
	}
	return o
}
