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
	"github.com/iii-on-nats/iii/engine/wire"
)

// A fork bomb hits the pids limit, is killed at the timeout, and leaves
// nothing behind.
func TestForkBomb(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if !f.m.cg.hasPids {
		t.Fatalf("no pids cgroup here: %s", f.m.cg.why)
	}
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
		if r.ExitCode != 0 || !r.OverQuota {
			t.Fatalf("over quota: %+v", r)
		}
		_, err := f.execErr(sb.SandboxID, Command{Command: "true"})
		wantCode(t, err, wire.CodeForbidden)
		if !strings.Contains(err.Error(), "disk_mb") {
			t.Fatalf("message %v", err)
		}
		// Removing files from the host (as the fs tools do) lifts it.
		if err := os.Remove(filepath.Join(sb.Workdir, "a")); err != nil {
			t.Fatal(err)
		}
		if r := f.exec(t, sb.SandboxID, Command{Command: "echo ok"}); r.Stdout != "ok\n" || r.OverQuota {
			t.Fatalf("after cleanup: %+v", r)
		}
	})
}

func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if !f.m.cg.hasMemory {
		t.Fatalf("no memory cgroup here: %s", f.m.cg.why)
	}
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
		t.Fatalf("no cgroup v2 at %s: %s", root, f.m.cg.why)
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
