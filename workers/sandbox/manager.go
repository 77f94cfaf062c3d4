package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/internal/answer"
)

// manager owns this node's sandboxes: their records, workdirs, cgroups
// and running execs.
type manager struct {
	o         options
	kv        jetstream.KeyValue
	logger    *slog.Logger
	cg        *cgroupHost
	layout    []mount
	isolation string // IsolationBwrap, or IsolationNone when bwrap does not work
	whyNone   string // why bwrap does not work
	// cred is who runs bubblewrap: the unprivileged host user when the
	// node is root and that works (nil: the node's own user).
	cred *syscall.Credential
	// ownerUID and ownerGID must own the files of this node's isolated
	// sandboxes: the sandbox's user on the host (-1 when the node is not
	// root and cannot give files away).
	ownerUID, ownerGID int

	// lifecycle serializes create, destroy, adopt and reap, so the reaper
	// never sees a half-created sandbox and two creates of one session on
	// this node never race.
	lifecycle sync.Mutex

	// started is when this run of the worker started (in heartbeats).
	started time.Time
	// host is this machine's host name (in heartbeats).
	host string

	mu        sync.Mutex
	live      map[string]*liveSandbox // by sandbox id
	bySession map[string]*liveSandbox
	seq       atomic.Uint64 // exec numbers, for cgroup leaves
}

// liveSandbox is a sandbox of this node, in memory.
type liveSandbox struct {
	cg *sandboxCgroup // nil without cgroups

	mu          sync.Mutex
	rec         Sandbox
	rev         uint64
	destroying  bool
	active      int
	cancels     map[uint64]context.CancelCauseFunc
	wg          sync.WaitGroup
	lastUsed    time.Time
	lastTouched time.Time
	overQuota   bool
}

func (lv *liveSandbox) snapshot() Sandbox {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	rec := lv.rec
	rec.Enforced = slices.Clone(rec.Enforced)
	if ms := lv.lastUsed.UnixMilli(); ms > rec.LastUsedAt {
		rec.LastUsedAt = ms
	}
	return rec
}

func newManager(o options, kv jetstream.KeyValue, logger *slog.Logger) *manager {
	host, _ := os.Hostname()
	return &manager{
		host:      host,
		ownerUID:  -1,
		ownerGID:  -1,
		o:         o,
		kv:        kv,
		logger:    logger,
		layout:    hostLayout(),
		started:   time.Now(),
		live:      map[string]*liveSandbox{},
		bySession: map[string]*liveSandbox{},
	}
}

// setup prepares the node: the root folder, cgroups, the bubblewrap
// probe. It logs loudly what is not enforced.
func (m *manager) setup(ctx context.Context) error {
	m.cg = &cgroupHost{} // until openCgroups: nothing to remove on failure
	// Missing parents are made 0711: the unprivileged host user must pass
	// through them to reach the workdirs (it cannot list them).
	if err := os.MkdirAll(filepath.Dir(m.o.root), 0o711); err != nil {
		return fmt.Errorf("sandbox: create root %s: %w", m.o.root, err)
	}
	if err := os.Mkdir(m.o.root, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sandbox: create root %s: %w", m.o.root, err)
	}
	// 0700, or 0711 when bubblewrap runs as the unprivileged host user: it
	// must reach the workdirs to bind them (they are its own, 0700, with
	// unguessable names; it cannot list the root).
	if err := os.Chmod(m.o.root, 0o700); err != nil {
		return fmt.Errorf("sandbox: chmod root %s: %w", m.o.root, err)
	}
	m.cg = openCgroups(m.o.cgroupRoot, groupName(m.o.root))
	if m.cg.why != "" {
		m.logger.Warn("sandbox limits fall back to rlimits", slog.String("reason", m.cg.why),
			slog.Bool("cgroup_pids", m.cg.hasPids), slog.Bool("cgroup_memory", m.cg.hasMemory))
	}
	m.isolation, m.whyNone = IsolationBwrap, ""
	var why string
	if os.Geteuid() == 0 && m.o.hostUID > 0 {
		// The sandbox's user should be an unprivileged host user: were it
		// root (bubblewrap run by root), it would pass every file
		// permission check the kernel makes against root-owned files.
		cred := &syscall.Credential{Uid: uint32(m.o.hostUID), Gid: uint32(m.o.hostGID), Groups: []uint32{}}
		whyUser := ""
		if err := os.Chmod(m.o.root, 0o711); err != nil {
			whyUser = err.Error()
		} else {
			whyUser = m.probe(ctx, cred)
		}
		if whyUser == "" {
			m.cred = cred
		} else if err := os.Chmod(m.o.root, 0o700); err != nil {
			return fmt.Errorf("sandbox: chmod root %s: %w", m.o.root, err)
		} else if why = m.probe(ctx, nil); why == "" {
			m.logger.Warn("sandbox: bubblewrap cannot run as the unprivileged host user, running it as root: the sandbox's user is root for file permission checks (weaker); make the root folder reachable for that user (o+x on its parents) and allow unprivileged user namespaces",
				slog.Int("host_uid", m.o.hostUID), slog.String("reason", whyUser))
		}
	} else {
		why = m.probe(ctx, nil)
	}
	switch {
	case os.Geteuid() != 0:
	case m.cred != nil:
		m.ownerUID, m.ownerGID = int(m.cred.Uid), int(m.cred.Gid)
	default:
		m.ownerUID, m.ownerGID = 0, 0
	}
	if why != "" {
		m.isolation, m.whyNone = IsolationNone, why
		if m.o.allowUnsandboxed {
			m.logger.Warn("sandbox: bubblewrap does not work, commands run WITHOUT isolation (allow_unsandboxed=true)", slog.String("reason", why))
		} else {
			m.logger.Warn("sandbox: bubblewrap does not work, sandbox::create and exec are refused until it does (or allow_unsandboxed=true)", slog.String("reason", why))
		}
	}
	hostUID := -1
	if m.cred != nil {
		hostUID = int(m.cred.Uid)
	}
	m.logger.Info("sandbox ready", slog.String("node", m.o.node), slog.String("root", m.o.root),
		slog.String("isolation", m.isolation), slog.Int("host_uid", hostUID), slog.Any("enforced", m.enforcedList()))
	return nil
}

