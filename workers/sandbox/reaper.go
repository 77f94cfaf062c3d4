package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

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
// live sandbox: the leftovers of a crash.
func (m *manager) reap(ctx context.Context) (reapStats, error) {
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
		created, last, active := time.UnixMilli(lv.rec.CreatedAt), lv.lastUsed, lv.active
		lv.mu.Unlock()
		var why string
		switch {
		case now.Sub(created) > m.o.maxAge:
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
		if err := os.RemoveAll(filepath.Join(m.o.root, ent.Name())); err != nil {
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

// reaper runs [manager.reap] every interval until Stop.
type reaper struct {
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// startReaper starts the loop; interval 0 starts nothing (Stop still
// works).
func (m *manager) startReaper(interval time.Duration) *reaper {
	r := &reaper{stop: make(chan struct{})}
	if interval <= 0 {
		return r
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), max(interval, 30*time.Second))
			st, err := m.reap(ctx)
			cancel()
			switch {
			case err != nil:
				m.logger.Warn("sandbox reaper failed", slog.Any("error", err))
			case !st.zero():
				m.logger.Info("sandbox reaper", slog.Int("idle", st.Idle), slog.Int("expired", st.Expired),
					slog.Int("orphan_workdirs", st.OrphanWorkdirs), slog.Int("orphan_cgroups", st.OrphanCgroups))
			}
		}
	}()
	return r
}

// Stop ends the loop and waits for a run in progress. It is idempotent.
func (r *reaper) Stop() {
	r.once.Do(func() { close(r.stop) })
	r.wg.Wait()
}
