package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// putBeat writes node's heartbeat as written at at.
func putBeat(t testing.TB, kv jetstream.KeyValue, node string, at time.Time) {
	t.Helper()
	data, _ := json.Marshal(nodeBeat{Node: node, At: at.UnixMilli(), StartedAt: at.UnixMilli()})
	if _, err := kv.Put(context.Background(), beatKey(node), data); err != nil {
		t.Fatal(err)
	}
}

// putRecord writes rec as session rec.SessionID's record.
func putRecord(t testing.TB, kv jetstream.KeyValue, rec Sandbox) uint64 {
	t.Helper()
	data, _ := json.Marshal(rec)
	rev, err := kv.Put(context.Background(), recordKey(rec.SessionID), data)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// farRecord is a record of session sid's sandbox on node, created and
// last used at used.
func farRecord(sid, node string, used time.Time) Sandbox {
	id := sid + "_abcdefghij"
	return Sandbox{SandboxID: id, SessionID: sid, Node: node, Workdir: "/elsewhere/" + id, Isolation: IsolationBwrap,
		Limits: DefaultLimits, Enforced: []string{"timeout:wall"}, CreatedAt: used.UnixMilli(), LastUsedAt: used.UnixMilli(),
		ExpiresAt: used.Add(DefaultMaxAge).UnixMilli()}
}

func TestOrphanReason(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	o, err := buildOptions([]Option{WithOrphanAfter(5 * time.Minute), WithIdleTTL(30 * time.Minute), WithMaxAge(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	m := &manager{o: o}
	live := nodeState{known: true, last: now.Add(-time.Minute)}
	tests := []struct {
		name   string
		rec    Sandbox
		node   nodeState
		orphan string // a part of the reason; "" not an orphan
	}{
		{name: "node alive", rec: farRecord("s", "n", now.Add(-time.Hour)), node: live},
		{name: "node silent just under orphan_after", rec: farRecord("s", "n", now.Add(-time.Hour)), node: nodeState{known: true, last: now.Add(-5 * time.Minute)}},
		{name: "node silent past orphan_after", rec: farRecord("s", "n", now.Add(-time.Hour)), node: nodeState{known: true, last: now.Add(-6 * time.Minute)}, orphan: "gone since"},
		{name: "expired, within the grace", rec: farRecord("s", "n", now.Add(-24*time.Hour-4*time.Minute)), node: live},
		{name: "expired past the grace", rec: farRecord("s", "n", now.Add(-24*time.Hour-6*time.Minute)), node: live, orphan: "expired"},
		{name: "recorded expiry wins over this node's max_age", rec: func() Sandbox {
			r := farRecord("s", "n", now.Add(-time.Hour))
			r.ExpiresAt = now.Add(-10 * time.Minute).UnixMilli()
			return r
		}(), node: live, orphan: "expired"},
		{name: "old record without expiry: this node's max_age", rec: func() Sandbox {
			r := farRecord("s", "n", now.Add(-25*time.Hour))
			r.ExpiresAt, r.LastUsedAt = 0, now.UnixMilli()
			return r
		}(), node: live, orphan: "expired"},
		{name: "no heartbeat ever, used lately", rec: farRecord("s", "n", now.Add(-30*time.Minute))},
		{name: "no heartbeat ever, unused past idle_ttl+orphan_after", rec: farRecord("s", "n", now.Add(-36*time.Minute)), orphan: "never wrote a heartbeat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := m.orphanReason(tt.rec, tt.node, now)
			if (got == "") != (tt.orphan == "") || !strings.Contains(got, tt.orphan) {
				t.Fatalf("reason %q, want %q", got, tt.orphan)
			}
		})
	}
}

func TestBeatKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ node, key string }{
		{"n1", "node.n1"},
		{"host-1.example.com", "node.host-1.example.com"},
		{"a_b", "node.a_b"},
		{"my node", "node.=6d79206e6f6465"},
		{".x", "node.=2e78"},
		{"x.", "node.=782e"},
		{"a..b", "node.=612e2e62"},
		{"=x", "node.=3d78"},
		{"é", "node.=c3a9"},
	}
	for _, tt := range tests {
		if got := beatKey(tt.node); got != tt.key {
			t.Errorf("beatKey(%q) = %q, want %q", tt.node, got, tt.key)
		}
	}
	// Any node name makes a key the bucket takes.
	f := newFixture(t, WithNode("a node / with ü"))
	ent, err := f.kv.Get(context.Background(), beatKey("a node / with ü"))
	if err != nil {
		t.Fatal(err)
	}
	var b nodeBeat
	if err := json.Unmarshal(ent.Value(), &b); err != nil || b.Node != "a node / with ü" || b.At == 0 {
		t.Fatalf("heartbeat %s: %v", ent.Value(), err)
	}
}

// Calls for a record of another node: answered as that node's while it
// lives; once it is an orphan, exec is not_found (ErrOrphan), destroy
// deletes the record and create replaces it with a sandbox here.
func TestOrphanCalls(t *testing.T) {
	t.Parallel()
	// The clock runs an hour ahead of the server, so the heartbeats
	// written here count by the times they carry.
	c := &clock{t: time.Now().Add(time.Hour)}
	f := newFixture(t, WithClock(c.now))
	ctx := context.Background()
	now := c.now()
	tests := []struct {
		name   string
		beat   time.Duration // age of the node's heartbeat; 0: none
		rec    func(sid string) Sandbox
		orphan bool
	}{
		{name: "live", beat: time.Minute, rec: func(sid string) Sandbox { return farRecord(sid, "live", now.Add(-time.Hour)) }},
		{name: "gone", beat: 10 * time.Minute, rec: func(sid string) Sandbox { return farRecord(sid, "gone", now.Add(-time.Hour)) }, orphan: true},
		{name: "expired", beat: time.Minute, rec: func(sid string) Sandbox {
			r := farRecord(sid, "expired", now.Add(-time.Hour))
			r.ExpiresAt = now.Add(-10 * time.Minute).UnixMilli()
			return r
		}, orphan: true},
		{name: "silent-idle", rec: func(sid string) Sandbox { return farRecord(sid, "silent-idle", now.Add(-2*time.Hour)) }, orphan: true},
		{name: "silent-used", rec: func(sid string) Sandbox { return farRecord(sid, "silent-used", now.Add(-time.Minute)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.beat > 0 {
				putBeat(t, f.kv, tt.name, now.Add(-tt.beat))
			}
			// exec and destroy
			x := tt.rec(tt.name + "-x")
			putRecord(t, f.kv, x)
			_, err := f.execErr(x.SandboxID, Command{Command: "true"})
			_, werr := f.w.Workdir(ctx, x.SessionID)
			destroyed, derr := f.m.destroy(ctx, DestroyRequest{SessionID: x.SessionID})
			_, gerr := f.kv.Get(ctx, recordKey(x.SessionID))
			if tt.orphan {
				wantCode(t, err, wire.CodeNotFound)
				if !strings.Contains(err.Error(), "it was on node "+tt.name) || !strings.Contains(err.Error(), "sandbox::create gives the session a new one") {
					t.Fatalf("exec: %v", err)
				}
				if !errors.Is(werr, ErrOrphan) || !errors.Is(werr, ErrNoSandbox) || !errors.Is(werr, wire.ErrNotFound) {
					t.Fatalf("Workdir: %v", werr)
				}
				if derr != nil || !destroyed.Destroyed || !errors.Is(gerr, jetstream.ErrKeyNotFound) {
					t.Fatalf("destroy %+v %v; record %v", destroyed, derr, gerr)
				}
			} else {
				wantCode(t, err, wire.CodeUnavailable)
				if !errors.Is(werr, ErrOtherNode) {
					t.Fatalf("Workdir: %v", werr)
				}
				wantCode(t, derr, wire.CodeUnavailable)
				if gerr != nil {
					t.Fatalf("record after destroy: %v", gerr)
				}
			}
			// create
			cr := tt.rec(tt.name + "-c")
			putRecord(t, f.kv, cr)
			got := f.create(t, CreateRequest{SessionID: cr.SessionID})
			if tt.orphan {
				if got.Node != "test-node" || got.SandboxID == cr.SandboxID || !exists(got.Workdir) || got.ExpiresAt != got.CreatedAt+DefaultMaxAge.Milliseconds() {
					t.Fatalf("create answered %+v", got)
				}
				if r := f.exec(t, got.SandboxID, Command{Command: "echo here"}); r.Stdout != "here\n" {
					t.Fatalf("exec in the new sandbox: %+v", r)
				}
			} else if got.SandboxID != cr.SandboxID || got.Node != tt.name {
				t.Fatalf("create answered %+v", got)
			}
		})
	}
}

// Two sandbox workers, on nodes a and b: b never takes a's sandbox while
// a lives, even past orphan_after; once a is gone for orphan_after, b
// answers its sandbox not_found and a create on b replaces it. When a
// comes back it neither adopts the old record nor touches b's, and its
// reaper removes the old workdir.
func TestGoneNodeTakeOver(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ctx := context.Background()
	homeA := reachableHome(t)
	a := startOn(t, ns, enginetest.NewEngine(t, ns), homeA, WithNode("a"), WithOrphanAfter(time.Second))
	b := startOn(t, ns, enginetest.NewEngine(t, ns), reachableHome(t), WithNode("b"), WithOrphanAfter(time.Second))

	old, err := a.m.create(ctx, CreateRequest{SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old.Workdir, "work.txt"), []byte("a's work"), 0o644); err != nil {
		t.Fatal(err)
	}
	// a lives: its heartbeat goes on, longer than orphan_after.
	time.Sleep(1500 * time.Millisecond)
	if got, err := b.m.create(ctx, CreateRequest{SessionID: "s"}); err != nil || got.SandboxID != old.SandboxID {
		t.Fatalf("b's create while a lives: %+v %v", got, err)
	}
	if _, err := b.m.resolve(ctx, old.SandboxID, ""); !errors.Is(err, ErrOtherNode) {
		t.Fatalf("b's exec while a lives: %v", err)
	}
	if _, err := b.m.destroy(ctx, DestroyRequest{SessionID: "s"}); !errors.Is(err, ErrOtherNode) {
		t.Fatalf("b's destroy while a lives: %v", err)
	}
	if st, err := b.m.reap(ctx); err != nil || st.OrphanRecords != 0 {
		t.Fatalf("b's reaper while a lives: %+v %v", st, err)
	}
	if r, err := a.m.exec(ctx, a.m.live[old.SandboxID], Command{Command: "cat work.txt"}); err != nil || r.Stdout != "a's work" {
		t.Fatalf("a's exec: %+v %v", r, err)
	}

	// a stops (a container gone for good); its record stays.
	if err := a.w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		_, err := b.m.resolve(ctx, old.SandboxID, "")
		if !errors.Is(err, ErrOrphan) {
			return fmt.Errorf("b's exec: %v", err)
		}
		return nil
	})
	_, err = b.m.resolve(ctx, "", "s")
	wantCode(t, err, wire.CodeNotFound)
	if !strings.Contains(err.Error(), "it was on node a, gone since") {
		t.Fatalf("b's shell::exec: %v", err)
	}
	sb, err := b.m.create(ctx, CreateRequest{SessionID: "s"})
	if err != nil || sb.Node != "b" || sb.SandboxID == old.SandboxID {
		t.Fatalf("b's create after a is gone: %+v %v", sb, err)
	}
	lv, err := b.m.resolve(ctx, "", "s")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := b.m.exec(ctx, lv, Command{Command: "echo b > f && cat f"}); err != nil || r.Stdout != "b\n" {
		t.Fatalf("b's exec: %+v %v", r, err)
	}

	// a comes back with its old home and name.
	a2 := startOn(t, ns, a.e, homeA, WithNode("a"), WithOrphanAfter(time.Second))
	if exists(old.Workdir) {
		t.Fatal("a kept the workdir of its taken-over sandbox")
	}
	if _, err := a2.m.resolve(ctx, "", "s"); !errors.Is(err, ErrOtherNode) {
		t.Fatalf("a's exec after coming back: %v", err)
	}
	rec, _, ok, err := getRecord(ctx, b.kv, "s")
	if err != nil || !ok || rec.SandboxID != sb.SandboxID {
		t.Fatalf("record after a came back: %+v %v %v", rec, ok, err)
	}
	if r, err := b.m.exec(ctx, lv, Command{Command: "cat f"}); err != nil || r.Stdout != "b\n" {
		t.Fatalf("b's exec after a came back: %+v %v", r, err)
	}
}

