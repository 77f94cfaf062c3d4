package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
)

// reapStats counts what one reaper run removed.
type reapStats struct {
	// Idle and Expired are sandboxes destroyed for idle_ttl and max_age.
	Idle, Expired int
	// StaleRecords are records of this node whose workdir was gone.
	StaleRecords int
	// OrphanWorkdirs and OrphanCgroups are leftovers with no record.
	OrphanWorkdirs, OrphanCgroups int
	// OrphanRecords are other nodes' records deleted as orphans.
	OrphanRecords int
	// Lost are this node's sandboxes dropped because their record was
	// gone or named another sandbox (taken over while this node was
	// thought gone).
	Lost int
	// GoneNodes are heartbeats of gone nodes that hold no record, deleted.
	GoneNodes int
	// GoneRoots are the empty root folders of gone nodes, removed.
	GoneRoots int
	// BadRecords are records that do not decode, written longer than
	// max_age plus orphan_after ago, deleted.
	BadRecords int
}

func (s reapStats) zero() bool { return s == reapStats{} }

// loadRecords adopts every record of this node (at Start): the sandboxes
// a previous run of the node left, whose processes died with it.
func (m *manager) loadRecords(ctx context.Context) (stale int, err error) {
	kl, err := m.kv.ListKeys(ctx)
	if err != nil {
		return 0, kvErr(err)
	}
	var sids []string
	for k := range kl.Keys() {
		if sid, ok := strings.CutPrefix(k, "session."); ok {
			sids = append(sids, sid)
		}
	}
	_ = kl.Stop()
	if err := ctx.Err(); err != nil {
		return 0, kvErr(err) // the keys ended early: not every record was seen
	}
	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	for _, sid := range sids {
		rec, rev, ok, err := getRecord(ctx, m.kv, sid)
		if err != nil {
			m.logger.Warn("sandbox record skipped", slog.String("session_id", sid), slog.Any("error", err))
			continue
		}
		if !ok || rec.Node != m.o.node {
			continue
		}
		lv, err := m.adopt(ctx, rec, rev)
		if err != nil {
			return stale, err
		}
		if lv == nil {
			stale++
		}
	}
	return stale, nil
}

// reap destroys this node's sandboxes idle longer than idle_ttl (and not
// running anything) or older than max_age (even while running), then
// removes workdirs and cgroups under this node's root that belong to no
// live sandbox: the leftovers of a crash. Then it sweeps the records
// ([manager.sweep]); a sweep that fails (the records cannot be read) is
// logged and tried again at the next run.
func (m *manager) reap(ctx context.Context) (reapStats, error) {
	st, err := m.reapLocal(ctx)
	if err != nil {
		return st, err
	}
	if err := m.sweep(ctx, &st); err != nil {
		m.logger.Warn("sandbox record sweep failed", slog.Any("error", err))
	}
	return st, nil
}

// reapLocal is the part of [manager.reap] about this node's sandboxes and
// root folder.
func (m *manager) reapLocal(ctx context.Context) (reapStats, error) {
	var st reapStats
	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	now := m.o.now()
	m.mu.Lock()
	lvs := make([]*liveSandbox, 0, len(m.live))
	for _, lv := range m.live {
		lvs = append(lvs, lv)
	}
	m.mu.Unlock()
	for _, lv := range lvs {
		lv.mu.Lock()
		expires, last, active := m.expiresAt(lv.rec), lv.lastUsed, lv.active
		lv.mu.Unlock()
		var why string
		switch {
		case now.After(expires):
			why = "max_age"
		case active == 0 && now.Sub(last) > m.o.idleTTL:
			why = "idle_ttl"
		default:
			continue
		}
		cause := wire.Wrap(wire.CodeNotFound, errReaped, "")
		if err := m.destroyLive(ctx, lv, cause, why); err != nil {
			return st, err
		}
		if why == "max_age" {
			st.Expired++
		} else {
			st.Idle++
		}
	}

	m.mu.Lock()
	live := make(map[string]bool, len(m.live))
	for id := range m.live {
		live[id] = true
	}
	m.mu.Unlock()
	entries, err := os.ReadDir(m.o.root)
	if errors.Is(err, fs.ErrNotExist) {
		// Removed while empty (by another node's reaper): nothing to
		// reap; the next workdir makes it again.
		entries, err = nil, nil
	}
	if err != nil {
		return st, wire.Wrap(wire.CodeInternal, err, "read sandbox root")
	}
	for _, ent := range entries {
		// Only folders named like sandboxes: the root may hold anything
		// else an operator put there.
		sid, err := parseSandboxID(ent.Name())
		if err != nil || live[ent.Name()] || !ent.IsDir() {
			continue
		}
		if m.claimed(ctx, sid, ent.Name()) {
			continue
		}
		m.cg.removeOrphan(ent.Name())
		if err := removeWorkdir(filepath.Join(m.o.root, ent.Name())); err != nil {
			m.logger.Warn("orphan workdir not removed", slog.String("workdir", filepath.Join(m.o.root, ent.Name())), slog.Any("error", err))
			continue
		}
		st.OrphanWorkdirs++
	}
	for id := range m.cg.sandboxIDs() {
		if !live[id] {
			m.cg.removeOrphan(id)
			st.OrphanCgroups++
		}
	}
	return st, nil
}

