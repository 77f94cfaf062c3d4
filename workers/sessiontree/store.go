package sessiontree

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Store is the session tree on JetStream: entries in [EntryStream], one
// [Meta] per session in [MetaBucket], each session in the copies of its
// home region (the primary ones for a plain id). It is safe for concurrent
// use, by any number of processes: what it keeps between calls (the
// entries it appended last, the metas it read or wrote last, which a
// watch on the bucket drops once another write passes them) only saves
// reads.
type Store struct {
	e    *engine.Engine
	nc   *nats.Conn
	js   jetstream.JetStream
	opts options

	// runBytes bounds a batch that reads (part of) a run ([maxRunBytes]).
	runBytes int

	// leaves keeps the entries this store appended last, so the next
	// append under one of them needs no read.
	leaves leafCache
	// meta keeps the metas this store read or wrote last, so the next
	// append to a session needs no meta read while no other write came.
	meta *metaCache
	// paths keeps the paths of paged reads between their pages.
	paths *pathCache
	// trees keeps the trees of paged session::tree reads between their
	// pages.
	trees *treeCache

	// kept are the deferred meta folds, by session (deferred.go).
	kmu        sync.Mutex
	kept       map[string]*keptFold
	keptClosed bool

	// fetched counts the entries read from the stream and trips the
	// requests that read them (tests check that reads are proportional
	// to the path).
	fetched, trips atomic.Int64
}

// Open opens the store on e, creating the stream and the bucket when
// missing: the primary copies and, when e has a region, that region's
// copies. An existing primary stream without direct get is updated to
// allow it.
func Open(ctx context.Context, e *engine.Engine, opts ...Option) (*Store, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.logger == nil {
		o.logger = e.Logger().With("worker", WorkerName)
	}
	// An entry the server would refuse for its size is refused here first
	// (invalid_payload, for good), not sent and answered "unavailable".
	if room := int(e.Conn().MaxPayload()) - entryHeadroom; o.maxEntrySize > room {
		if o.maxEntrySet {
			return nil, fmt.Errorf("%w: %s.max_entry_size %d leaves too little of the server's max payload (%d) for the subject and headers (%d bytes); set it to at most %d",
				engine.ErrInvalidOption, WorkerName, o.maxEntrySize, e.Conn().MaxPayload(), entryHeadroom, room)
		}
		o.logger.Info("entry limit lowered to fit the server's max payload", "max_entry_size", room, "max_payload", e.Conn().MaxPayload())
		o.maxEntrySize = room
	}
	s := &Store{e: e, nc: e.Conn(), js: e.JetStream(), opts: o, runBytes: maxRunBytes, meta: newMetaCache(), paths: newPathCache(), trees: newTreeCache(), kept: map[string]*keptFold{}}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	st, err := e.EnsureSessionStream(ctx, EntryStreamConfig(e.Replicas()), EntrySubjectPrefix)
	if err != nil {
		return nil, err
	}
	if err := s.allowDirect(ctx, st); err != nil {
		return nil, err
	}
	kv, err := e.EnsureSessionKV(ctx, MetaBucketConfig(e.Replicas()))
	if err != nil {
		return nil, err
	}
	if err := s.meta.start(ctx, s.nc, kv, o.logger); err != nil {
		return nil, storeErr(ctx, err, "watch %s", MetaBucket)
	}
	return s, nil
}

// Close stops the watch on the meta bucket; every meta is read from then
// on. The stream and the bucket stay. The store's connection closing
// stops it too.
func (s *Store) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.timeout)
	defer cancel()
	s.closeKept(ctx)
	s.meta.stop()
}

// allowDirect turns direct get on for st (a stream made by an operator or
// an older version) and refreshes the handle, which the engine caches and
// [Store.entries] returns, so that its reads use direct gets.
func (s *Store) allowDirect(ctx context.Context, st jetstream.Stream) error {
	if info := st.CachedInfo(); info != nil && info.Config.AllowDirect {
		return nil
	}
	// Fresh: EnsureSessionStream may have narrowed the subjects since.
	info, err := st.Info(ctx)
	if err != nil {
		return storeErr(ctx, err, "stream %s", EntryStream)
	}
	if info.Config.AllowDirect {
		return nil
	}
	cfg := info.Config
	cfg.AllowDirect = true
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		return storeErr(ctx, err, "allow direct get on %s", cfg.Name)
	}
	if _, err := st.Info(ctx); err != nil {
		return storeErr(ctx, err, "stream %s", cfg.Name)
	}
	return nil
}

