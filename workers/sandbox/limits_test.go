package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// A fork bomb hits the pids limit, is killed at the timeout, and leaves
// nothing behind.
func TestForkBomb(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	needCgroups(t, f)
	sb := f.create(t, CreateRequest{SessionID: "bomb", Limits: Limits{Pids: 32, WallMs: 1500}})
	dir := f.m.cg.sandboxDirs(sb.SandboxID)[0] // the pids hierarchy's (v1) or the only one (v2)
	began := time.Now()
	// The shell waits on a FIFO nobody opens: only the timeout ends it.
	r := f.exec(t, sb.SandboxID, Command{Command: "mkfifo p; bomb() { bomb | bomb & }; bomb; read x < p"})
	if !r.TimedOut || time.Since(began) > 8*time.Second {
		t.Fatalf("fork bomb: timed out %v, signal %q after %v", r.TimedOut, r.Signal, time.Since(began))
	}
	if r.StderrBytes == 0 {
		t.Fatal("no fork failed")
	}
	if peak, err := os.ReadFile(filepath.Join(dir, "pids.peak")); err == nil && strings.TrimSpace(string(peak)) != "32" {
		t.Fatalf("pids.peak %q, want the limit", peak)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if cur, _ := os.ReadFile(filepath.Join(dir, "pids.current")); strings.TrimSpace(string(cur)) != "0" {
			return fmt.Errorf("pids.current %q", cur)
		}
		return nil
	})
	if r := f.exec(t, sb.SandboxID, Command{Command: "echo alive"}); r.Stdout != "alive\n" {
		t.Fatalf("after the bomb: %+v", r)
	}
}

// A command that ignores SIGTERM is killed at the timeout; one that does
// not dies of the SIGTERM. Neither leaves a zombie.
func TestTimeoutKills(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithKillGrace(time.Second))
	sb := f.create(t, CreateRequest{SessionID: "slow"})
	cases := []struct {
		name, cmd, signal string
	}{
		{"traps SIGTERM", "trap '' TERM; sleep 30 & wait; sleep 30", "SIGKILL"},
		{"plain", "sleep 30", "SIGTERM"},
		// The shell dies of the SIGTERM; the subshell that ignores it dies
		// with the sandbox's pid namespace.
		{"background child traps", "(trap '' TERM; sleep 30) & wait", "SIGTERM"},
		{"detached", "setsid sh -c 'trap \"\" TERM; sleep 30' & sleep 30", "SIGTERM"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			began := time.Now()
			r := f.exec(t, sb.SandboxID, Command{Command: c.cmd, TimeoutMs: 300})
			took := time.Since(began)
			if !r.TimedOut || r.Signal != c.signal || took > 5*time.Second {
				t.Fatalf("result %+v after %v", r, took)
			}
			if ps := processesIn(sb.Workdir); len(ps) != 0 {
				t.Fatalf("processes left in the workdir: %v", ps)
			}
		})
	}
}

// Output beyond the cap is read and discarded: the result keeps the cap,
// counts the rest, and the worker's memory does not follow the flood.
// Not parallel: it measures the process's allocations.
func TestOutputFlood(t *testing.T) {
	f := newFixture(t)
	sb := f.create(t, CreateRequest{SessionID: "flood"})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := f.exec(t, sb.SandboxID, Command{Command: "yes | head -c 100000000; yes e | head -c 1000000 >&2"})
	runtime.ReadMemStats(&after)
	if !r.Truncated || len(r.Stdout) != DefaultMaxOutput || r.StdoutBytes != 100_000_000 ||
		len(r.Stderr) != DefaultMaxOutput || r.StderrBytes != 1_000_000 || r.ExitCode != 0 {
		t.Fatalf("flood: exit %d truncated %v stdout %d/%d stderr %d/%d", r.ExitCode, r.Truncated, len(r.Stdout), r.StdoutBytes, len(r.Stderr), r.StderrBytes)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Fatalf("allocated %d MiB for a 100 MB flood", alloc>>20)
	}
}

func TestRlimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sb := f.create(t, CreateRequest{SessionID: "rl", Limits: Limits{CPUSeconds: 1, DiskMB: 1, WallMs: 10_000}})
	t.Run("cpu", func(t *testing.T) {
		began := time.Now()
		r := f.exec(t, sb.SandboxID, Command{Argv: []string{"sh", "-c", "while :; do :; done"}})
		// SIGXCPU at the soft limit (exit 128+24).
		// The wall clock (10 s) is far: only the CPU limit can end it.
		if r.TimedOut || r.ExitCode != 152 || time.Since(began) > 9*time.Second {
			t.Fatalf("cpu: %+v after %v", r, time.Since(began))
		}
	})
	t.Run("file size", func(t *testing.T) {
		r := f.exec(t, sb.SandboxID, Command{Command: "head -c 3000000 /dev/zero > big; echo $?; stat -c %s big"})
		// SIGXFSZ (128+25) at 1 MiB.
		if r.Stdout != "153\n1048576\n" {
			t.Fatalf("fsize: %+v", r)
		}
		_ = os.Remove(filepath.Join(sb.Workdir, "big"))
	})
	t.Run("disk quota", func(t *testing.T) {
		r := f.exec(t, sb.SandboxID, Command{Command: "head -c 700000 /dev/urandom > a; head -c 700000 /dev/urandom > b"})
		if r.ExitCode != 0 || !r.OverQuota || r.CleanupOnly {
			t.Fatalf("over quota: %+v", r)
		}
		if r := f.exec(t, sb.SandboxID, Command{Command: "echo x > c"}); r.ExitCode != 153 || !r.CleanupOnly || !r.OverQuota {
			t.Fatalf("a write over the quota: %+v", r)
		}
		// Removing files from the host (as the fs tools do) lifts it.
		if err := os.Remove(filepath.Join(sb.Workdir, "a")); err != nil {
			t.Fatal(err)
		}
		if r := f.exec(t, sb.SandboxID, Command{Command: "echo ok > c && cat c"}); r.Stdout != "ok\n" || r.OverQuota || r.CleanupOnly {
			t.Fatalf("after cleanup: %+v", r)
		}
	})
}

// A sandbox over disk_mb is never refused a command: that is how a model
// frees space (rm). Until it is back under the quota, each exec runs
// cleanup-only — no file may grow (RLIMIT_FSIZE 0: the writer gets
// SIGXFSZ, exit 153), in the workdir or /tmp — while removing,
// truncating, moving and reading files work; the result says
// cleanup_only, and over_quota while the workdir still exceeds the quota.
// Once it does not, the next exec is an ordinary one. What the skill
// tells the model to do is what works here.
func TestOverQuotaExec(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const size = 700_000 // two take 1 MiB (disk_mb 1) and more
	for _, tc := range []struct {
		name    string
		command string
		exit    int
		stdout  string
		over    bool             // over_quota after
		sizes   map[string]int64 // file sizes after; -1 absent
	}{
		{name: "rm frees space", command: "rm a && ls", stdout: "b\n", sizes: map[string]int64{"a": -1, "b": size}},
		{name: "truncate frees space", command: "truncate -s 0 a", sizes: map[string]int64{"a": 0, "b": size}},
		{name: "reads work", command: "wc -c < a", stdout: "700000\n", over: true, sizes: map[string]int64{"a": size}},
		{name: "moves work", command: "mkdir d && mv a d/a && ls d", stdout: "a\n", over: true, sizes: map[string]int64{"a": -1, "d/a": size}},
		{name: "a new file cannot grow", command: "echo x > new", exit: 153, over: true, sizes: map[string]int64{"new": 0}},
		{name: "an append is refused", command: "echo x >> a", exit: 153, over: true, sizes: map[string]int64{"a": size}},
		{name: "a copy is refused", command: "cp a c", exit: 153, over: true, sizes: map[string]int64{"c": 0}},
		{name: "an overwrite in place is refused", command: "printf x | dd of=a conv=notrunc status=none", exit: 153, over: true, sizes: map[string]int64{"a": size}},
		{name: "a file in /tmp cannot grow", command: "echo x > /tmp/x", exit: 153, over: true},
		// Space freed during the exec does not lift it: the exec is
		// cleanup-only to its end.
		{name: "the rest of the command runs", command: "rm a; cp b c; echo done", stdout: "done\n", sizes: map[string]int64{"a": -1, "c": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sid := "oq" + strings.NewReplacer(" ", "", "/", "", "-", "").Replace(tc.name)
			sb := f.create(t, CreateRequest{SessionID: sid, Limits: Limits{DiskMB: 1}})
			if r := f.sh(t, sid, fmt.Sprintf("head -c %d /dev/urandom > a; head -c %d /dev/urandom > b", size, size)); !r.OverQuota || r.CleanupOnly {
				t.Fatalf("setup: %+v", r)
			}
			r := f.sh(t, sid, tc.command)
			if r.ExitCode != tc.exit || r.Stdout != tc.stdout || !r.CleanupOnly || r.OverQuota != tc.over || r.QuotaStopped {
				t.Fatalf("%s: exit %d stdout %q stderr %q cleanup_only %v over_quota %v quota_stopped %v; want exit %d stdout %q cleanup_only, over_quota %v",
					tc.command, r.ExitCode, r.Stdout, r.Stderr, r.CleanupOnly, r.OverQuota, r.QuotaStopped, tc.exit, tc.stdout, tc.over)
			}
			for name, want := range tc.sizes {
				got := int64(-1)
				if fi, err := os.Lstat(filepath.Join(sb.Workdir, name)); err == nil {
					got = fi.Size()
				}
				if got != want {
					t.Fatalf("%s is %d bytes after %q, want %d", name, got, tc.command, want)
				}
			}
			// The next exec is cleanup-only exactly while the workdir is
			// still over the quota.
			r = f.sh(t, sid, "echo ok > ok && cat ok")
			if tc.over {
				if r.ExitCode != 153 || !r.CleanupOnly || !r.OverQuota {
					t.Fatalf("still over the quota, the next exec: %+v", r)
				}
			} else if r.ExitCode != 0 || r.Stdout != "ok\n" || r.CleanupOnly || r.OverQuota {
				t.Fatalf("back under the quota, the next exec: %+v", r)
			}
		})
	}
	sk := skill(ShellExecFunction)
	i := strings.Index(sk, "- `cleanup_only`")
	if i < 0 {
		t.Fatal("shell::exec's skill has no cleanup_only entry")
	}
	if entry, _, _ := strings.Cut(sk[i+1:], "\n- "); !strings.Contains(entry, "`rm`") || !strings.Contains(entry, "153") {
		t.Fatalf("shell::exec's skill does not say how to free space: %s", entry)
	}
}