// sweep reads every record and heartbeat (one scan of the bucket, see
// [manager.scan]) and
//   - deletes other nodes' records that are orphans ([manager.orphanReason];
//     compare-and-set, so a record its node claims meanwhile stays);
//   - removes the empty root folders of nodes silent for orphan_after
//     on this host ([manager.removeGoneRoots]);
//   - deletes the heartbeats of nodes silent for orphan_after that no
//     record names any more (nodes whose host name changed for good; a
//     node that comes back writes its heartbeat again);
//   - deletes the records that do not decode and were written longer
//     than max_age plus orphan_after ago (compare-and-set): the sandbox
//     such a record named, were its node alive, would have been reaped
//     for max_age by then, and its session may never call again to
//     replace it. The workdir it kept ([manager.claimed]) goes at the
//     next run. A younger one waits: it may be a live sandbox's, written
//     by a version this node cannot read;
//   - drops this node's live sandboxes whose record is gone or names
//     another sandbox: it was taken over while this node was thought
//     gone (a pause or an outage longer than orphan_after), and the
//     session's sandbox is now the new record's. Its processes are
//     killed and its workdir removed, as the reaper does for a workdir no
//     record names; the new record stays.
func (m *manager) sweep(ctx context.Context, st *reapStats) error {
	recs, bad, beats, err := m.scan(ctx)
	if err != nil {
		return err
	}
	now := m.o.now()
	for sid, r := range bad {
		if now.Sub(r.written) <= m.o.maxAge+m.o.orphanAfter {
			continue
		}
		deleted, err := m.dropBadRecord(ctx, sid, r.rev, r.bad, "written "+stamp(r.written)+", past max_age")
		if err != nil {
			m.logger.Warn("sandbox record that does not decode not deleted", slog.String("session_id", sid), slog.Any("error", err))
		}
		if deleted {
			st.BadRecords++
		}
	}
	named := map[string]bool{}
	for _, r := range recs {
		if r.rec.Node == m.o.node {
			continue
		}
		why := m.orphanReason(r.rec, beats[r.rec.Node], now)
		if why != "" {
			deleted, err := m.takeOver(ctx, r.rec, r.rev, why)
			if err != nil {
				m.logger.Warn("sandbox orphan record not deleted", slog.String("sandbox_id", r.rec.SandboxID), slog.Any("error", err))
			}
			if deleted {
				st.OrphanRecords++
				continue
			}
		}
		named[r.rec.Node] = true
	}
	// Before the heartbeats go: they say where the roots are.
	st.GoneRoots += m.removeGoneRoots(beats, now)
	for node, b := range beats {
		if node == m.o.node || named[node] || now.Sub(b.last) <= m.o.orphanAfter {
			continue
		}
		err := m.kv.Delete(ctx, beatKey(node), jetstream.LastRevision(b.rev))
		switch {
		case err == nil:
			st.GoneNodes++
		case !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyNotFound):
			m.logger.Warn("sandbox heartbeat of a gone node not deleted", slog.String("node", node), slog.Any("error", err))
		}
	}

	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	m.mu.Lock()
	lvs := make([]*liveSandbox, 0, len(m.live))
	for _, lv := range m.live {
		lvs = append(lvs, lv)
	}
	m.mu.Unlock()
	for _, lv := range lvs {
		lv.mu.Lock()
		id, sid := lv.rec.SandboxID, lv.rec.SessionID
		lv.mu.Unlock()
		if r, ok := recs[sid]; ok && r.rec.SandboxID == id {
			continue
		}
		// Not in the scan (or made after it): read it again to be sure.
		rec, _, ok, err := getRecord(ctx, m.kv, sid)
		if err != nil || (ok && rec.SandboxID == id) {
			continue
		}
		cause := wire.Wrap(wire.CodeNotFound, errLost, "")
		if err := m.destroyLive(ctx, lv, cause, "record taken over"); err != nil {
			return err
		}
		st.Lost++
	}
	return nil
}