// probe runs `true` in a sandbox built like every other one, as cred (nil:
// the node's user), and returns why that failed, or "".
func (m *manager) probe(ctx context.Context, cred *syscall.Credential) string {
	if _, err := os.Stat(m.o.bwrap); err != nil {
		return fmt.Sprintf("bubblewrap not found at %s (setting %s): %v", m.o.bwrap, SettingBwrap, err)
	}
	dir := filepath.Join(m.o.root, ".probe")
	_ = os.RemoveAll(dir)
	rootMode := os.FileMode(0o700)
	if cred != nil {
		rootMode = 0o711
	}
	if err := m.mkdirIn(dir, rootMode); err != nil {
		return fmt.Sprintf("create %s: %v", dir, err)
	}
	defer os.RemoveAll(dir)
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Sprintf("chown %s: %v", dir, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	args := bwrapArgs(bwrapSpec{layout: m.layout, workdir: dir, uid: m.o.uid, gid: m.o.gid, tmpBytes: 1 << 20, env: baseEnv(dir), argv: []string{"true"}})
	cmd := exec.CommandContext(ctx, m.o.bwrap, args...)
	cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = sysProcAttr(-1, cred)
	if b, err := cmd.CombinedOutput(); err != nil {
		why := fmt.Sprintf("%s does not run a sandbox here: %v: %s", m.o.bwrap, err, strings.TrimSpace(string(b)))
		if cred != nil {
			why += fmt.Sprintf(" (as host uid %d, which needs unprivileged user namespaces and search permission on every parent of %s)", cred.Uid, m.o.root)
		}
		return why
	}
	return ""
}

// fixOwner gives a bubblewrap sandbox's workdir, and everything in it,
// to the sandbox's user on the host (a no-op when the node is not root).
func (m *manager) fixOwner(dir string) {
	if m.ownerUID >= 0 {
		scanWorkdir(dir, m.ownerUID, m.ownerGID)
	}
}

// fileOwner is who owns the files of this node's isolated sandboxes on
// the host; -1, -1 when that is the node's own user.
func (m *manager) fileOwner() (uid, gid int) { return m.ownerUID, m.ownerGID }

// enforcedList names what enforces the limits of a new sandbox here.
func (m *manager) enforcedList() []string {
	var e []string
	if m.cg.hasPids {
		e = append(e, "cgroup:pids")
	}
	if m.cg.hasMemory {
		e = append(e, "cgroup:memory")
	} else {
		e = append(e, "rlimit:as")
	}
	return append(e, "rlimit:cpu", "rlimit:fsize", "quota:disk", "timeout:wall")
}

// usable answers unavailable when this node refuses to run commands.
func (m *manager) usable() error {
	if m.isolation == IsolationNone && !m.o.allowUnsandboxed {
		return wire.Wrap(wire.CodeUnavailable, fmt.Errorf("%w on node %s: %s; install bubblewrap (Debian: apt-get install bubblewrap) or set the sandbox setting %s=true to run commands without isolation",
			ErrNoIsolation, m.o.node, m.whyNone, SettingAllowUnsandboxed), "")
	}
	return nil
}

// workdirOf is where sandbox id's workdir lives on this node.
func (m *manager) workdirOf(id string) string { return filepath.Join(m.o.root, id) }

// ownsWorkdir reports whether rec's workdir is where this node keeps
// sandbox rec's files, the only folder it will ever delete for it.
func (m *manager) ownsWorkdir(rec Sandbox) bool { return rec.Workdir == m.workdirOf(rec.SandboxID) }

// create returns the session's sandbox, creating it when it has none.
func (m *manager) create(ctx context.Context, req CreateRequest) (Sandbox, error) {
	if err := m.usable(); err != nil {
		return Sandbox{}, err
	}
	lim, err := req.Limits.resolve(m.o.defaults, m.o.max)
	if err != nil {
		return Sandbox{}, invalid(err)
	}
	sid := req.SessionID
	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	m.mu.Lock()
	lv := m.bySession[sid]
	m.mu.Unlock()
	if lv != nil {
		return lv.snapshot(), nil
	}
	if existing, ok, err := m.current(ctx, sid); ok || err != nil {
		return existing, err
	}
	now := m.o.now()
	id := newSandboxID(sid)
	rec := Sandbox{
		SandboxID: id, SessionID: sid, Node: m.o.node, Workdir: m.workdirOf(id),
		Isolation: m.isolation, Network: req.Network, Limits: lim, Enforced: m.enforcedList(),
		CreatedAt: now.UnixMilli(), LastUsedAt: now.UnixMilli(), ExpiresAt: now.Add(m.o.maxAge).UnixMilli(),
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return Sandbox{}, wire.Wrap(wire.CodeInternal, err, "encode record")
	}
	rev, err := m.kv.Create(ctx, recordKey(sid), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		// Another node won the race: its sandbox is the session's.
		rec, rev, ok, err := getRecord(ctx, m.kv, sid)
		if err != nil && !errors.Is(err, ErrBadRecord) {
			return Sandbox{}, kvErr(err)
		}
		if !ok {
			// Gone again, or a record that does not decode written
			// meanwhile: a retry replaces it.
			return Sandbox{}, wire.Errorf(wire.CodeConflict, "the sandbox of session %s is being created and destroyed concurrently; retry", sid)
		}
		existing, _, err := m.existing(ctx, rec, rev)
		return existing, err
	}
	if err != nil {
		return Sandbox{}, kvErr(err)
	}
	if _, err := m.provision(rec, rev); err != nil {
		// Take the record back even when the caller gave up meanwhile: a
		// record left without its workdir shows in sandbox::list until
		// the session's next call finds it stale.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if derr := m.kv.Delete(dctx, recordKey(sid), jetstream.LastRevision(rev)); derr != nil && !errors.Is(derr, jetstream.ErrKeyNotFound) {
			m.logger.Warn("sandbox record of a failed create not deleted; the session's next call deletes it", slog.String("sandbox_id", id), slog.Any("error", derr))
		}
		cancel()
		return Sandbox{}, wire.Wrap(wire.CodeInternal, err, "create sandbox for session %s", sid)
	}
	m.logger.Info("sandbox created", slog.String("sandbox_id", id), slog.String("session_id", sid),
		slog.String("isolation", rec.Isolation), slog.Bool("network", rec.Network))
	return rec, nil
}