// Nodes racing to replace one orphan agree on one new sandbox: the
// record's delete is revision-checked and the create that follows is a
// KV Create.
func TestOrphanTakeOverRace(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ctx := context.Background()
	nodes := []*fixture{
		startOn(t, ns, enginetest.NewEngine(t, ns), reachableHome(t), WithNode("b")),
		startOn(t, ns, enginetest.NewEngine(t, ns), reachableHome(t), WithNode("c")),
	}
	for i := range 5 {
		sid := fmt.Sprintf("race%d", i)
		rec := farRecord(sid, "gone", time.Now().Add(-48*time.Hour)) // expired
		putRecord(t, nodes[0].kv, rec)
		got := make([]Sandbox, len(nodes))
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		for j, n := range nodes {
			wg.Go(func() { got[j], errs[j] = n.m.create(ctx, CreateRequest{SessionID: sid}) })
		}
		wg.Wait()
		for j := range nodes {
			if errs[j] != nil {
				t.Fatalf("%s: node %d: %v", sid, j, errs[j])
			}
		}
		if got[0].SandboxID != got[1].SandboxID || got[0].SandboxID == rec.SandboxID {
			t.Fatalf("%s: the nodes answered %s and %s", sid, got[0].SandboxID, got[1].SandboxID)
		}
		made := 0
		for _, n := range nodes {
			if _, err := os.Stat(filepath.Join(n.root, got[0].SandboxID)); err == nil {
				made++
			}
			n.m.mu.Lock()
			if lv := n.m.bySession[sid]; lv != nil && lv.rec.SandboxID != got[0].SandboxID {
				t.Errorf("%s: a second sandbox %s is live", sid, lv.rec.SandboxID)
			}
			n.m.mu.Unlock()
		}
		if made != 1 {
			t.Fatalf("%s: %d workdirs", sid, made)
		}
	}
}

