package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

func TestCreate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sb := f.create(t, CreateRequest{SessionID: "s1", Limits: Limits{MemoryMB: 256, WallMs: 5000}})
	if sb.SessionID != "s1" || !strings.HasPrefix(sb.SandboxID, "s1_") || sb.Node != "test-node" ||
		sb.Workdir != filepath.Join(f.root, sb.SandboxID) || sb.Isolation != IsolationBwrap || sb.Network ||
		sb.CreatedAt == 0 || sb.LastUsedAt != sb.CreatedAt {
		t.Fatalf("sandbox %+v", sb)
	}
	want := DefaultLimits
	want.MemoryMB, want.WallMs = 256, 5000
	if sb.Limits != want {
		t.Fatalf("limits %+v, want %+v", sb.Limits, want)
	}
	// A root node makes cgroups and gives the workdir to the host user
	// bubblewrap runs as; any other node keeps it and, without a
	// delegated cgroup, falls back to rlimits, and says so.
	enforced, owner, rootMode := "cgroup:pids,cgroup:memory,rlimit:cpu,rlimit:fsize,quota:disk,timeout:wall", uint32(DefaultHostUID), fs.FileMode(0o711)
	if euid := os.Geteuid(); euid != 0 {
		owner, rootMode = uint32(euid), 0o700
		if !f.m.cg.hasPids || !f.m.cg.hasMemory {
			enforced = "rlimit:as,rlimit:cpu,rlimit:fsize,quota:disk,timeout:wall"
		}
	}
	if strings.Join(sb.Enforced, ",") != enforced {
		t.Fatalf("enforced %v, want %s", sb.Enforced, enforced)
	}
	fi, err := os.Stat(sb.Workdir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != owner {
		t.Fatalf("workdir %v %v, want owner %d", fi, err, owner)
	}
	// Searchable (not readable) by the host user bubblewrap runs as.
	if fi, _ := os.Stat(f.root); fi.Mode().Perm() != rootMode {
		t.Fatalf("root mode %v, want %v", fi.Mode(), rootMode)
	}
	// The record, as `nats kv get iii-sandboxes session.s1` shows it.
	ent, err := f.kv.Get(context.Background(), "session.s1")
	if err != nil {
		t.Fatal(err)
	}
	var rec Sandbox
	if err := json.Unmarshal(ent.Value(), &rec); err != nil || rec.SandboxID != sb.SandboxID || rec.Node != "test-node" {
		t.Fatalf("record %s (%v)", ent.Value(), err)
	}
	// The cgroups carry the limits.
	for _, d := range f.m.cg.sandboxDirs(sb.SandboxID) {
		for file, v := range map[string]string{"pids.max": "256", "memory.limit_in_bytes": "268435456", "memory.max": "268435456"} {
			if b, err := os.ReadFile(filepath.Join(d, file)); err == nil && strings.TrimSpace(string(b)) != v {
				t.Fatalf("%s/%s = %q, want %s", d, file, b, v)
			}
		}
	}
}