// current answers a create with the session's sandbox when it has one:
// another live node's as it is, this node's once adopted. ok is false when
// the session has none, or had only a stale record of this node or an
// orphan of another node, now deleted (compare-and-set: of two nodes that
// race to replace an orphan, one deletes it and the KV Create that
// follows picks one winner). The caller holds m.lifecycle.
func (m *manager) current(ctx context.Context, sid string) (Sandbox, bool, error) {
	// Each round either answers or sees the record change (deleted by
	// this call, or claimed or replaced by another node): a few rounds
	// settle any race that is not endless.
	for range 4 {
		rec, rev, ok, err := getRecord(ctx, m.kv, sid)
		if errors.Is(err, ErrBadRecord) {
			// Nothing can reach the sandbox it named: replaced, as an
			// orphan is (the node that made it, if it lives, drops the
			// sandbox at its next sweep: its record is gone).
			if _, err := m.dropBadRecord(ctx, sid, rev, err, "replaced by sandbox::create"); err != nil {
				return Sandbox{}, false, err
			}
			continue
		}
		if err != nil {
			return Sandbox{}, false, kvErr(err)
		}
		if !ok {
			return Sandbox{}, false, nil
		}
		if rec.Node == m.o.node {
			lv, err := m.adopt(ctx, rec, rev)
			if err != nil {
				return Sandbox{}, false, err
			}
			if lv != nil {
				return lv.snapshot(), true, nil
			}
			continue
		}
		why, err := m.orphan(ctx, rec)
		if err != nil {
			return Sandbox{}, false, err
		}
		if why == "" {
			return rec, true, nil
		}
		if _, err := m.takeOver(ctx, rec, rev, why); err != nil {
			return Sandbox{}, false, err
		}
	}
	return Sandbox{}, false, wire.Errorf(wire.CodeConflict, "the sandbox record of session %s keeps changing; retry", sid)
}

// existing answers a create with a record that already exists: another
// node's as it is, this node's once adopted. ok is false when the record
// was stale and is gone.
func (m *manager) existing(ctx context.Context, rec Sandbox, rev uint64) (Sandbox, bool, error) {
	if rec.Node != m.o.node {
		return rec, true, nil
	}
	lv, err := m.adopt(ctx, rec, rev)
	if err != nil || lv == nil {
		return Sandbox{}, false, err
	}
	return lv.snapshot(), true, nil
}