// entries is the copy of [EntryStream] that holds the entries of session
// sid (and of every session of its home region): not_found for a region
// without one.
func (s *Store) entries(ctx context.Context, sid string) (jetstream.Stream, error) {
	st, err := s.e.SessionStream(ctx, EntryStream, sid)
	if err != nil {
		return nil, storeErr(ctx, err, "entries of session %s", sid)
	}
	return st, nil
}

// metaKV is the copy of [MetaBucket] that holds the meta of session sid:
// not_found for a region without one.
func (s *Store) metaKV(ctx context.Context, sid string) (jetstream.KeyValue, error) {
	kv, err := s.e.SessionKV(ctx, MetaBucket, sid)
	if err != nil {
		return nil, storeErr(ctx, err, "meta of session %s", sid)
	}
	return kv, nil
}

func (s *Store) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opts.timeout)
}

func (s *Store) nowMs() int64 { return s.opts.now().UnixMilli() }

// newSessionID is the id of a session created without one, homed in
// region ("": the primary copies).
func newSessionID(region string) string {
	if region == "" {
		return "s_" + nuid.Next()
	}
	return region + ".s_" + nuid.Next()
}

// createMeta writes m as a new session: conflict when the id exists.
func (s *Store) createMeta(ctx context.Context, m Meta) error {
	data, err := wire.MarshalJSON(m)
	if err != nil {
		return wire.Wrap(wire.CodeInternal, err, "encode meta")
	}
	kv, err := s.metaKV(ctx, m.SessionID)
	if err != nil {
		return err
	}
	rev, err := kv.Create(ctx, m.SessionID, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		// It will still exist on a retry.
		return wire.Errorf(wire.CodeConflict, "session %s already exists", m.SessionID).Permanent()
	}
	if err != nil {
		return storeErr(ctx, err, "create session %s", m.SessionID)
	}
	s.meta.put(m, rev)
	return nil
}

// noHistory checks that session sid, about to be created under an id the
// caller chose, has no entry: a session whose meta is missing (deleted
// with `nats kv del`, the repair of one that does not decode) still has
// its history, and a new meta over it would make those entries the new
// session's (a fork's path would read them, not the history it forks).
// Such a session exists: conflict, as when its meta is there (the next
// read rebuilds the meta). Another client's messages alone are no
// history, as for [Store.Ensure]. It costs one direct get.
func (s *Store) noHistory(ctx context.Context, sid string) error {
	_, ok, _, err := s.lastOwn(ctx, sid, 0)
	if err != nil {
		return err
	}
	if ok {
		return wire.Errorf(wire.CodeConflict, "session %s already exists (its meta is missing; the next read of the session rebuilds it)", sid).Permanent()
	}
	return nil
}