// The reaper of any node deletes other nodes' orphan records (and the
// heartbeats of gone nodes that hold none), and leaves live nodes' alone.
func TestReapSweepsOrphans(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Now().Add(time.Hour)}
	f := newFixture(t, WithClock(c.now))
	ctx := context.Background()
	now := c.now()
	putBeat(t, f.kv, "live", now.Add(-time.Minute))
	putBeat(t, f.kv, "gone", now.Add(-time.Hour))
	putBeat(t, f.kv, "gone-long", now.Add(-48*time.Hour))
	putRecord(t, f.kv, farRecord("l1", "live", now.Add(-time.Hour)))
	putRecord(t, f.kv, farRecord("g1", "gone", now.Add(-time.Hour)))
	putRecord(t, f.kv, farRecord("g2", "gone", now.Add(-time.Hour)))
	own := f.create(t, CreateRequest{SessionID: "own"})

	st, err := f.m.reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.OrphanRecords != 2 || st.GoneNodes != 2 || st.Lost != 0 {
		t.Fatalf("stats %+v", st)
	}
	for key, want := range map[string]bool{
		recordKey("l1"): true, recordKey("g1"): false, recordKey("g2"): false, recordKey("own"): true,
		beatKey("live"): true, beatKey("gone-long"): false, beatKey("gone"): false, beatKey("test-node"): true,
	} {
		if _, err := f.kv.Get(ctx, key); (err == nil) != want {
			t.Errorf("%s: %v, want kept %v", key, err, want)
		}
	}
	if st, err := f.m.reap(ctx); err != nil || !st.zero() {
		t.Fatalf("second run: %+v %v", st, err)
	}
	if r := f.exec(t, own.SandboxID, Command{Command: "true"}); r.ExitCode != 0 {
		t.Fatalf("own sandbox after the sweep: %+v", r)
	}
}