// provision creates the workdir and cgroups of a new record and makes it
// live.
func (m *manager) provision(rec Sandbox, rev uint64) (*liveSandbox, error) {
	// The id is fresh, but a crash may have left a folder of that name.
	if err := removeWorkdir(rec.Workdir); err != nil {
		return nil, err
	}
	if err := m.mkdirIn(rec.Workdir, m.rootMode()); err != nil {
		return nil, err
	}
	if rec.Isolation == IsolationBwrap {
		m.fixOwner(rec.Workdir)
	}
	cg, err := m.cg.ensureSandbox(rec.SandboxID, rec.Limits)
	if err != nil {
		_ = removeWorkdir(rec.Workdir)
		return nil, err
	}
	return m.addLive(rec, rev, cg, false), nil
}

// addLive makes rec live; overQuota says its workdir holds more than
// disk_mb (its next exec is cleanup-only).
func (m *manager) addLive(rec Sandbox, rev uint64, cg *sandboxCgroup, overQuota bool) *liveSandbox {
	used := time.UnixMilli(rec.LastUsedAt)
	lv := &liveSandbox{cg: cg, rec: rec, rev: rev, cancels: map[uint64]context.CancelCauseFunc{}, lastUsed: used, lastTouched: used, overQuota: overQuota}
	m.mu.Lock()
	m.live[rec.SandboxID] = lv
	m.bySession[rec.SessionID] = lv
	m.mu.Unlock()
	return lv
}

// adopt makes a record of this node live again (after a restart): its
// workdir must still be there, under this node's root; its cgroups are
// recreated and whatever a crash left running in them is killed. A
// record whose workdir is gone is stale and deleted; nil, nil then.
// The caller holds m.lifecycle.
func (m *manager) adopt(ctx context.Context, rec Sandbox, rev uint64) (*liveSandbox, error) {
	m.mu.Lock()
	lv := m.live[rec.SandboxID]
	m.mu.Unlock()
	if lv != nil {
		return lv, nil
	}
	fi, err := os.Stat(rec.Workdir)
	if !m.ownsWorkdir(rec) || err != nil || !fi.IsDir() {
		m.logger.Warn("sandbox record is stale, deleting it", slog.String("sandbox_id", rec.SandboxID),
			slog.String("workdir", rec.Workdir), slog.String("root", m.o.root))
		m.cg.removeOrphan(rec.SandboxID)
		err := m.kv.Delete(ctx, recordKey(rec.SessionID), jetstream.LastRevision(rev))
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return nil, kvErr(err)
		}
		return nil, nil
	}
	// Claim the record before using it: a compare-and-set rewrite, with
	// the expiry this node's max_age gives it. Another node that took it
	// over as an orphan meanwhile has deleted it (the claim fails: this
	// node must not use it, and the reaper removes the workdir), and one
	// that tries after the claim fails on the revision, reads the record
	// again and finds this node's fresh heartbeat.
	rec.ExpiresAt = m.expiresAtOwn(rec)
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode record")
	}
	rev, err = m.kv.Update(ctx, recordKey(rec.SessionID), data, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		m.logger.Info("sandbox record changed before it was adopted, leaving it", slog.String("sandbox_id", rec.SandboxID))
		return nil, nil
	}
	if err != nil {
		return nil, kvErr(err)
	}
	var used int64
	if rec.Isolation == IsolationBwrap {
		// Created when bubblewrap ran as another user (an older run, or
		// one that fell back to root): its files become this run's
		// user's. The same walk removes the temporary files of fs tool
		// writes a crash cut short, and measures the workdir: one over
		// disk_mb makes the next exec cleanup-only, as it would have
		// before the restart.
		used = m.sweepWorkdir(rec.Workdir, m.ownerUID, m.ownerGID)
	} else {
		used = m.sweepWorkdir(rec.Workdir, -1, -1)
	}
	cg, err := m.cg.ensureSandbox(rec.SandboxID, rec.Limits)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "adopt sandbox %s", rec.SandboxID)
	}
	if cg != nil {
		for _, d := range cg.dirs {
			entries, _ := os.ReadDir(d)
			for _, ent := range entries {
				if ent.IsDir() {
					removeCgroupTree(filepath.Join(d, ent.Name()))
				}
			}
		}
	}
	return m.addLive(rec, rev, cg, used > int64(rec.Limits.DiskMB)<<20), nil
}

