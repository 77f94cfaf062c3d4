package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// clock is a settable clock for the reaper's ages.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestReapIdleAndExpired(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.UnixMilli(1_700_000_000_000)}
	f := newFixture(t, WithClock(c.now), WithIdleTTL(30*time.Minute), WithMaxAge(24*time.Hour))
	ctx := context.Background()
	a := f.create(t, CreateRequest{SessionID: "a"})
	b := f.create(t, CreateRequest{SessionID: "b"})
	busy := f.create(t, CreateRequest{SessionID: "busy"})

	c.advance(20 * time.Minute)
	f.sh(t, "b", "true") // b was used at +20m
	running := make(chan error, 1)
	go func() {
		_, err := f.execErr(busy.SandboxID, Command{Command: "sleep 3"})
		running <- err
	}()
	enginetest.Eventually(t, 5*time.Second, func() error {
		if len(processesIn(busy.Workdir)) == 0 {
			return errors.New("not running yet")
		}
		return nil
	})
	c.advance(11 * time.Minute) // +31m: a idle 31m, b 11m, busy running
	st, err := f.m.reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st != (reapStats{Idle: 1}) || exists(a.Workdir) || !exists(b.Workdir) || !exists(busy.Workdir) {
		t.Fatalf("stats %+v; a %v b %v busy %v", st, exists(a.Workdir), exists(b.Workdir), exists(busy.Workdir))
	}
	if _, err := f.kv.Get(ctx, "session.a"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a's record: %v", err)
	}
	// last_used_at was written to b's record (more than idle_ttl/4 after
	// its creation).
	ent, err := f.kv.Get(ctx, "session.b")
	if err != nil {
		t.Fatal(err)
	}
	var rec Sandbox
	_ = json.Unmarshal(ent.Value(), &rec)
	if rec.LastUsedAt != rec.CreatedAt+(20*time.Minute).Milliseconds() {
		t.Fatalf("b's record %+v", rec)
	}

	// Past max_age even a running sandbox goes.
	c.advance(24 * time.Hour)
	st, err = f.m.reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st != (reapStats{Expired: 2}) || exists(b.Workdir) || exists(busy.Workdir) {
		t.Fatalf("stats %+v", st)
	}
	select {
	case err := <-running:
		if !errors.Is(err, wire.ErrNotFound) || !strings.Contains(err.Error(), "reaped") {
			t.Fatalf("running exec ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("running exec survived the reaper")
	}
}

// Workdirs and cgroups without a record (a crash's leftovers) are
// removed, with whatever still runs in them; other folders stay.
func TestReapOrphans(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	needCgroups(t, f)
	ctx := context.Background()
	live := f.create(t, CreateRequest{SessionID: "live"})
	ghost := filepath.Join(f.root, "ghost_0123456789")
	if err := os.MkdirAll(filepath.Join(ghost, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ghost, "sub", "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(f.root, "operator-notes")
	if err := os.Mkdir(keep, 0o700); err != nil {
		t.Fatal(err)
	}
	// An orphan cgroup with a process still in it.
	cg, err := f.m.cg.ensureSandbox("crashed_0123456789", DefaultLimits)
	if err != nil || cg == nil {
		t.Fatalf("cgroup: %v", err)
	}
	leaf, err := cg.newExec(1, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	leaf.closeFD()
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan error, 1)
	go func() { reaped <- sleeper.Wait() }()
	for _, d := range leaf.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}

	st, err := f.m.reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.OrphanWorkdirs != 1 || st.OrphanCgroups != 1 || st.Idle+st.Expired != 0 {
		t.Fatalf("stats %+v", st)
	}
	if exists(ghost) || !exists(keep) || !exists(live.Workdir) {
		t.Fatalf("ghost %v keep %v live %v", exists(ghost), exists(keep), exists(live.Workdir))
	}
	for _, d := range cg.dirs {
		if exists(d) {
			t.Fatalf("orphan cgroup %s left", d)
		}
	}
	select {
	case err := <-reaped:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("sleeper ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the orphan cgroup's process survived")
	}
	if r := f.sh(t, "live", "echo ok"); r.Stdout != "ok\n" {
		t.Fatalf("live sandbox after reap: %+v", r)
	}
}

// At Start, a record of this node whose workdir is gone is deleted, and
// orphans are removed.
func TestStartCleansUp(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	kv, err := e.EnsureKV(ctx, BucketConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(home, "sandboxes")
	stale := Sandbox{SandboxID: "stale_0123456789", SessionID: "stale", Node: "test-node", Workdir: filepath.Join(root, "stale_0123456789"),
		Isolation: IsolationBwrap, Limits: DefaultLimits, CreatedAt: 1, LastUsedAt: 1}
	data, _ := json.Marshal(stale)
	if _, err := kv.Create(ctx, "session.stale", data); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "orphan_0123456789"), 0o700); err != nil {
		t.Fatal(err)
	}
	f := startOn(t, ns, e, home)
	if _, err := kv.Get(ctx, "session.stale"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("stale record: %v", err)
	}
	if exists(filepath.Join(root, "orphan_0123456789")) {
		t.Fatal("orphan workdir left")
	}
	// The session can have a sandbox again.
	if sb := f.create(t, CreateRequest{SessionID: "stale"}); sb.SandboxID == stale.SandboxID {
		t.Fatalf("reused %s", sb.SandboxID)
	}
}

// The reaper runs on its own every interval.
func TestReaperLoop(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithReapInterval(20*time.Millisecond), WithIdleTTL(50*time.Millisecond))
	sb := f.create(t, CreateRequest{SessionID: "loop"})
	enginetest.Eventually(t, 5*time.Second, func() error {
		list, err := engine.Call[ListResponse](context.Background(), f.e, ListFunction, ListRequest{SessionID: "loop"})
		if err != nil || len(list.Sandboxes) != 0 {
			return fmt.Errorf("not reaped yet: %+v %v", list, err)
		}
		return nil
	})
	if exists(sb.Workdir) {
		t.Fatal("workdir left")
	}
	_, err := engine.Call[Result](engine.WithSession(context.Background(), "loop", ""), f.e, ShellExecFunction, Command{Command: "true"})
	if !errors.Is(err, wire.ErrNotFound) || !strings.Contains(err.Error(), "no sandbox for session loop: start the run with sandbox:true") {
		t.Fatalf("after reaping: %v", err)
	}
}