// A live sandbox whose record another node took over (this node was
// thought gone: a pause longer than orphan_after) is dropped by the
// reaper, and the new record stays. Before, dropping or reaping it
// deleted whatever record the session had.
func TestReapDropsTakenOver(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	sb := f.create(t, CreateRequest{SessionID: "t"})
	putBeat(t, f.kv, "b", time.Now())
	next := farRecord("t", "b", time.Now())
	next.SandboxID = "t_0123456789"
	putRecord(t, f.kv, next)

	st, err := f.m.reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lost != 1 || exists(sb.Workdir) {
		t.Fatalf("stats %+v; workdir kept %v", st, exists(sb.Workdir))
	}
	rec, _, ok, err := getRecord(ctx, f.kv, "t")
	if err != nil || !ok || rec.SandboxID != next.SandboxID {
		t.Fatalf("the new record: %+v %v %v", rec, ok, err)
	}
	_, err = f.execErr(sb.SandboxID, Command{Command: "true"})
	wantCode(t, err, wire.CodeNotFound)
}

// Adopting a record claims it by revision: a record taken over after it
// was read is not adopted, and a takeover that read it before the claim
// fails.
func TestAdoptClaims(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	mk := func(sid string) (Sandbox, uint64) {
		id := sid + "_0123456789"
		rec := Sandbox{SandboxID: id, SessionID: sid, Node: "test-node", Workdir: filepath.Join(f.root, id), Isolation: IsolationBwrap,
			Limits: DefaultLimits, CreatedAt: time.Now().UnixMilli(), LastUsedAt: time.Now().UnixMilli()}
		if err := os.Mkdir(rec.Workdir, 0o700); err != nil {
			t.Fatal(err)
		}
		return rec, putRecord(t, f.kv, rec)
	}
	adopt := func(rec Sandbox, rev uint64) *liveSandbox {
		f.m.lifecycle.Lock()
		defer f.m.lifecycle.Unlock()
		lv, err := f.m.adopt(ctx, rec, rev)
		if err != nil {
			t.Fatal(err)
		}
		return lv
	}

	// Taken over between the read and the adoption.
	rec, rev := mk("late")
	if deleted, err := f.m.takeOver(ctx, rec, rev, "test"); err != nil || !deleted {
		t.Fatalf("takeover: %v %v", deleted, err)
	}
	next := farRecord("late", "b", time.Now())
	putRecord(t, f.kv, next)
	if lv := adopt(rec, rev); lv != nil {
		t.Fatal("adopted a record taken over")
	}
	if got, _, _, _ := getRecord(ctx, f.kv, "late"); got.SandboxID != next.SandboxID {
		t.Fatalf("record %+v", got)
	}

	// Adopted first: a takeover with the revision it read fails.
	rec, rev = mk("first")
	lv := adopt(rec, rev)
	if lv == nil || lv.rev == rev {
		t.Fatalf("not claimed: %+v", lv)
	}
	if lv.rec.ExpiresAt != rec.CreatedAt+DefaultMaxAge.Milliseconds() {
		t.Fatalf("expiry %d", lv.rec.ExpiresAt)
	}
	if deleted, err := f.m.takeOver(ctx, rec, rev, "test"); err != nil || deleted {
		t.Fatalf("takeover after the claim: %v %v", deleted, err)
	}
	if got, _, ok, _ := getRecord(ctx, f.kv, "first"); !ok || got.SandboxID != rec.SandboxID {
		t.Fatalf("record %+v", got)
	}
}