// resolve finds the live sandbox of an exec: by sandbox id, or (id "") by
// session. It answers not_found (wrapping ErrNoSandbox) when there is
// none and unavailable (wrapping ErrOtherNode) when it lives elsewhere.
func (m *manager) resolve(ctx context.Context, id, sid string) (*liveSandbox, error) {
	if id != "" {
		var err error
		if sid, err = parseSandboxID(id); err != nil {
			return nil, invalid(err)
		}
	}
	m.mu.Lock()
	var lv *liveSandbox
	if id != "" {
		lv = m.live[id]
	} else {
		lv = m.bySession[sid]
	}
	m.mu.Unlock()
	if lv != nil {
		return lv, nil
	}
	noSandbox := func() error {
		if id != "" {
			return wire.Wrap(wire.CodeNotFound, fmt.Errorf("%w %s", ErrNoSandbox, id), "")
		}
		return wire.Wrap(wire.CodeNotFound, fmt.Errorf("%w for session %s: start the run with sandbox:true", ErrNoSandbox, sid), "")
	}
	rec, rev, ok, err := getRecord(ctx, m.kv, sid)
	if err != nil {
		return nil, kvErr(err)
	}
	if !ok || (id != "" && rec.SandboxID != id) {
		return nil, noSandbox()
	}
	if rec.Node != m.o.node {
		return nil, m.otherNode(ctx, rec)
	}
	// This node's record but not live (a create or destroy in progress,
	// or a record this run never loaded): look again under the lifecycle
	// lock, then adopt.
	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	m.mu.Lock()
	lv = m.bySession[sid]
	m.mu.Unlock()
	if lv != nil && (id == "" || lv.rec.SandboxID == id) {
		return lv, nil
	}
	rec, rev, ok, err = getRecord(ctx, m.kv, sid)
	if err != nil {
		return nil, kvErr(err)
	}
	if !ok || (id != "" && rec.SandboxID != id) {
		return nil, noSandbox()
	}
	if rec.Node != m.o.node {
		return nil, m.otherNode(ctx, rec)
	}
	lv, err = m.adopt(ctx, rec, rev)
	if err != nil {
		return nil, err
	}
	if lv == nil {
		return nil, noSandbox()
	}
	return lv, nil
}

func otherNode(rec Sandbox) error {
	return wire.Wrap(wire.CodeUnavailable, fmt.Errorf("%w: sandbox %s lives on node %s (sandboxes are node-local: call a sandbox worker on that node)",
		ErrOtherNode, rec.SandboxID, rec.Node), "")
}

// replyMargin bounds the time kept to answer before a caller's deadline.
const replyMargin = 250 * time.Millisecond

// exec runs cmd in lv.
func (m *manager) exec(ctx context.Context, lv *liveSandbox, cmd Command) (Result, error) {
	rec := lv.snapshot()
	if rec.Isolation == IsolationBwrap && m.isolation != IsolationBwrap {
		return Result{}, wire.Wrap(wire.CodeUnavailable, fmt.Errorf("%w on node %s: %s; sandbox %s was created isolated and will not run without isolation",
			ErrNoIsolation, m.o.node, m.whyNone, rec.SandboxID), "")
	}
	if err := m.usable(); err != nil {
		return Result{}, err
	}
	timeout := rec.Limits.Wall()
	if cmd.TimeoutMs > 0 {
		if cmd.TimeoutMs > rec.Limits.WallMs {
			return Result{}, wire.Errorf(wire.CodeInvalidPayload, "timeout_ms %d exceeds the sandbox's wall_ms %d", cmd.TimeoutMs, rec.Limits.WallMs)
		}
		timeout = time.Duration(cmd.TimeoutMs) * time.Millisecond
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		timeout = max(min(timeout, left-min(left/4, replyMargin)), time.Millisecond)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	n := m.seq.Add(1)
	lv.mu.Lock()
	if lv.destroying {
		lv.mu.Unlock()
		return Result{}, wire.Wrap(wire.CodeNotFound, fmt.Errorf("%w %s: it is being destroyed", ErrNoSandbox, rec.SandboxID), "")
	}
	lv.cancels[n] = cancel
	lv.active++
	lv.wg.Add(1)
	over := lv.overQuota
	lv.mu.Unlock()
	defer func() {
		lv.mu.Lock()
		delete(lv.cancels, n)
		lv.active--
		lv.lastUsed = m.o.now()
		lv.mu.Unlock()
		lv.wg.Done()
	}()

	// Over disk_mb (measured again: space may have been freed from
	// outside) the exec still runs, so that it can free space (rm), but
	// cleanup-only: no file may grow (RLIMIT_FSIZE 0). Within it, the
	// quota is watched while the command runs.
	quota := int64(rec.Limits.DiskMB) << 20
	cleanup := false
	if over {
		if scanWorkdir(rec.Workdir, -1, -1) > quota {
			cleanup = true
		} else {
			lv.mu.Lock()
			lv.overQuota = false
			lv.mu.Unlock()
		}
	}
	m.touch(ctx, lv)

	spec := m.runSpec(rec, lv.cg != nil && m.cg.hasMemory, cmd, timeout, cleanup)
	if spec.outer && m.cred != nil {
		// Files the fs tools wrote (as root) become the sandbox user's.
		// Only while no other exec of the sandbox runs (none can start
		// meanwhile: lv.mu), so no sandbox process can swap a folder for
		// a symlink under the walk and have root chown a host file.
		lv.mu.Lock()
		if lv.active == 1 {
			m.fixOwner(rec.Workdir)
		}
		lv.mu.Unlock()
	}
	if lv.cg != nil {
		uid, gid := -1, -1
		if spec.cred != nil {
			uid, gid = int(spec.cred.Uid), int(spec.cred.Gid)
		}
		ecg, err := lv.cg.newExec(n, uid, gid)
		if err != nil {
			return Result{}, wire.Wrap(wire.CodeInternal, err, "")
		}
		defer ecg.remove()
		spec.cg = ecg
		spec.argv = spec.withProcsFiles(ecg.procsFiles())
	}
	stopWatch := func() {}
	if !cleanup {
		overQuota := make(chan struct{})
		spec.stop = overQuota
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { watchQuota(wctx, rec.Workdir, quota, overQuota) })
		stopWatch = func() { cancel(); wg.Wait() }
	}
	oomBefore := lv.cg.oomKills()
	out, err := runProcess(ctx, spec)
	stopWatch()
	if err != nil {
		return Result{}, wire.Wrap(wire.CodeInternal, err, "run command in sandbox %s", rec.SandboxID)
	}
	if out.canceled != nil {
		return Result{}, wire.From(out.canceled)
	}
	stderr := out.stderr.text()
	if isShimFailure(out.exitCode, stderr) {
		return Result{}, wire.Errorf(wire.CodeInternal, "sandbox %s: setting the limits up failed: %s", rec.SandboxID, strings.TrimSpace(stderr))
	}
	res := Result{
		ExitCode: out.exitCode, Signal: out.signal,
		Stdout: out.stdout.text(), Stderr: stderr,
		Truncated:   out.stdout.truncated() || out.stderr.truncated(),
		StdoutBytes: out.stdout.total, StderrBytes: out.stderr.total,
		TimedOut: out.timedOut, OOMKilled: lv.cg.oomKills() > oomBefore || spec.cg.oomKills() > 0,
		CleanupOnly: cleanup, QuotaStopped: out.stopped,
		DurationMs: out.duration.Milliseconds(), Isolation: m.isolation,
	}
	if used := scanWorkdir(rec.Workdir, -1, -1); used > quota {
		res.OverQuota = true
		lv.mu.Lock()
		lv.overQuota = true
		lv.mu.Unlock()
	}
	return res, nil
}