// errLost ends the execs of a sandbox whose record was taken over.
var errLost = fmt.Errorf("%w: its record was taken over while this node was thought gone; sandbox::create gives the session a new one", ErrNoSandbox)

// claimed reports whether the workdir of sandbox id, which is not live,
// may still be a sandbox's: its session's record names it, or the record
// cannot be read (a read that failed at Start left the sandbox unadopted;
// the next exec of the session adopts it). Only a workdir whose session
// has no record, or a record of another sandbox, is an orphan: deleting
// files on a failed read would lose a session's work for good.
func (m *manager) claimed(ctx context.Context, sid, id string) bool {
	rec, _, ok, err := getRecord(ctx, m.kv, sid)
	if err != nil {
		m.logger.Warn("sandbox workdir kept: its record cannot be read", slog.String("sandbox_id", id), slog.Any("error", err))
		return true
	}
	return ok && rec.SandboxID == id
}

// errReaped ends the execs of a sandbox the reaper destroys.
var errReaped = fmt.Errorf("%w: it was reaped (idle_ttl or max_age)", ErrNoSandbox)

// logAttrs are the stats as log attributes.
func (s reapStats) logAttrs() []any {
	return []any{slog.Int("idle", s.Idle), slog.Int("expired", s.Expired), slog.Int("stale_records", s.StaleRecords),
		slog.Int("orphan_workdirs", s.OrphanWorkdirs), slog.Int("orphan_cgroups", s.OrphanCgroups),
		slog.Int("orphan_records", s.OrphanRecords), slog.Int("lost", s.Lost), slog.Int("gone_nodes", s.GoneNodes),
		slog.Int("gone_roots", s.GoneRoots), slog.Int("bad_records", s.BadRecords)}
}

// loop runs a function every interval until Stop: the reaper and the
// heartbeat.
type loop struct {
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// startLoop runs run(ctx) every interval, ctx bounded by timeout;
// interval 0 starts nothing (Stop still works).
func startLoop(interval, timeout time.Duration, run func(ctx context.Context)) *loop {
	l := &loop{stop: make(chan struct{})}
	if interval <= 0 {
		return l
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			run(ctx)
			cancel()
		}
	}()
	return l
}

// Stop ends the loop and waits for a run in progress. It is idempotent.
func (l *loop) Stop() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// startReaper runs [manager.reap] every interval (0: never).
func (m *manager) startReaper(interval time.Duration) *loop {
	return startLoop(interval, max(interval, 30*time.Second), func(ctx context.Context) {
		st, err := m.reap(ctx)
		switch {
		case err != nil:
			m.logger.Warn("sandbox reaper failed", slog.Any("error", err))
		case !st.zero():
			m.logger.Info("sandbox reaper", st.logAttrs()...)
		}
	})
}

// startBeat writes this node's heartbeat every fifth of orphan_after. A
// failure is logged and retried at the next tick; only orphan_after of
// them in a row let other nodes take this node's sandboxes over.
func (m *manager) startBeat() *loop {
	every := m.o.beatEvery()
	return startLoop(every, max(every, 5*time.Second), func(ctx context.Context) {
		if err := m.beat(ctx); err != nil {
			m.logger.Warn("sandbox heartbeat not written", slog.String("node", m.o.node), slog.Any("error", err))
		}
	})
}