// A session homed in a region ("eu.s1") gets a sandbox like any other:
// its id "eu.s1_<suffix>" names its workdir and cgroups, its record is
// "session.eu.s1", shell::exec finds it from the caller's session, list
// and the reaper see it, and destroy removes all of it.
func TestRegionalSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	const sid = "eu.s1"
	sb := f.create(t, CreateRequest{SessionID: sid, Limits: Limits{Pids: 64}})
	if sb.SessionID != sid || !strings.HasPrefix(sb.SandboxID, sid+"_") || sb.Workdir != filepath.Join(f.root, sb.SandboxID) {
		t.Fatalf("sandbox %+v", sb)
	}
	if _, err := f.kv.Get(ctx, "session."+sid); err != nil {
		t.Fatalf("record: %v", err)
	}
	needCgroups(t, f)
	dirs := f.m.cg.sandboxDirs(sb.SandboxID)
	if len(dirs) == 0 {
		t.Fatal("no cgroup folders")
	}
	limited := 0
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "pids.max")); err == nil {
			if strings.TrimSpace(string(b)) != "64" {
				t.Fatalf("%s/pids.max = %q", d, b)
			}
			limited++
		}
	}
	if limited != 1 {
		t.Fatalf("pids.max in %d of %v", limited, dirs)
	}
	if r := f.sh(t, sid, "echo homed > f.txt && pwd"); r.ExitCode != 0 || r.Stdout != sb.Workdir+"\n" {
		t.Fatalf("shell %+v", r)
	}
	if r := f.exec(t, sb.SandboxID, Command{Command: "cat f.txt"}); r.Stdout != "homed\n" {
		t.Fatalf("exec %+v", r)
	}
	for _, req := range []ListRequest{{}, {SessionID: sid}} {
		list, err := engine.Call[ListResponse](ctx, f.e, ListFunction, req)
		if err != nil || len(list.Sandboxes) != 1 || list.Sandboxes[0].SandboxID != sb.SandboxID {
			t.Fatalf("list %+v: %+v (%v)", req, list, err)
		}
	}
	if st, err := f.m.reap(ctx); err != nil || !st.zero() || !exists(sb.Workdir) {
		t.Fatalf("reap of a live regional sandbox: %+v %v", st, err)
	}
	res, err := engine.Call[DestroyResponse](ctx, f.e, DestroyFunction, DestroyRequest{SandboxID: sb.SandboxID})
	if err != nil || !res.Destroyed {
		t.Fatalf("destroy %+v %v", res, err)
	}
	if exists(sb.Workdir) {
		t.Fatal("workdir left")
	}
	for _, d := range dirs {
		if exists(d) {
			t.Fatalf("cgroup %s left", d)
		}
	}
	if _, err := f.kv.Get(ctx, "session."+sid); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("record left: %v", err)
	}
	// A regional orphan (a crash's leftover) is reaped like any other.
	ghost := filepath.Join(f.root, "eu.ghost_0123456789")
	if err := os.Mkdir(ghost, 0o700); err != nil {
		t.Fatal(err)
	}
	if st, err := f.m.reap(ctx); err != nil || st.OrphanWorkdirs != 1 || exists(ghost) {
		t.Fatalf("reap of a regional orphan: %+v %v", st, err)
	}
}

// A second create of a session returns its live sandbox, also when many
// race; a create after destroy makes a new one.
func TestCreateIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	first := f.create(t, CreateRequest{SessionID: "idem"})
	again := f.create(t, CreateRequest{SessionID: "idem", Network: true, Limits: Limits{Pids: 64}})
	if again.SandboxID != first.SandboxID || again.Network || again.Limits != first.Limits {
		t.Fatalf("second create %+v, first %+v", again, first)
	}
	ids := make(chan string, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := engine.Call[Sandbox](context.Background(), f.e, CreateFunction, CreateRequest{SessionID: "race"})
			if err != nil {
				t.Error(err)
				return
			}
			ids <- sb.SandboxID
		}()
	}
	wg.Wait()
	close(ids)
	var got []string
	for id := range ids {
		got = append(got, id)
	}
	if len(got) != 8 {
		t.Fatalf("got %v", got)
	}
	for _, id := range got {
		if id != got[0] {
			t.Fatalf("racing creates gave %v", got)
		}
	}
	entries, _ := os.ReadDir(f.root)
	if len(entries) != 2 {
		t.Fatalf("root holds %d entries", len(entries))
	}
	if _, err := engine.Call[DestroyResponse](context.Background(), f.e, DestroyFunction, DestroyRequest{SessionID: "idem"}); err != nil {
		t.Fatal(err)
	}
	if next := f.create(t, CreateRequest{SessionID: "idem"}); next.SandboxID == first.SandboxID {
		t.Fatalf("re-create reused id %s", next.SandboxID)
	}
}