// runSpec builds the process of one exec: the shim, then bubblewrap (as
// the unprivileged host user when there is one) and the command, or the
// command alone without isolation. The exec's cgroup files join the
// shim's arguments with [runSpec.withProcsFiles]. A cleanup-only exec
// (the workdir over disk_mb) may grow no file: RLIMIT_FSIZE 0.
func (m *manager) runSpec(rec Sandbox, memCgroup bool, cmd Command, timeout time.Duration, cleanup bool) runSpec {
	lim := rec.Limits
	sl := shimLimits{cpuSeconds: lim.CPUSeconds, fsizeBytes: int64(lim.DiskMB) << 20}
	if cleanup {
		sl.fsizeBytes = 0
	}
	if !memCgroup {
		sl.vmemBytes = int64(lim.MemoryMB) << 20
	}
	env := mergeEnv(baseEnv(rec.Workdir), cmd.Env)
	s := runSpec{stdin: cmd.Stdin, maxOutput: m.o.maxOutput, timeout: timeout, grace: m.o.killGrace, limits: sl}
	if m.isolation == IsolationBwrap {
		b := bwrapArgs(bwrapSpec{
			layout: m.layout, workdir: rec.Workdir, network: rec.Network, uid: m.o.uid, gid: m.o.gid,
			tmpBytes: int64(lim.MemoryMB) << 20, env: env, argv: cmd.argv(),
		})
		s.program = append([]string{m.o.bwrap}, b...)
		s.argv = shimArgs(sl, nil, s.program)
		// The shim runs on the host: nothing of the request reaches its
		// environment (bubblewrap sets the sandbox's with --setenv).
		s.env, s.dir, s.outer, s.cred = []string{"PATH=/usr/bin:/bin"}, "/", true, m.cred
		return s
	}
	s.program = cmd.argv()
	s.argv = shimArgs(sl, nil, s.program)
	s.env, s.dir = env, rec.Workdir
	return s
}

// touchEvery is how often an exec writes last_used_at to the record.
func (m *manager) touchEvery() time.Duration { return min(time.Minute, m.o.idleTTL/4) }

// touch writes last_used_at when the record's is older than
// [manager.touchEvery], by compare-and-set, so a destroyed record is never
// written back. A failure is logged: the memory copy still counts for the
// reaper.
func (m *manager) touch(ctx context.Context, lv *liveSandbox) {
	now := m.o.now()
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.lastUsed = now
	if now.Sub(lv.lastTouched) < m.touchEvery() {
		return
	}
	rec := lv.rec
	rec.LastUsedAt = now.UnixMilli()
	data, err := json.Marshal(rec)
	if err != nil {
		return
	}
	rev, err := m.kv.Update(ctx, recordKey(rec.SessionID), data, lv.rev)
	if err != nil {
		m.logger.Warn("sandbox last_used_at not written", slog.String("sandbox_id", rec.SandboxID), slog.Any("error", err))
		return
	}
	lv.rec, lv.rev, lv.lastTouched = rec, rev, now
}