// An exec that takes the workdir past disk_mb while it runs is stopped
// (SIGKILL) soon after, not at its timeout: the result says
// quota_stopped and over_quota, keeps the output so far, and the next
// exec is cleanup-only. One that stays within the quota runs on.
func TestQuotaWatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct {
		name    string
		command string
		stopped bool
	}{
		// 200 kB every 50 ms: past 1 MiB in about 300 ms, unbounded after.
		{name: "a growing command is stopped", command: "echo started; i=0; while :; do head -c 200000 /dev/zero > f$i; i=$((i+1)); sleep 0.05; done", stopped: true},
		{name: "one within the quota runs on", command: "i=0; while [ $i -lt 30 ]; do head -c 200000 /dev/zero > f; i=$((i+1)); sleep 0.05; done; echo done"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sid := "qw" + strings.ReplaceAll(tc.name, " ", "")
			f.create(t, CreateRequest{SessionID: sid, Limits: Limits{DiskMB: 1, WallMs: 15_000}})
			began := time.Now()
			r := f.sh(t, sid, tc.command)
			took := time.Since(began)
			if !tc.stopped {
				if r.ExitCode != 0 || r.Stdout != "done\n" || r.QuotaStopped || r.OverQuota || r.TimedOut {
					t.Fatalf("within the quota: %+v", r)
				}
				return
			}
			if !r.QuotaStopped || !r.OverQuota || r.TimedOut || r.ExitCode != 137 || r.Signal != "SIGKILL" || r.Stdout != "started\n" || took > 10*time.Second {
				t.Fatalf("past the quota after %v: %+v", took, r)
			}
			if r := f.sh(t, sid, "echo x > g"); !r.CleanupOnly || r.ExitCode != 153 {
				t.Fatalf("the next exec: %+v", r)
			}
		})
	}
}

func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	needCgroups(t, f)
	sb := f.create(t, CreateRequest{SessionID: "mem", Limits: Limits{MemoryMB: 32}})
	// tail -c keeps the last 90 MB in memory.
	r := f.exec(t, sb.SandboxID, Command{Command: "head -c 100000000 /dev/zero | tail -c 90000000 | wc -c"})
	if !r.OOMKilled || strings.TrimSpace(r.Stdout) == "90000000" {
		t.Fatalf("memory: %+v", r)
	}
	// /tmp is in memory too.
	r = f.exec(t, sb.SandboxID, Command{Command: "head -c 64000000 /dev/zero > /tmp/big"})
	if r.ExitCode == 0 {
		t.Fatalf("/tmp past the memory limit: %+v", r)
	}
}