// A workdir that is not live is an orphan only when its session has no
// record of it: the reaper keeps one whose record names it (a record this
// run never adopted, such as one whose read failed at Start; the next exec
// adopts it) and one whose record cannot be read, and removes one whose
// session's record names another sandbox. Before, a record read that
// failed at Start made the reaper delete that session's files for good.
func TestReapKeepsClaimedWorkdirs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		record     string // the sandbox id the session's record names ("" none)
		unreadable bool   // the records cannot be read
		kept       bool
	}{
		{name: "its record, not adopted", record: "claimed_0123456789", kept: true},
		{name: "no record", kept: false},
		{name: "a newer sandbox's record", record: "claimed_9876543210", kept: false},
		{name: "records unreadable", record: "claimed_0123456789", unreadable: true, kept: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := context.Background()
			dir := filepath.Join(f.root, "claimed_0123456789")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "work.txt"), []byte("the session's work"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.record != "" {
				rec := Sandbox{SandboxID: tt.record, SessionID: "claimed", Node: "test-node", Workdir: filepath.Join(f.root, tt.record),
					Isolation: IsolationBwrap, Limits: DefaultLimits, CreatedAt: 1, LastUsedAt: 1}
				data, _ := json.Marshal(rec)
				if _, err := f.kv.Create(ctx, recordKey("claimed"), data); err != nil {
					t.Fatal(err)
				}
			}
			if tt.unreadable {
				if err := f.e.JetStream().DeleteKeyValue(ctx, f.kv.Bucket()); err != nil {
					t.Fatal(err)
				}
			}
			st, err := f.m.reap(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := exists(filepath.Join(dir, "work.txt")); got != tt.kept {
				t.Fatalf("workdir kept %v, want %v (stats %+v)", got, tt.kept, st)
			}
			if want := map[bool]int{true: 0, false: 1}[tt.kept]; st.OrphanWorkdirs != want {
				t.Fatalf("orphan workdirs %d, want %d", st.OrphanWorkdirs, want)
			}
		})
	}
}