// Create creates a session with no history.
func (s *Store) Create(ctx context.Context, req CreateRequest) (CreateResponse, error) {
	if err := req.Validate(); err != nil {
		return CreateResponse{}, err
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	sid := req.SessionID
	if sid == "" {
		sid = newSessionID("")
	} else if err := s.noHistory(ctx, sid); err != nil {
		return CreateResponse{}, err
	}
	now := s.nowMs()
	if err := s.createMeta(ctx, Meta{SessionID: sid, DisplayName: req.DisplayName, CreatedAt: now, UpdatedAt: now}); err != nil {
		return CreateResponse{}, err
	}
	return CreateResponse{SessionID: sid}, nil
}

// Ensure creates the session when it does not exist; an existing one has
// its meta repaired (see [Store.Meta]). A session whose meta is missing
// but whose subject holds entries (the meta deleted by hand) exists: its
// meta is rebuilt from them and created is false, since a caller takes
// created for a session with no history. Telling costs one direct get of
// the subject's newest message before the create.
func (s *Store) Ensure(ctx context.Context, req EnsureRequest) (EnsureResponse, error) {
	if err := req.Validate(); err != nil {
		return EnsureResponse{}, err
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	sid := req.SessionID
	_, found, err := s.lastMessage(ctx, sid)
	if err != nil && !errors.Is(err, errNotEntry) {
		return EnsureResponse{}, err
	}
	if found || err != nil {
		// The subject holds messages: the session's meta is read, or
		// rebuilt from its entries when missing. Only another client's
		// messages and no meta is a session still to create.
		_, err := s.refresh(ctx, sid)
		if err == nil {
			return EnsureResponse{SessionID: sid}, nil
		}
		if !errors.Is(err, wire.ErrNotFound) {
			return EnsureResponse{}, err
		}
	}
	// No entry: a new session, unless another writer created it (or a
	// fork with no entry of its own) meanwhile. No entry can come before
	// the meta: an append needs it.
	now := s.nowMs()
	err = s.createMeta(ctx, Meta{SessionID: sid, DisplayName: req.DisplayName, CreatedAt: now, UpdatedAt: now})
	if err == nil {
		return EnsureResponse{SessionID: sid, Created: true}, nil
	}
	if !errors.Is(err, wire.ErrConflict) {
		return EnsureResponse{}, err
	}
	if _, err := s.refresh(ctx, sid); err != nil {
		return EnsureResponse{}, err
	}
	return EnsureResponse{SessionID: sid}, nil
}

// Meta returns the meta of session sid, first folding in an entry a
// writer stored without updating the meta (one extra direct get).
func (s *Store) Meta(ctx context.Context, sid string) (Meta, error) {
	if err := validSessionID(sid); err != nil {
		return Meta{}, err
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	return s.refresh(ctx, sid)
}

// refresh loads the meta of sid (the cached one when no write passed it)
// and repairs it when its subject holds a newer entry than the meta
// accounts for.
func (s *Store) refresh(ctx context.Context, sid string) (Meta, error) {
	m, _, _, err := s.currentMeta(ctx, sid)
	if err != nil {
		return Meta{}, err
	}
	last, ok, foreign, err := s.lastOwn(ctx, sid, m.LastSeq)
	if err != nil {
		return Meta{}, err
	}
	if foreign > m.LastSeq {
		// Another client's message is the newest on the subject: the
		// meta passes over it (last_seq), so that the next append's
		// expected sequence holds, after folding in any entry before it.
		now := s.nowMs()
		return s.updateMeta(ctx, sid, func(m *Meta) (bool, error) {
			changed := ok && foldInto(m, last, userSummary(last.rec), now)
			if m.LastSeq < foreign {
				m.LastSeq, changed = foreign, true
			}
			return changed, nil
		})
	}
	if !ok || last.seq <= m.LastSeq {
		return m, nil
	}
	// Routine for a session another store appends to with defer_meta
	// (deferred.go), so not logged above debug.
	s.opts.logger.Debug("session meta repaired", "session_id", sid, "last_seq", m.LastSeq, "newest_seq", last.seq)
	return s.fold(ctx, sid, last, userSummary(last.rec))
}

// Append appends one entry and makes it the active leaf.
func (s *Store) Append(ctx context.Context, req AppendRequest) (AppendResponse, error) {
	if err := req.Validate(); err != nil {
		return AppendResponse{}, err
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	ids, err := s.appendChain(ctx, req.SessionID, req.ParentID, req.entries(), req.DedupID, req.DedupSinceMs, req.DeferMeta)
	if err != nil {
		return AppendResponse{}, err
	}
	return AppendResponse{EntryID: ids[0]}, nil
}

// AppendBatch appends a chain of entries and makes the last one the
// active leaf. When JetStream fails in the middle of the chain, the
// entries already stored stay (a valid, shorter chain) and the error says
// how many; a retry with the same dedup_id completes the chain without
// repeating them.
func (s *Store) AppendBatch(ctx context.Context, req AppendBatchRequest) (AppendBatchResponse, error) {
	if err := req.Validate(); err != nil {
		return AppendBatchResponse{}, err
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	ids, err := s.appendChain(ctx, req.SessionID, req.ParentID, req.entries(), req.DedupID, req.DedupSinceMs, req.DeferMeta)
	if err != nil {
		return AppendBatchResponse{}, err
	}
	return AppendBatchResponse{EntryIDs: ids}, nil
}

// recordSlack bounds the bytes the bookkeeping fields add to an encoded
// record, so sizes are checked before anything is written.
const recordSlack = 160

// entryHeadroom is what an entry's publish needs of the server's max
// payload besides the entry: its subject and headers (expected sequence,
// message id).
const entryHeadroom = 1024

// appendChain stores entries as a chain under parentID (or the active
// leaf), one publish each, then folds the last into the meta.
//
// Every publish expects the session subject's last sequence to be the
// meta's last_seq: appends to one session are serialized by JetStream, so
// each entry knows its ordinal and whether it extends its parent's run.
// A publish that loses (another writer appended, or one stopped before
// updating the meta) refreshes the meta and tries again; an append without
// parent_id then goes under the refreshed active leaf.
//
// With dedupSinceMs (and dedupID), the entries a first attempt stored
// since then are looked up first and answered, not published again
// ([Store.storedChain]).
func (s *Store) appendChain(ctx context.Context, sid, parentID string, entries []Entry, dedupID string, dedupSinceMs int64, deferMeta bool) ([]string, error) {
	now := s.nowMs()
	recs := make([]record, len(entries))
	summary := ""
	for i, e := range entries {
		if e.Timestamp == 0 {
			e.Timestamp = now
		}
		recs[i] = newRecord(e)
		recs[i].N = 1
		b, err := encodeRecord(&recs[i])
		if err != nil {
			return nil, invalid("entries[%d]: %v", i, err)
		}
		if len(b)+recordSlack > s.opts.maxEntrySize {
			return nil, invalid("entry %d is %d bytes encoded (at most %d)", i, len(b), s.opts.maxEntrySize-recordSlack)
		}
		if err := s.fitsJSONAnswer(i, e, len(b)); err != nil {
			return nil, err
		}
		if summary == "" {
			summary = userSummary(recs[i])
		}
	}
	m, read, rev, err := s.currentMeta(ctx, sid)
	if err != nil {
		return nil, err
	}
	// read is the meta as stored: the final fold tries its
	// compare-and-set on it first, which saves a read when no other
	// writer came in between (and costs nothing more when one did: the
	// revision no longer matches).
	var base *node
	if parentID != "" {
		p, err := s.resolve(ctx, m, parentID, "parent_id")
		if err != nil {
			return nil, err
		}
		base = &p
	} else if base, err = s.activeLeaf(ctx, m); err != nil {
		return nil, err
	}
	if err := s.checkRefs(ctx, m, base, entries); err != nil {
		return nil, err
	}
	var stored []node
	if dedupID != "" && dedupSinceMs > 0 {
		if stored, err = s.storedChain(ctx, sid, dedupID, dedupSinceMs, len(recs)); err != nil {
			return nil, err
		}
	}
	subj := EntrySubjectPrefix + sid
	ids := make([]string, 0, len(entries))
	prev := base
	var last node
	for i := range recs {
		if i < len(stored) {
			// The first attempt stored it: answer it, as a retry inside
			// the duplicate window would.
			ids = append(ids, stored[i].id())
			last = stored[i]
			prev = &last
			continue
		}
		n, err := s.publish(ctx, subj, sid, &m, prev, recs[i], dedupID, i, func(fresh Meta) (*node, error) {
			if i > 0 || parentID != "" {
				return prev, nil
			}
			nb, err := s.activeLeaf(ctx, fresh)
			if err != nil {
				return nil, err
			}
			if err := s.checkRefs(ctx, fresh, nb, entries); err != nil {
				return nil, wire.Errorf(wire.CodeConflict, "the active leaf moved under the entries' references: %v", err)
			}
			return nb, nil
		})
		if err != nil {
			if i > 0 {
				s.foldAfter(ctx, sid, nil, 0, last, summary)
				return nil, wire.Wrap(wire.From(err).Code, err, "%d of %d entries appended (last %s)", i, len(recs), last.id())
			}
			return nil, err
		}
		ids = append(ids, n.id())
		last = n
		prev = &last
	}
	if !deferMeta || !s.keep(sid, m, last, summary) {
		s.foldAfter(ctx, sid, &read, rev, last, summary)
	}
	return ids, nil
}

// foldAfter folds the last appended entry into the meta, starting from
// known (read at rev) when not nil. The entries are durable already, so a
// failure is logged, not returned: the meta lags and the next reader or
// writer repairs it.
func (s *Store) foldAfter(ctx context.Context, sid string, known *Meta, rev uint64, last node, summary string) {
	if _, err := s.foldFrom(ctx, sid, known, rev, last, summary); err != nil {
		s.opts.logger.Warn("session meta not updated after append", "session_id", sid, "entry_id", last.id(), "error", err)
	}
}

// fitsJSONAnswer checks that entry i, as answered to a JSON caller, fits
// an answer of its own (session::entries, session::messages): JSON
// writes a control character as six bytes where msgpack takes one, so an
// entry under the size cap can be several times larger in JSON. Stored,
// one that does not fit would fail every JSON read of a path through it
// with internal, for good (single deletes are denied).
//
// packed is the entry's msgpack size: JSON takes at most six bytes for
// one of msgpack (a control character's escape; `false,` in an array),
// so an entry small enough that eight times it fits is not encoded again
// (a turn's appends, on its path).
func (s *Store) fitsJSONAnswer(i int, e Entry, packed int) error {
	room := s.replyLimit() - replyRoom - entryIDsJSON
	if 8*packed <= room {
		return nil
	}
	b, err := wire.MarshalJSON(e)
	if err != nil {
		return invalid("entries[%d]: %v", i, err)
	}
	// replyRoom more for the entry's ids and what a page wraps around
	// it (a summary's prefix, the page's fields).
	if len(b) > room {
		return invalid("entry %d is %d bytes as JSON (at most %d, so that a JSON caller can read it: a control character takes 6 bytes)", i, len(b), room)
	}
	return nil
}

// entryIDsJSON bounds what an entry's id and parent id add to its JSON.
const entryIDsJSON = len(`"id":"","parent_id":"",`) + 2*14

// activeLeaf reads the active leaf of m, nil when it has none.
func (s *Store) activeLeaf(ctx context.Context, m Meta) (*node, error) {
	if m.ActiveLeaf == "" {
		return nil, nil
	}
	if seq, err := ParseEntryID(m.ActiveLeaf); err == nil {
		if n, ok := s.leaves.get(subjects.SessionRegion(m.SessionID), seq); ok {
			return &n, nil // appended here: entries never change
		}
	}
	n, err := s.getID(ctx, m.SessionID, m.ActiveLeaf)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// publish stores rec under prev as the next entry of session sid, whose
// meta (m) the caller keeps current. rebase is called after a lost race
// with the refreshed meta and returns the parent to use.
func (s *Store) publish(ctx context.Context, subj, sid string, m *Meta, prev *node, rec record, dedupID string, i int, rebase func(Meta) (*node, error)) (node, error) {
	for attempt := 0; ; attempt++ {
		rec.ParentID, rec.Depth, rec.Run, rec.RunDepth, rec.RunParent = "", 0, 0, 0, ""
		if prev != nil {
			rec.ParentID = prev.id()
			rec.Depth = prev.rec.Depth + 1
			if prev.sid == sid && m.LastSeq != 0 && prev.seq == m.LastSeq {
				// prev is the last entry on the subject: rec extends its run.
				rec.Run, rec.RunDepth, rec.RunParent = prev.runStart(), prev.runDepth(), prev.runParent()
			}
		}
		rec.N = m.EntryCount + 1
		data, err := encodeRecord(&rec)
		if err != nil {
			return node{}, wire.Wrap(wire.CodeInternal, err, "")
		}
		if len(data) > s.opts.maxEntrySize {
			return node{}, invalid("entry is %d bytes encoded (at most %d)", len(data), s.opts.maxEntrySize)
		}
		msg := nats.NewMsg(subj)
		msg.Data = data
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(m.LastSeq, 10))
		if dedupID != "" {
			msg.Header.Set(jetstream.MsgIDHeader, entryMsgID(sid, dedupID, i))
		}
		ack, err := s.js.PublishMsg(ctx, msg)
		if err == nil {
			n := node{seq: ack.Sequence, sid: sid, rec: rec}
			if ack.Duplicate {
				// A retry of a deduplicated append: the entry stored the
				// first time is the one to answer.
				if n, err = s.get(ctx, sid, ack.Sequence); err != nil {
					return node{}, wire.From(err)
				}
			}
			if n.seq > m.LastSeq {
				m.LastSeq, m.EntryCount = n.seq, n.rec.N
			}
			s.leaves.put(n, len(data))
			return n, nil
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			// A server of the cluster with a smaller max payload than the
			// one Open saw: no retry can help.
			return node{}, invalid("entry is %d bytes encoded, over the server's max payload", len(data))
		}
		if !isCASConflict(err) {
			return node{}, storeErr(ctx, err, "append to session %s", sid)
		}
		if attempt >= maxCASAttempts {
			return node{}, wire.Errorf(wire.CodeConflict, "session %s: too many concurrent appends", sid)
		}
		// Another writer appended: the meta this append started from (a
		// cached one maybe) is not the newest.
		s.meta.drop(sid)
		fresh, err := s.refresh(ctx, sid)
		if err != nil {
			return node{}, err
		}
		*m = fresh
		if prev, err = rebase(fresh); err != nil {
			return node{}, err
		}
	}
}

// checkRefs checks the entry ids that entries name: a compaction's
// first_kept_entry_id must be on the path to base (the parent of the
// chain), a branch summary's from_entry_id in the session's history.
func (s *Store) checkRefs(ctx context.Context, m Meta, base *node, entries []Entry) error {
	for i, e := range entries {
		switch {
		case e.Type == TypeCompaction && e.FirstKeptEntryID != "":
			if base == nil {
				return invalid("entries[%d]: first_kept_entry_id %s is not on the path (the session has none)", i, e.FirstKeptEntryID)
			}
			k, err := s.resolve(ctx, m, e.FirstKeptEntryID, "first_kept_entry_id")
			if err != nil {
				return err
			}
			ok, err := s.isAncestorOrSelf(ctx, k, *base)
			if err != nil {
				return err
			}
			if !ok {
				return invalid("entries[%d]: first_kept_entry_id %s is not on the path to %s", i, e.FirstKeptEntryID, base.id())
			}
		case e.Type == TypeBranchSummary:
			if _, err := s.resolve(ctx, m, e.FromEntryID, "from_entry_id"); err != nil {
				return err
			}
		}
	}
	return nil
}

// SetActiveLeaf makes entry_id (of the session's history) the active leaf.
func (s *Store) SetActiveLeaf(ctx context.Context, req SetActiveLeafRequest) (SetActiveLeafResponse, error) {
	if err := req.Validate(); err != nil {
		return SetActiveLeafResponse{}, err
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	m, err := s.refresh(ctx, req.SessionID)
	if err != nil {
		return SetActiveLeafResponse{}, err
	}
	n, err := s.resolve(ctx, m, req.EntryID, "entry_id")
	if err != nil {
		return SetActiveLeafResponse{}, err
	}
	now := s.nowMs()
	_, err = s.updateMeta(ctx, req.SessionID, func(m *Meta) (bool, error) {
		if m.ActiveLeaf == n.id() {
			return false, nil
		}
		m.ActiveLeaf = n.id()
		m.UpdatedAt = max(now, m.UpdatedAt)
		return true, nil
	})
	if err != nil {
		return SetActiveLeafResponse{}, err
	}
	return SetActiveLeafResponse{SessionID: req.SessionID, ActiveLeaf: n.id()}, nil
}

// Fork creates a session whose history is the path from the root to
// from_entry_id: shared, not copied. Its meta points at the entry, its
// active leaf is the entry, and reading its path continues into the
// session the entry is stored in.
func (s *Store) Fork(ctx context.Context, req ForkRequest) (CreateResponse, error) {
	if err := req.Validate(); err != nil {
		return CreateResponse{}, err
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	m, _, err := s.loadMeta(ctx, req.SessionID)
	if err != nil {
		return CreateResponse{}, err
	}
	n, err := s.resolve(ctx, m, req.FromEntryID, "from_entry_id")
	if err != nil {
		return CreateResponse{}, err
	}
	return s.fork(ctx, m, n.id(), req.NewSessionID, req.DisplayName)
}

// Clone is a fork at the leaf (the active leaf by default). A session with
// no history clones into an empty session that names it in forked_from.
func (s *Store) Clone(ctx context.Context, req CloneRequest) (CreateResponse, error) {
	if err := req.Validate(); err != nil {
		return CreateResponse{}, err
	}
	ctx, cancel := s.withDeadline(ctx)
	defer cancel()
	m, err := s.refresh(ctx, req.SessionID)
	if err != nil {
		return CreateResponse{}, err
	}
	leaf, ok, err := s.leafOf(ctx, m, req.Leaf)
	if err != nil {
		return CreateResponse{}, err
	}
	at := ""
	if ok {
		at = leaf.id()
	}
	return s.fork(ctx, m, at, req.NewSessionID, req.DisplayName)
}

func (s *Store) fork(ctx context.Context, from Meta, at, sid, name string) (CreateResponse, error) {
	if sid == "" {
		sid = newSessionID(subjects.SessionRegion(from.SessionID))
	} else if err := s.noHistory(ctx, sid); err != nil {
		return CreateResponse{}, err
	}
	if name == "" {
		name = from.DisplayName
	}
	now := s.nowMs()
	m := Meta{
		SessionID: sid, DisplayName: name, CreatedAt: now, UpdatedAt: now,
		ActiveLeaf: at, ForkedFrom: &ForkPoint{SessionID: from.SessionID, EntryID: at}, Summary: from.Summary,
	}
	if err := s.createMeta(ctx, m); err != nil {
		return CreateResponse{}, err
	}
	return CreateResponse{SessionID: sid}, nil
}