// errDestroyed ends the execs of a sandbox that is destroyed.
var errDestroyed = wire.Wrap(wire.CodeNotFound, fmt.Errorf("%w: it was destroyed while the command ran", ErrNoSandbox), "")

// destroy destroys the sandbox named by req, on this node.
func (m *manager) destroy(ctx context.Context, req DestroyRequest) (DestroyResponse, error) {
	sid := req.SessionID
	if req.SandboxID != "" {
		sid, _ = parseSandboxID(req.SandboxID) // validated
	}
	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	m.mu.Lock()
	lv := m.bySession[sid]
	m.mu.Unlock()
	if lv != nil {
		if req.SandboxID != "" && lv.rec.SandboxID != req.SandboxID {
			return DestroyResponse{}, nil
		}
		if err := m.destroyLive(ctx, lv, errDestroyed, "destroyed"); err != nil {
			return DestroyResponse{}, err
		}
		return DestroyResponse{Destroyed: true}, nil
	}
	rec, rev, ok, err := getRecord(ctx, m.kv, sid)
	if errors.Is(err, ErrBadRecord) {
		// Nothing can reach the sandbox it named: the record goes, and
		// the reaper of the node that holds its workdir removes it (no
		// record claims it any more).
		deleted, err := m.dropBadRecord(ctx, sid, rev, err, "deleted by sandbox::destroy")
		if err != nil {
			return DestroyResponse{}, err
		}
		if !deleted {
			return DestroyResponse{}, wire.Errorf(wire.CodeConflict, "the sandbox record of session %s changed while it was destroyed; retry", sid)
		}
		return DestroyResponse{Destroyed: true}, nil
	}
	if err != nil {
		return DestroyResponse{}, kvErr(err)
	}
	if !ok || (req.SandboxID != "" && rec.SandboxID != req.SandboxID) {
		return DestroyResponse{}, nil
	}
	if rec.Node != m.o.node {
		// Another node's: an orphan's record is deleted (its node, should
		// it come back, removes the workdir: no record names it).
		why, err := m.orphan(ctx, rec)
		if err != nil {
			return DestroyResponse{}, err
		}
		if why == "" {
			return DestroyResponse{}, otherNode(rec)
		}
		deleted, err := m.takeOver(ctx, rec, rev, why)
		if err != nil {
			return DestroyResponse{}, err
		}
		if !deleted {
			return DestroyResponse{}, wire.Errorf(wire.CodeConflict, "the sandbox record of session %s changed while it was destroyed; retry", sid)
		}
		return DestroyResponse{Destroyed: true}, nil
	}
	// This node's, but not live: clean up what is left.
	m.cg.removeOrphan(rec.SandboxID)
	if m.ownsWorkdir(rec) {
		if err := removeWorkdir(rec.Workdir); err != nil {
			return DestroyResponse{}, wire.Wrap(wire.CodeInternal, err, "remove workdir of %s", rec.SandboxID)
		}
	}
	if err := m.kv.Delete(ctx, recordKey(sid), jetstream.LastRevision(rev)); err != nil {
		return DestroyResponse{}, kvErr(err)
	}
	return DestroyResponse{Destroyed: true}, nil
}

// destroyLive kills the sandbox's execs and waits for them, removes its
// cgroups and workdir, then its record. A failure before the workdir is
// gone leaves it live but destroying (no new execs), after it not live:
// either way a retry finishes. The caller holds m.lifecycle.
func (m *manager) destroyLive(ctx context.Context, lv *liveSandbox, cause error, why string) error {
	lv.mu.Lock()
	lv.destroying = true
	for _, c := range lv.cancels {
		c(cause)
	}
	rec := lv.rec
	lv.mu.Unlock()
	idle := make(chan struct{})
	go func() {
		lv.wg.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-ctx.Done():
		return wire.Wrap(wire.CodeUnavailable, ctx.Err(), "commands of sandbox %s are still being killed; retry", rec.SandboxID)
	}
	lv.mu.Lock()
	rev := lv.rev
	lv.mu.Unlock()
	lv.cg.remove()
	if m.ownsWorkdir(rec) {
		if err := removeWorkdir(rec.Workdir); err != nil {
			return wire.Wrap(wire.CodeInternal, err, "remove workdir of %s", rec.SandboxID)
		}
	}
	// Out of memory first: if the record's delete fails, a retry finds it
	// not live and cleans up what is left.
	m.mu.Lock()
	delete(m.live, rec.SandboxID)
	if m.bySession[rec.SessionID] == lv {
		delete(m.bySession, rec.SessionID)
	}
	m.mu.Unlock()
	// Only the record this sandbox holds: one that another node wrote
	// after taking this one over as an orphan stays.
	err := m.kv.Delete(ctx, recordKey(rec.SessionID), jetstream.LastRevision(rev))
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
		m.logger.Info("sandbox record already replaced or gone", slog.String("sandbox_id", rec.SandboxID))
	case err != nil:
		return kvErr(err)
	}
	m.logger.Info("sandbox destroyed", slog.String("sandbox_id", rec.SandboxID), slog.String("session_id", rec.SessionID), slog.String("reason", why))
	return nil
}

