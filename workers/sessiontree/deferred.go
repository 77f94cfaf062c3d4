package sessiontree

import (
	"context"
	"log/slog"
	"time"

	"github.com/iii-on-nats/iii/subjects"
)

// Deferred meta writes.
//
// An append with defer_meta does not write the session's meta: the store
// keeps the fold (the newest entry it appended) in memory and writes it
// once the session has had no deferred append for the meta delay, and at
// most [maxMetaDeferral] after the first one it kept. A writer that holds
// the session's path itself (the orchestrator: a turn appends four entries
// in a few milliseconds) thereby writes one meta per burst instead of one
// per entry. Until then:
//
//   - this store's reads and appends see the fold (currentMeta applies it);
//   - any meta write this store makes (a fold, set_active_leaf) carries it;
//   - session::list served here writes every kept fold first;
//   - another store sees the stored meta, whose last_seq is behind the
//     session's subject: its reads fold the newest entry in and its
//     appends' expected sequence fails and refreshes, as after a writer
//     that stopped between its publish and its meta update (the package
//     doc's "Crash safety"). A crash loses nothing but the kept folds,
//     which that same repair rebuilds from the entries.
//
// A fold that would fill the session's summary (its first user message)
// is written at once, so lists show it; so are the folds of a session
// homed in a region, and every fold while the meta watch is down.

// maxMetaDeferral bounds how long a fold is kept, however busy the
// session.
const maxMetaDeferral = 2 * time.Second

// DefaultMetaDelay is the default meta delay ([WithMetaDelay]).
const DefaultMetaDelay = 200 * time.Millisecond

// keptFold is a session's deferred meta fold.
type keptFold struct {
	last    node
	summary string
	atMs    int64 // when last was appended
	since   time.Time
	timer   *time.Timer
	// failed counts the writes of this fold that failed (restoreKept).
	failed int
}

// warnEvery is how often a deferred meta that keeps failing is logged
// at warn level: its first failure, then every warnEvery-th (a write is
// tried every 2 s, so about once a minute); the others at debug level.
// A stream without a leader fails every session's write at once.
const warnEvery = 30

// keptFailureLevel is the level a fold's failed-th failed write is logged
// at (warnEvery).
func keptFailureLevel(failed int) slog.Level {
	if failed <= 1 || failed%warnEvery == 0 {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// foldInto accounts for n, an own entry of the session, in m (see
// [Store.fold]): whether m changed.
func foldInto(m *Meta, n node, summary string, nowMs int64) bool {
	if m.LastSeq >= n.seq {
		if m.Summary == "" && summary != "" {
			m.Summary = summary
			return true
		}
		return false
	}
	m.LastSeq = n.seq
	m.EntryCount = n.rec.N
	m.ActiveLeaf = n.id()
	m.UpdatedAt = max(nowMs, m.UpdatedAt)
	if m.Summary == "" {
		m.Summary = summary
	}
	return true
}

// withKept is m with sid's kept fold applied, if any.
func (s *Store) withKept(m Meta) Meta {
	s.kmu.Lock()
	defer s.kmu.Unlock()
	if k := s.kept[m.SessionID]; k != nil {
		foldInto(&m, k.last, k.summary, k.atMs)
	}
	return m
}

// keep defers the fold of last into sid's meta, whose stored value (with
// any earlier kept fold applied) is view; false when the fold must be
// written now.
func (s *Store) keep(sid string, view Meta, last node, summary string) bool {
	if s.opts.metaDelay <= 0 || subjects.SessionRegion(sid) != "" || !s.meta.watching() {
		return false
	}
	if view.Summary == "" && summary != "" {
		return false // the first user message: lists show it at once
	}
	now := s.opts.now()
	s.kmu.Lock()
	defer s.kmu.Unlock()
	if s.keptClosed {
		return false
	}
	k := s.kept[sid]
	if k == nil {
		k = &keptFold{since: now}
		k.timer = time.AfterFunc(s.opts.metaDelay, func() { s.flushKept(sid) })
		s.kept[sid] = k
	} else if now.Sub(k.since)+s.opts.metaDelay <= maxMetaDeferral {
		k.timer.Reset(s.opts.metaDelay)
	}
	if last.seq > k.last.seq {
		k.last, k.atMs = last, now.UnixMilli()
	}
	if k.summary == "" {
		k.summary = summary
	}
	return true
}

// takeKept removes and returns sid's kept fold (nil: none).
func (s *Store) takeKept(sid string) *keptFold {
	s.kmu.Lock()
	defer s.kmu.Unlock()
	k := s.kept[sid]
	if k != nil {
		delete(s.kept, sid)
		k.timer.Stop()
	}
	return k
}

// restoreKept puts back a fold whose write failed, unless a newer one
// was kept meanwhile; its timer writes it again later.
func (s *Store) restoreKept(sid string, k *keptFold) {
	s.kmu.Lock()
	defer s.kmu.Unlock()
	if s.keptClosed {
		return
	}
	if cur := s.kept[sid]; cur != nil {
		if cur.last.seq < k.last.seq {
			cur.last, cur.atMs = k.last, k.atMs
		}
		cur.failed = max(cur.failed, k.failed+1)
		return
	}
	k.failed++
	k.since = s.opts.now()
	k.timer = time.AfterFunc(maxMetaDeferral, func() { s.flushKept(sid) })
	s.kept[sid] = k
}

// flushKept writes sid's kept fold, if any.
func (s *Store) flushKept(sid string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.timeout)
	defer cancel()
	s.writeKept(ctx, sid)
}

// writeKept writes sid's kept fold, if any, starting from the cached
// meta. A failure is logged; the fold is kept again.
func (s *Store) writeKept(ctx context.Context, sid string) {
	s.kmu.Lock()
	_, ok := s.kept[sid]
	s.kmu.Unlock()
	if !ok {
		return
	}
	var known *Meta
	m, rev, ok := s.meta.get(sid)
	if ok {
		known = &m
	}
	if _, err := s.updateMetaFrom(ctx, sid, known, rev, func(*Meta) (bool, error) { return false, nil }); err != nil {
		s.kmu.Lock()
		failed := 0
		if k := s.kept[sid]; k != nil {
			failed = k.failed
		}
		s.kmu.Unlock()
		s.opts.logger.Log(ctx, keptFailureLevel(failed), "deferred session meta not written; kept for a later write", "session_id", sid, "failures", failed, "error", err)
	}
}

// flushAllKept writes every kept fold.
func (s *Store) flushAllKept(ctx context.Context) {
	s.kmu.Lock()
	sids := make([]string, 0, len(s.kept))
	for sid := range s.kept {
		sids = append(sids, sid)
	}
	s.kmu.Unlock()
	for _, sid := range sids {
		s.writeKept(ctx, sid)
	}
}

// closeKept writes every kept fold and keeps none from then on.
func (s *Store) closeKept(ctx context.Context) {
	s.kmu.Lock()
	s.keptClosed = true
	s.kmu.Unlock()
	s.flushAllKept(ctx)
}