// Ten sandboxes at once, each writing and reading its own file, none
// seeing another's.
func TestParallelSandboxes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := fmt.Sprintf("p%d", i)
			sb, err := engine.Call[Sandbox](context.Background(), f.e, CreateFunction, CreateRequest{SessionID: sid})
			if err != nil {
				t.Error(err)
				return
			}
			c := Command{Command: fmt.Sprintf("echo mine-%d > own.txt && cat own.txt && ls %s | wc -l && cat ../*/own.txt 2>/dev/null | wc -l", i, f.root)}
			r, err := engine.Call[Result](engine.WithSession(context.Background(), sid, "m"), f.e, ShellExecFunction, c)
			if err != nil {
				t.Error(err)
				return
			}
			// Its file; in the root only its own workdir; of all the
			// sandboxes' files only its own.
			if r.Stdout != fmt.Sprintf("mine-%d\n1\n1\n", i) {
				t.Errorf("%s: %+v", sid, r)
			}
			if b, err := os.ReadFile(filepath.Join(sb.Workdir, "own.txt")); err != nil || string(b) != fmt.Sprintf("mine-%d\n", i) {
				t.Errorf("%s: host sees %q (%v)", sid, b, err)
			}
		}()
	}
	wg.Wait()
	list, err := engine.Call[ListResponse](context.Background(), f.e, ListFunction, ListRequest{})
	if err != nil || len(list.Sandboxes) != 10 {
		t.Fatalf("list %+v (%v)", list, err)
	}
}