// list lists the records of every node, or of one session, by session
// id from after, while they fit p (one KV get per record of the page);
// this node's carry their last use from memory.
func (m *manager) list(ctx context.Context, req ListRequest, p *answer.Pager) (ListResponse, error) {
	out := ListResponse{Sandboxes: []Sandbox{}}
	var sids []string
	if req.SessionID != "" {
		sids = []string{req.SessionID}
	} else {
		kl, err := m.kv.ListKeys(ctx)
		if err != nil {
			return out, kvErr(err)
		}
		for k := range kl.Keys() {
			if sid, ok := strings.CutPrefix(k, "session."); ok {
				sids = append(sids, sid)
			}
		}
		_ = kl.Stop()
		// The keys end early, and silently, when ctx does: a list cut
		// short is an error, not a shorter answer.
		if err := ctx.Err(); err != nil {
			return out, kvErr(err)
		}
	}
	slices.Sort(sids)
	if req.After != "" {
		i, _ := slices.BinarySearch(sids, req.After)
		if i < len(sids) && sids[i] == req.After {
			i++
		}
		sids = sids[i:]
	}
	for _, sid := range sids {
		rec, _, ok, err := getRecord(ctx, m.kv, sid)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				return out, kvErr(err) // unavailable, timeout or canceled: not a shorter list
			}
			m.logger.Warn("sandbox record skipped", slog.String("session_id", sid), slog.Any("error", err))
			continue
		}
		if !ok {
			continue
		}
		m.mu.Lock()
		lv := m.live[rec.SandboxID]
		m.mu.Unlock()
		if lv != nil {
			rec = lv.snapshot()
		}
		fits, err := p.Fits(rec)
		if err != nil {
			return out, err
		}
		if !fits {
			out.Truncated = true
			break
		}
		out.Sandboxes = append(out.Sandboxes, rec)
	}
	return out, nil
}

// workdir is the workdir of the session's live sandbox on this node.
func (m *manager) workdir(ctx context.Context, sid string) (string, error) {
	if err := validateSessionID(sid); err != nil {
		return "", wire.Wrap(wire.CodeNotFound, fmt.Errorf("%w for session %q: %w", ErrNoSandbox, sid, err), "")
	}
	lv, err := m.resolve(ctx, "", sid)
	if err != nil {
		return "", err
	}
	return lv.snapshot().Workdir, nil
}

// kvErr maps a KV failure: a record that does not decode is not_found
// ([badRecordErr]), anything else from JetStream unavailable.
func kvErr(err error) error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return wire.FromNATS(err)
	}
	if errors.Is(err, ErrBadRecord) {
		return badRecordErr(err)
	}
	return wire.Wrap(wire.CodeUnavailable, err, "sandbox records")
}

// badRecordErr answers a call for a session whose record does not decode
// (err wraps [ErrBadRecord]): no node can reach the sandbox it named, as
// for an orphan, and the session's next create replaces it.
func badRecordErr(err error) error {
	return wire.Wrap(wire.CodeNotFound, fmt.Errorf("%w: %w; sandbox::create replaces it, sandbox::destroy deletes it", ErrNoSandbox, err), "")
}

// dropBadRecord deletes session sid's record that does not decode (err),
// if it is still at rev, and logs it. deleted is false when it changed
// meanwhile; the caller reads it again.
func (m *manager) dropBadRecord(ctx context.Context, sid string, rev uint64, err error, why string) (deleted bool, _ error) {
	derr := m.kv.Delete(ctx, recordKey(sid), jetstream.LastRevision(rev))
	if errors.Is(derr, jetstream.ErrKeyRevisionMismatch) || errors.Is(derr, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if derr != nil {
		return false, kvErr(derr)
	}
	m.logger.Warn("sandbox record that does not decode deleted", slog.String("session_id", sid), slog.String("reason", why), slog.Any("error", err))
	return true, nil
}

// close kills every running exec (their handlers return) and waits for
// them until ctx ends. Sandboxes stay: records, workdirs and cgroups
// outlive a restart. The root folder goes when it holds no workdir.
func (m *manager) close(ctx context.Context) error {
	m.mu.Lock()
	lvs := make([]*liveSandbox, 0, len(m.live))
	for _, lv := range m.live {
		lvs = append(lvs, lv)
	}
	m.mu.Unlock()
	for _, lv := range lvs {
		lv.mu.Lock()
		for _, c := range lv.cancels {
			c(errShuttingDown)
		}
		lv.mu.Unlock()
	}
	for _, lv := range lvs {
		idle := make(chan struct{})
		go func() {
			lv.wg.Wait()
			close(idle)
		}()
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("sandbox: execs still running: %w", ctx.Err())
		}
	}
	m.cg.removeGroup()
	m.lifecycle.Lock()
	m.removeRoot()
	m.lifecycle.Unlock()
	return nil
}

// errShuttingDown ends the execs running when the worker closes.
var errShuttingDown = wire.Errorf(wire.CodeUnavailable, "the sandbox worker is shutting down; retry")