// Without a cgroup root the limits fall back to rlimits, and the record
// says so.
func TestNoCgroups(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithCgroupRoot(""))
	sb := f.create(t, CreateRequest{SessionID: "nocg", Limits: Limits{MemoryMB: 64}})
	if strings.Join(sb.Enforced, ",") != "rlimit:as,rlimit:cpu,rlimit:fsize,quota:disk,timeout:wall" {
		t.Fatalf("enforced %v", sb.Enforced)
	}
	r := f.exec(t, sb.SandboxID, Command{Command: "ulimit -v; echo hi"})
	if r.Stdout != "65536\nhi\n" {
		t.Fatalf("rlimit as: %+v", r)
	}
	r = f.exec(t, sb.SandboxID, Command{Command: "trap '' TERM; sleep 30", TimeoutMs: 200})
	if !r.TimedOut || r.Signal != "SIGKILL" {
		t.Fatalf("timeout without cgroups: %+v", r)
	}
}

// On cgroup v2 (here the unified hierarchy, without controllers) every
// exec is born in its own leaf, found and killed there.
func TestCgroupV2Tracking(t *testing.T) {
	t.Parallel()
	const unified = "/sys/fs/cgroup/unified"
	root := DefaultCgroupRoot
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		root = unified
	}
	f := newFixture(t, WithCgroupRoot(root))
	if f.m.cg.version != cgV2 {
		t.Fatalf("this test needs a writable cgroup v2 hierarchy (run it as root, or as a user with a delegated cgroup): none at %s: %s", root, f.m.cg.why)
	}
	sb := f.create(t, CreateRequest{SessionID: "v2"})
	done := make(chan Result, 1)
	go func() {
		r, _ := f.execErr(sb.SandboxID, Command{Command: "sleep 0.3 & sleep 5", TimeoutMs: 1500})
		done <- r
	}()
	base := filepath.Join(f.m.cg.base, sb.SandboxID)
	var leafPids []int
	deadline := time.Now().Add(5 * time.Second)
	for len(leafPids) < 3 && time.Now().Before(deadline) {
		leaves, _ := filepath.Glob(filepath.Join(base, "e*"))
		leafPids = cgroupProcs(leaves...)
		time.Sleep(10 * time.Millisecond)
	}
	if len(leafPids) < 3 { // bwrap, its init, sh, sleeps
		t.Fatalf("exec leaf holds %v", leafPids)
	}
	if ps := processesIn(sb.Workdir); len(ps) == 0 {
		t.Fatal("processesIn sees no process in the workdir while one runs")
	}
	r := <-done
	if !r.TimedOut {
		t.Fatalf("result %+v", r)
	}
	if leaves, _ := filepath.Glob(filepath.Join(base, "e*")); len(leaves) != 0 {
		t.Fatalf("leaves left: %v", leaves)
	}
}

// The caller's deadline bounds an exec: the answer, timed_out, arrives
// before the caller stops waiting.
func TestCallerDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sb := f.create(t, CreateRequest{SessionID: "dl"})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	r, err := engine.Call[Result](ctx, f.e, ExecFunction, ExecRequest{SandboxID: sb.SandboxID, Command: Command{Command: "sleep 30"}})
	if err != nil || !r.TimedOut {
		t.Fatalf("result %+v, err %v", r, err)
	}
}

// A sandbox over disk_mb when its node restarts is still over it: the
// adoption measures the workdir, so the first exec after the restart is
// cleanup-only, as it would have been before, and not an ordinary one
// that grows files until the quota watch stops it.
func TestOverQuotaAdopted(t *testing.T) {
	t.Parallel()
	home := reachableHome(t)
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	w1 := NewWorker(testOptions(home)...)
	if err := w1.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	if _, err := w1.m.create(ctx, CreateRequest{SessionID: "adoptq", Limits: Limits{DiskMB: 1}}); err != nil {
		t.Fatal(err)
	}
	sctx := engine.WithSession(ctx, "adoptq", "m1")
	if r, err := engine.Call[Result](sctx, e, ShellExecFunction, Command{Command: "head -c 700000 /dev/zero > a; head -c 700000 /dev/zero > b"}); err != nil || !r.OverQuota {
		t.Fatalf("setup: %+v %v", r, err)
	}
	if err := w1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f := startOn(t, ns, e, home)
	// Slower than the quota watch: an ordinary exec would be stopped.
	r := f.sh(t, "adoptq", "sleep 1; echo x > c")
	if !r.CleanupOnly || r.QuotaStopped || r.ExitCode != 153 || !r.OverQuota {
		t.Fatalf("the first exec after the restart: %+v", r)
	}
	if r := f.sh(t, "adoptq", "rm a b && echo x > c && cat c"); !r.CleanupOnly || r.ExitCode != 153 {
		t.Fatalf("cleanup: %+v", r)
	}
	if r := f.sh(t, "adoptq", "echo x > c && cat c"); r.CleanupOnly || r.OverQuota || r.Stdout != "x\n" {
		t.Fatalf("after cleanup: %+v", r)
	}
}