// Destroy kills what runs, removes the workdir, cgroups and record; a
// second destroy answers false.
func TestDestroy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	sb := f.create(t, CreateRequest{SessionID: "d"})
	f.sh(t, "d", "echo x > file")
	running := make(chan error, 1)
	go func() {
		_, err := f.execErr(sb.SandboxID, Command{Command: "sleep 60"})
		running <- err
	}()
	enginetest.Eventually(t, 5*time.Second, func() error {
		if len(processesIn(sb.Workdir)) == 0 {
			return errors.New("not running yet")
		}
		return nil
	})
	res, err := engine.Call[DestroyResponse](ctx, f.e, DestroyFunction, DestroyRequest{SandboxID: sb.SandboxID})
	if err != nil || !res.Destroyed {
		t.Fatalf("destroy %+v %v", res, err)
	}
	select {
	case err := <-running:
		if !errors.Is(err, wire.ErrNotFound) || !errors.Is(err, ErrNoSandbox) && !strings.Contains(err.Error(), "destroyed") {
			t.Fatalf("running exec ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("running exec not ended by destroy")
	}
	if exists(sb.Workdir) {
		t.Fatal("workdir left")
	}
	for _, d := range f.m.cg.sandboxDirs(sb.SandboxID) {
		if exists(d) {
			t.Fatalf("cgroup %s left", d)
		}
	}
	if _, err := f.kv.Get(ctx, "session.d"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("record left: %v", err)
	}
	if ps := processesIn(sb.Workdir); len(ps) != 0 {
		t.Fatalf("processes left: %v", ps)
	}
	for _, req := range []DestroyRequest{{SandboxID: sb.SandboxID}, {SessionID: "d"}, {SessionID: "never"}} {
		res, err := engine.Call[DestroyResponse](ctx, f.e, DestroyFunction, req)
		if err != nil || res.Destroyed {
			t.Fatalf("destroy again %+v: %+v %v", req, res, err)
		}
	}
	_, err = f.execErr(sb.SandboxID, Command{Command: "true"})
	wantCode(t, err, wire.CodeNotFound)
	// A stale id does not destroy the session's next sandbox.
	next := f.create(t, CreateRequest{SessionID: "d"})
	res, err = engine.Call[DestroyResponse](ctx, f.e, DestroyFunction, DestroyRequest{SandboxID: sb.SandboxID})
	if err != nil || res.Destroyed || !exists(next.Workdir) {
		t.Fatalf("stale destroy %+v %v", res, err)
	}
}

// shell::exec takes the session from the call's baggage, never from the
// payload.
func TestShellExecSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	a := f.create(t, CreateRequest{SessionID: "a"})
	f.create(t, CreateRequest{SessionID: "b"})
	if r := f.sh(t, "a", "pwd"); strings.TrimSpace(r.Stdout) != a.Workdir {
		t.Fatalf("pwd %+v", r)
	}
	// No session at all.
	_, err := engine.Call[Result](ctx, f.e, ShellExecFunction, Command{Command: "true"})
	wantCode(t, err, wire.CodeNotFound)
	if !strings.Contains(err.Error(), "start the run with sandbox:true") {
		t.Fatalf("message %v", err)
	}
	// A session without a sandbox.
	_, err = engine.Call[Result](engine.WithSession(ctx, "nobody", ""), f.e, ShellExecFunction, Command{Command: "true"})
	wantCode(t, err, wire.CodeNotFound)
	if !strings.Contains(err.Error(), "no sandbox for session nobody: start the run with sandbox:true") {
		t.Fatalf("message %v", err)
	}
	// A payload naming another session or sandbox is just unknown fields.
	m, err := f.e.Conn().Request("iii.fn.shell.exec", []byte(`{"command":"pwd","session_id":"b","sandbox_id":"x"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if werr := wire.Decode(m); !errors.Is(werr, wire.ErrNotFound) {
		t.Fatalf("from JSON without baggage: %s (%v)", m.Data, werr)
	}
	// The Go API the fs tools use.
	if dir, err := f.w.Workdir(ctx, "a"); err != nil || dir != a.Workdir {
		t.Fatalf("Workdir %q %v", dir, err)
	}
	if dir, err := f.w.CallerWorkdir(engine.WithSession(ctx, "a", "")); err != nil || dir != a.Workdir {
		t.Fatalf("CallerWorkdir %q %v", dir, err)
	}
	for _, sid := range []string{"nobody", "", "bad/id"} {
		if _, err := f.w.Workdir(ctx, sid); !errors.Is(err, ErrNoSandbox) || !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("Workdir(%q): %v", sid, err)
		}
	}
	if _, err := f.w.CallerWorkdir(ctx); !errors.Is(err, ErrNoSandbox) {
		t.Fatalf("CallerWorkdir without session: %v", err)
	}
}

// The sandbox's files belong to the unprivileged host user; files a tool
// wrote into the workdir as root become its own before the next exec.
func TestFileOwner(t *testing.T) {
	t.Parallel()
	needRoot(t, "only a root node gives the sandbox's files to an unprivileged host user (any other node's sandbox runs as the node's own user, who owns them already)")
	f := newFixture(t)
	if uid, gid := f.w.FileOwner(); uid != DefaultHostUID || gid != DefaultHostGID {
		t.Fatalf("owner %d:%d", uid, gid)
	}
	sb := f.create(t, CreateRequest{SessionID: "own"})
	f.sh(t, "own", "mkdir -p d && echo x > d/f")
	for _, p := range []string{"d", "d/f"} {
		fi, err := os.Lstat(filepath.Join(sb.Workdir, p))
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != DefaultHostUID {
			t.Fatalf("%s: %v %v", p, fi, err)
		}
	}
	// As fs::write would: a root-owned file, 0644.
	if err := os.WriteFile(filepath.Join(sb.Workdir, "d", "from-tool"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := f.sh(t, "own", "echo b >> d/from-tool && cat d/from-tool"); r.Stdout != "a\nb\n" {
		t.Fatalf("append to a tool's file: %+v", r)
	}
	// A node whose home the host user cannot reach falls back to root.
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	g := newFixtureHome(t, filepath.Join(private, "home"))
	if uid, _ := g.w.FileOwner(); uid != 0 {
		t.Fatalf("fallback owner %d", uid)
	}
	if mode, _ := g.w.Isolation(); mode != IsolationBwrap {
		t.Fatalf("fallback isolation %q", mode)
	}
	if r := g.exec(t, g.create(t, CreateRequest{SessionID: "fb"}).SandboxID, Command{Command: "echo ok > f && cat f"}); r.Stdout != "ok\n" {
		t.Fatalf("fallback exec %+v", r)
	}
}

func TestExec(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sb := f.create(t, CreateRequest{SessionID: "x"})
	cases := []struct {
		name string
		cmd  Command
		want Result
	}{
		{"argv", Command{Argv: []string{"printf", "%s-%s", "a b", "c"}}, Result{Stdout: "a b-c"}},
		{"argv path lookup", Command{Argv: []string{"sh", "-c", "exit 7"}}, Result{ExitCode: 7}},
		{"stdin", Command{Command: "wc -l", Stdin: "1\n2\n3\n"}, Result{Stdout: "3\n"}},
		{"no stdin", Command{Command: "cat"}, Result{}},
		{"env", Command{Command: `echo "$GREETING $HOME"`, Env: map[string]string{"GREETING": "hi"}}, Result{Stdout: "hi " + sb.Workdir + "\n"}},
		{"stderr", Command{Command: "echo oops >&2; exit 3"}, Result{ExitCode: 3, Stderr: "oops\n"}},
		{"signal", Command{Command: "kill -9 $$"}, Result{ExitCode: 137}},
		{"missing program", Command{Argv: []string{"no-such-program"}}, Result{ExitCode: 1}},
		{"hostname", Command{Argv: []string{"cat", "/proc/sys/kernel/hostname"}}, Result{Stdout: "sandbox\n"}},
		{"unprivileged", Command{Argv: []string{"id", "-u"}}, Result{Stdout: "1000\n"}},
		{"no capabilities", Command{Command: "grep CapEff /proc/self/status"}, Result{Stdout: "CapEff:\t0000000000000000\n"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := f.exec(t, sb.SandboxID, c.cmd)
			if c.name == "missing program" {
				// bubblewrap's own message; only the status is ours to check.
				r.Stderr = ""
			}
			if r.ExitCode != c.want.ExitCode || r.Stdout != c.want.Stdout || r.Stderr != c.want.Stderr || r.TimedOut || r.Truncated || r.Isolation != IsolationBwrap {
				t.Fatalf("got %+v, want %+v", r, c.want)
			}
		})
	}
	// Execs of one sandbox run concurrently.
	var wg sync.WaitGroup
	began := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := f.execErr(sb.SandboxID, Command{Command: "sleep 0.5"}); err != nil || r.ExitCode != 0 {
				t.Errorf("%+v %v", r, err)
			}
		}()
	}
	wg.Wait()
	if took := time.Since(began); took > 1900*time.Millisecond {
		t.Fatalf("4 concurrent sleeps took %v", took)
	}
}

func TestInvalidPayload(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithMaxLimits(Limits{Pids: 1000}))
	sb := f.create(t, CreateRequest{SessionID: "v"})
	nc := f.e.Conn()
	id := sb.SandboxID
	cases := []struct {
		subject, body string
		code          wire.Code
	}{
		{"iii.fn.sandbox.create", `{}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.create", `{"session_id":"a/b"}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.create", `{"session_id":"` + strings.Repeat("x", 129) + `"}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.create", `{"session_id":"n","limits":{"pids":1001}}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.create", `{"session_id":"n","limits":{"pids":4}}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.create", `{"session_id":"n","limits":{"memory_mb":-1}}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.create", `{"session_id":"n","limits":{"wall_ms":1e12}}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.create", `{"session_id":"n","limits":{"disk_mb":"1"}}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.create", `{"session_id":"n","network":"yes"}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.create", `[`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"command":"true"}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"` + id + `"}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"` + id + `","command":"true","argv":["true"]}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"` + id + `","argv":[""]}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"` + id + `","argv":["echo","a\u0000b"]}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"` + id + `","command":"true","env":{"BAD-NAME":"x"}}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"` + id + `","command":"true","env":{"1X":"x"}}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"` + id + `","command":"true","env":{"A=B":"x"}}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"` + id + `","command":"true","env":{"X":"a\u0000"}}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"` + id + `","command":"true","timeout_ms":-1}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"` + id + `","command":"true","timeout_ms":999999999}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"` + id + `","command":"` + strings.Repeat("x", MaxCommandBytes+1) + `"}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"nounderscore","command":"true"}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"v_UPPERCASE0","command":"true"}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"v_0000000000","command":"true"}`, wire.CodeNotFound},
		{"iii.fn.sandbox.exec", `{"sandbox_id":"ghost_0000000000","command":"true"}`, wire.CodeNotFound},
		{"iii.fn.shell.exec", `{}`, wire.CodeInvalidPayload},
		{"iii.fn.shell.exec", `{"command":"x","argv":["y"]}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.destroy", `{}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.destroy", `{"sandbox_id":"` + id + `","session_id":"v"}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.destroy", `{"sandbox_id":"../../etc"}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.destroy", `{"session_id":"a b"}`, wire.CodeInvalidPayload},
		{"iii.fn.sandbox.list", `{"session_id":"*"}`, wire.CodeInvalidPayload},
	}
	for _, c := range cases {
		t.Run(c.subject+" "+c.body[:min(len(c.body), 60)], func(t *testing.T) {
			t.Parallel()
			m, err := nc.Request(c.subject, []byte(c.body), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			werr := wire.Decode(m)
			if werr == nil || werr.Code != c.code {
				t.Fatalf("answer %.300s (%v), want %s", m.Data, werr, c.code)
			}
		})
	}
	// Nothing half-made: only the one sandbox exists.
	if entries, _ := os.ReadDir(f.root); len(entries) != 1 {
		t.Fatalf("root holds %v", entries)
	}
}

// Sandboxes are node-local: another node's record is answered, not used.
func TestOtherNode(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	rec := Sandbox{SandboxID: "far_abcdefghij", SessionID: "far", Node: "elsewhere", Workdir: "/x/far_abcdefghij",
		Isolation: IsolationBwrap, Limits: DefaultLimits, Enforced: []string{"timeout:wall"}, CreatedAt: now, LastUsedAt: now}
	data, _ := json.Marshal(rec)
	if _, err := f.kv.Create(ctx, "session.far", data); err != nil {
		t.Fatal(err)
	}
	// The other node is alive: its heartbeat is fresh.
	beat, _ := json.Marshal(nodeBeat{Node: "elsewhere", At: now, StartedAt: now})
	if _, err := f.kv.Put(ctx, beatKey("elsewhere"), beat); err != nil {
		t.Fatal(err)
	}
	got := f.create(t, CreateRequest{SessionID: "far"})
	if got.SandboxID != rec.SandboxID || got.Node != "elsewhere" {
		t.Fatalf("create answered %+v", got)
	}
	_, err := f.execErr(rec.SandboxID, Command{Command: "true"})
	wantCode(t, err, wire.CodeUnavailable)
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "lives on node elsewhere") {
		t.Fatalf("exec: %v", err)
	}
	_, err = engine.Call[Result](engine.WithSession(ctx, "far", ""), f.e, ShellExecFunction, Command{Command: "true"})
	wantCode(t, err, wire.CodeUnavailable)
	_, err = engine.Call[DestroyResponse](ctx, f.e, DestroyFunction, DestroyRequest{SessionID: "far"})
	wantCode(t, err, wire.CodeUnavailable)
	if _, err := f.w.Workdir(ctx, "far"); !errors.Is(err, ErrOtherNode) {
		t.Fatalf("Workdir: %v", err)
	}
	list, err := engine.Call[ListResponse](ctx, f.e, ListFunction, ListRequest{SessionID: "far"})
	if err != nil || len(list.Sandboxes) != 1 || list.Sandboxes[0].Node != "elsewhere" {
		t.Fatalf("list %+v %v", list, err)
	}
	// The reaper leaves other nodes' sandboxes alone.
	if _, err := f.m.reap(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.kv.Get(ctx, "session.far"); err != nil {
		t.Fatalf("reaper touched another node's record: %v", err)
	}
}

// A restarted worker adopts its sandboxes: files stay, execs work.
func TestRestartAdopts(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	w1 := NewWorker(testOptions(home)...)
	ctx := context.Background()
	if err := w1.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	sb, err := engine.Call[Sandbox](ctx, e, CreateFunction, CreateRequest{SessionID: "keep"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Call[Result](ctx, e, ExecFunction, ExecRequest{SandboxID: sb.SandboxID, Command: Command{Command: "echo kept > f"}}); err != nil {
		t.Fatal(err)
	}
	if err := w1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f := startOn(t, ns, e, home)
	again := f.create(t, CreateRequest{SessionID: "keep"})
	if again.SandboxID != sb.SandboxID {
		t.Fatalf("after restart %+v", again)
	}
	if r := f.exec(t, sb.SandboxID, Command{Command: "cat f"}); r.Stdout != "kept\n" {
		t.Fatalf("after restart %+v", r)
	}
}

// Closing the worker ends running execs with unavailable.
func TestCloseEndsExecs(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	w := NewWorker(testOptions(home)...)
	ctx := context.Background()
	if err := w.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWorker(t, w) })
	sb, err := engine.Call[Sandbox](ctx, e, CreateFunction, CreateRequest{SessionID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := engine.Call[Result](ctx, e, ExecFunction, ExecRequest{SandboxID: sb.SandboxID, Command: Command{Command: "sleep 60"}})
		done <- err
	}()
	enginetest.Eventually(t, 5*time.Second, func() error {
		if len(processesIn(sb.Workdir)) == 0 {
			return errors.New("not running yet")
		}
		return nil
	})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("exec at close: %v", err)
	}
	if ps := processesIn(sb.Workdir); len(ps) != 0 {
		t.Fatalf("processes left: %v", ps)
	}
	if !exists(sb.Workdir) {
		t.Fatal("close removed the workdir")
	}
}

func TestUnsandboxed(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, WithBwrap("/nonexistent/bwrap"))
		if mode, why := f.w.Isolation(); mode != IsolationNone || !strings.Contains(why, "/nonexistent/bwrap") {
			t.Fatalf("isolation %q %q", mode, why)
		}
		_, err := engine.Call[Sandbox](context.Background(), f.e, CreateFunction, CreateRequest{SessionID: "u"})
		wantCode(t, err, wire.CodeUnavailable)
		if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "allow_unsandboxed=true") {
			t.Fatalf("create: %v", err)
		}
	})
	t.Run("allowed", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, WithBwrap("/nonexistent/bwrap"), WithAllowUnsandboxed(true))
		vault := writeVault(t, f.home)
		sb := f.create(t, CreateRequest{SessionID: "u", Limits: Limits{DiskMB: 1}})
		if sb.Isolation != IsolationNone {
			t.Fatalf("isolation %q", sb.Isolation)
		}
		r := f.exec(t, sb.SandboxID, Command{Command: "pwd; head -c 3000000 /dev/zero > big; echo $?; rm big"})
		if r.Isolation != IsolationNone || r.Stdout != sb.Workdir+"\n153\n" {
			t.Fatalf("exec %+v", r)
		}
		// The control of the escape tests: without isolation the vault is
		// readable, so those tests would notice an escape.
		if r := f.sh(t, "u", "cat "+vault); !strings.Contains(r.Stdout, vaultSecret) {
			t.Fatalf("control: %+v", r)
		}
		r = f.exec(t, sb.SandboxID, Command{Command: "trap '' TERM; sleep 30 & sleep 30", TimeoutMs: 300})
		if !r.TimedOut || r.Signal != "SIGKILL" {
			t.Fatalf("timeout %+v", r)
		}
		if ps := processesIn(sb.Workdir); len(ps) != 0 {
			t.Fatalf("processes left: %v", ps)
		}
	})
	t.Run("isolated sandbox on a node that lost bwrap", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		ns := enginetest.RunServer(t)
		e := enginetest.NewEngine(t, ns)
		w1 := NewWorker(testOptions(home)...)
		ctx := context.Background()
		if err := w1.Start(ctx, e); err != nil {
			t.Fatal(err)
		}
		sb, err := engine.Call[Sandbox](ctx, e, CreateFunction, CreateRequest{SessionID: "iso"})
		if err != nil {
			t.Fatal(err)
		}
		if err := w1.Close(ctx); err != nil {
			t.Fatal(err)
		}
		f := startOn(t, ns, e, home, WithBwrap("/nonexistent/bwrap"), WithAllowUnsandboxed(true))
		_, err = f.execErr(sb.SandboxID, Command{Command: "true"})
		wantCode(t, err, wire.CodeUnavailable)
		if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "created isolated") {
			t.Fatalf("exec: %v", err)
		}
	})
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()
	home := reachableHome(t)
	env := workers.Env{Home: home, Settings: map[string]map[string]string{WorkerName: {
		"node": "n1", "reap_interval": "0", "default_memory_mb": "128", "max_output_bytes": "1024",
	}}}
	run, err := workers.Global().Start(ctx, e, env, WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close(ctx)
	fns, err := e.FunctionsList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{CreateFunction: true, ExecFunction: false, DestroyFunction: true, ListFunction: true, ShellExecFunction: false}
	for _, fn := range fns {
		idem, ok := want[fn.ID]
		if !ok {
			continue
		}
		delete(want, fn.ID)
		if fn.Worker != WorkerName || !json.Valid(fn.RequestSchema) || !json.Valid(fn.ResponseSchema) || fn.Idempotent != idem {
			t.Fatalf("catalog entry %+v", fn)
		}
		if skill(fn.ID) == "" {
			t.Fatalf("no skill for %s", fn.ID)
		}
	}
	if len(want) != 0 {
		t.Fatalf("missing from the catalog: %v", want)
	}
	sb, err := engine.Call[Sandbox](ctx, e, CreateFunction, CreateRequest{SessionID: "life"})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Call[DestroyResponse](ctx, e, DestroyFunction, DestroyRequest{SessionID: "life"}) //nolint:errcheck
	if sb.Node != "n1" || sb.Limits.MemoryMB != 128 || sb.Workdir != filepath.Join(home, "sandboxes", sb.SandboxID) {
		t.Fatalf("sandbox %+v", sb)
	}
	r, err := engine.Call[Result](ctx, e, ExecFunction, ExecRequest{SandboxID: sb.SandboxID, Command: Command{Command: "yes | head -c 5000"}})
	if err != nil || len(r.Stdout) != 1024 || !r.Truncated {
		t.Fatalf("output cap: %d %v %v", len(r.Stdout), r.Truncated, err)
	}
}

// A root node keeps its sandboxes in its home when the sandbox's host
// user can pass through it, and under SystemRoot otherwise.
func TestDefaultRoot(t *testing.T) {
	t.Parallel()
	open := reachableHome(t)
	closed := t.TempDir()
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		home   string
		asRoot bool
		want   string
	}{
		{"not root", closed, false, filepath.Join(closed, "sandboxes")},
		{"root, reachable home", open, true, filepath.Join(open, "sandboxes")},
		{"root, home not yet made under a reachable folder", filepath.Join(open, "new"), true, filepath.Join(open, "new", "sandboxes")},
	}
	for _, tt := range tests {
		if got := defaultRoot(tt.home, tt.asRoot); got != tt.want {
			t.Errorf("%s: defaultRoot(%s) = %s, want %s", tt.name, tt.home, got, tt.want)
		}
	}
	got := defaultRoot(closed, true)
	if filepath.Dir(got) != SystemRoot || got != defaultRoot(closed, true) || got == defaultRoot(open+"x", true) {
		t.Errorf("root, closed home: defaultRoot = %s, want one stable folder per home under %s", got, SystemRoot)
	}
}
