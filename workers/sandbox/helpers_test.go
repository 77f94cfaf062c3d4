package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// fixture is a started worker on its own server, with its home in a
// temporary folder.
type fixture struct {
	ns   *server.Server
	e    *engine.Engine
	w    *Worker
	m    *manager
	home string
	root string
	kv   jetstream.KeyValue
}

// testOptions are the defaults of every fixture: a node name, no periodic
// reaper, a short kill grace.
func testOptions(home string) []Option {
	return []Option{
		WithRoot(filepath.Join(home, "sandboxes")),
		WithNode("test-node"),
		WithReapInterval(0),
		WithKillGrace(200 * time.Millisecond),
	}
}

// newFixture starts a server, an engine and a worker with opts (after the
// test options), its home reachable for the unprivileged host user, so
// bubblewrap runs as that user (as it should in production).
func newFixture(t testing.TB, opts ...Option) *fixture {
	t.Helper()
	return newFixtureHome(t, reachableHome(t), opts...)
}

// newFixtureHome is newFixture with a given home.
func newFixtureHome(t testing.TB, home string, opts ...Option) *fixture {
	t.Helper()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	return startOn(t, ns, e, home, opts...)
}

// reachableHome is a temporary folder whose parents the unprivileged
// host user may search (t.TempDir makes them 0700).
func reachableHome(t testing.TB) string {
	t.Helper()
	home := t.TempDir()
	for _, d := range []string{filepath.Dir(home), home} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

// startOn starts a worker with home on an existing server and engine.
func startOn(t testing.TB, ns *server.Server, e *engine.Engine, home string, opts ...Option) *fixture {
	t.Helper()
	w := NewWorker(append(testOptions(home), opts...)...)
	ctx := context.Background()
	if err := w.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWorker(t, w) })
	kv, err := e.EnsureKV(ctx, BucketConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ns: ns, e: e, w: w, m: w.m, home: home, root: filepath.Join(home, "sandboxes"), kv: kv}
}

// stopWorker destroys the worker's sandboxes (so no cgroup outlives the
// test) and closes it.
func stopWorker(t testing.TB, w *Worker) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m := w.m; m != nil {
		m.lifecycle.Lock()
		m.mu.Lock()
		lvs := make([]*liveSandbox, 0, len(m.live))
		for _, lv := range m.live {
			lvs = append(lvs, lv)
		}
		m.mu.Unlock()
		for _, lv := range lvs {
			if err := m.destroyLive(ctx, lv, errDestroyed, "test cleanup"); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		m.lifecycle.Unlock()
	}
	if err := w.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
	if m := w.m; m != nil {
		for _, g := range []string{m.cg.base, m.cg.pids, m.cg.memory} {
			if g != "" && exists(g) {
				t.Errorf("cgroup group %s left", g)
			}
		}
	}
}

// create calls sandbox::create over the bus.
func (f *fixture) create(t testing.TB, req CreateRequest) Sandbox {
	t.Helper()
	sb, err := engine.Call[Sandbox](context.Background(), f.e, CreateFunction, req)
	if err != nil {
		t.Fatalf("create %+v: %v", req, err)
	}
	return sb
}

// exec calls sandbox::exec over the bus.
func (f *fixture) exec(t testing.TB, id string, c Command) Result {
	t.Helper()
	res, err := f.execErr(id, c)
	if err != nil {
		t.Fatalf("exec %+v: %v", c, err)
	}
	return res
}

func (f *fixture) execErr(id string, c Command) (Result, error) {
	return engine.Call[Result](context.Background(), f.e, ExecFunction, ExecRequest{SandboxID: id, Command: c})
}

// shell calls shell::exec as session sid would.
func (f *fixture) shell(t testing.TB, sid string, c Command) Result {
	t.Helper()
	res, err := engine.Call[Result](engine.WithSession(context.Background(), sid, "m1"), f.e, ShellExecFunction, c)
	if err != nil {
		t.Fatalf("shell %+v: %v", c, err)
	}
	return res
}

// sh runs a shell command in session sid's sandbox.
func (f *fixture) sh(t testing.TB, sid, command string) Result {
	t.Helper()
	return f.shell(t, sid, Command{Command: command})
}

// wantCode fails unless err is a wire error with code.
func wantCode(t testing.TB, err error, code wire.Code) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != code {
		t.Fatalf("err %v, want %s", err, code)
	}
}

// needCgroups fails a test that is about the cgroup limits, saying why,
// when f's node could not make writable pids and memory cgroups (a node
// that is not root, outside a delegated cgroup): it never skips.
func needCgroups(t testing.TB, f *fixture) {
	t.Helper()
	if !f.m.cg.hasPids || !f.m.cg.hasMemory {
		t.Fatalf("this test needs writable pids and memory cgroups (run it as root, or as a user with a delegated cgroup): %s", f.m.cg.why)
	}
}

// needRoot fails a test that is about a root node, saying why, when it
// does not run as root: it never skips.
func needRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (euid %d): %s", os.Geteuid(), why)
	}
}

// exists reports whether path exists on the host.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// processesIn lists the host processes whose working directory is dir
// or inside it.
func processesIn(dir string) []string {
	links, _ := filepath.Glob("/proc/[0-9]*/cwd")
	var out []string
	for _, l := range links {
		if t, err := os.Readlink(l); err == nil && (t == dir || strings.HasPrefix(t, dir+"/")) {
			out = append(out, l)
		}
	}
	return out
}