// Adopting a workdir after a restart removes the temporary files of fs
// writes a kill -9 cut short, once they are old enough, and nothing else.
func TestAdoptSweepsTempFiles(t *testing.T) {
	t.Parallel()
	home := reachableHome(t)
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	w1 := NewWorker(testOptions(home)...)
	if err := w1.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	sb, err := w1.m.create(ctx, CreateRequest{SessionID: "tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Minute)
	files := []struct {
		rel  string
		old  bool
		gone bool
	}{
		{rel: ".main.go.fstool-ABCDEFGH2345.tmp", old: true, gone: true},
		{rel: "src/deep/.x.fstool-ZZZZZZZZZZZZ.tmp", old: true, gone: true},
		{rel: ".fresh.fstool-ABCDEFGH2345.tmp", old: false},              // a write may be in progress
		{rel: ".main.go.fstool-abcdefgh2345.tmp", old: true},             // not the pattern
		{rel: "main.go.fstool-ABCDEFGH2345.tmp", old: true},              // no leading dot
		{rel: ".main.go.fstool-ABCDEFGH2345.tmp.keep", old: true},        // not the pattern
		{rel: "notes.tmp", old: true},                                    // the user's
		{rel: "src/deep/.fstool-ABCDEFGH2345.tmp", old: true},            // no name before the infix
		{rel: "main.go", old: true},                                      // the user's
		{rel: "src/.y.fstool-ABCDEFGH2345.tmp/inner", old: true},         // a folder named like one
		{rel: "src/deep/.z.fstool-ABCDEFGHIJKLM.tmp", old: true},         // 13 characters
		{rel: "src/deep/.w.fstool-ABCDEFGHIJ1L.tmp", old: true},          // '1' is no base32
		{rel: ".big.bin.fstool-QQQQQQQQQQQQ.tmp", old: true, gone: true}, // counted toward disk_mb
		{rel: "src/.main.go.fstool-ABCDEFGH2345.tmp", old: false, gone: false},
	}
	for _, fl := range files {
		p := filepath.Join(sb.Workdir, fl.rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if fl.old {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Chtimes(filepath.Join(sb.Workdir, "src/.y.fstool-ABCDEFGH2345.tmp"), old, old); err != nil {
		t.Fatal(err)
	}
	// A symlink named like one, to a file outside: neither followed nor
	// removed.
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(sb.Workdir, ".l.fstool-ABCDEFGH2345.tmp")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}

	f := startOn(t, ns, e, home)
	if got := f.create(t, CreateRequest{SessionID: "tmp"}); got.SandboxID != sb.SandboxID {
		t.Fatalf("not adopted: %+v", got)
	}
	for _, fl := range files {
		if got := exists(filepath.Join(sb.Workdir, fl.rel)); got == fl.gone {
			t.Errorf("%s: exists %v, want %v", fl.rel, got, !fl.gone)
		}
	}
	if !exists(link) || !exists(outside) {
		t.Errorf("symlink %v, its target %v", exists(link), exists(outside))
	}
}
