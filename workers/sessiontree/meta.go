package sessiontree

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Meta is a session's metadata, one JSON value per session in [MetaBucket]
// (in its home region's copy for a session "<region>.<name>"). It is a
// cache of the entry stream that every writer updates by compare-and-set;
// the entries are the truth (see the package doc's "Crash safety").
type Meta struct {
	SessionID   string `json:"session_id"`
	DisplayName string `json:"display_name,omitempty"`
	// CreatedAt and UpdatedAt are Unix milliseconds.
	CreatedAt int64 `json:"created_at"`
	UpdatedAt int64 `json:"updated_at"`
	// ActiveLeaf is the entry an append without parent_id goes under, and
	// the leaf messages and entries read by default; empty while the
	// session has no history.
	ActiveLeaf string `json:"active_leaf,omitempty"`
	// EntryCount counts the session's own entries (not those a fork
	// shares with the session it was forked from).
	EntryCount uint64 `json:"entry_count"`
	// ForkedFrom is where a fork or clone branched off: its history is
	// the path from the root to that entry of that session.
	ForkedFrom *ForkPoint `json:"forked_from,omitempty"`
	// Summary is one line for lists: the first user text appended,
	// truncated.
	Summary string `json:"summary,omitempty"`
	// LastSeq is bookkeeping: the stream sequence of the newest own entry
	// this meta accounts for (0: none). A newer entry on the session's
	// subject means a writer stopped between its publish and its meta
	// update; readers and the next append fold it in.
	LastSeq uint64 `json:"last_seq,omitempty"`
}

// ForkPoint names the entry a session was forked at.
type ForkPoint struct {
	SessionID string `json:"session_id"`
	// EntryID is empty for a clone of a session that had no entries.
	EntryID string `json:"entry_id,omitempty"`
}

// Limits of the session metadata.
const (
	// MaxDisplayNameLen bounds display_name in bytes.
	MaxDisplayNameLen = 256
	// SummaryLen bounds the one-line summaries, in runes.
	SummaryLen = 120
)

func validDisplayName(s string) error {
	if len(s) > MaxDisplayNameLen {
		return invalid("display_name is longer than %d bytes", MaxDisplayNameLen)
	}
	if !utf8.ValidString(s) {
		return invalid("display_name is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return invalid("display_name contains a control character")
		}
	}
	return nil
}

// loadMeta reads the meta of sid: not_found when the session does not
// exist. A missing meta of a session with entries (deleted to repair it)
// is rebuilt first ([Store.rebuildMeta]).
func (s *Store) loadMeta(ctx context.Context, sid string) (Meta, uint64, error) {
	kv, err := s.metaKV(ctx, sid)
	if err != nil {
		return Meta{}, 0, err
	}
	var ent jetstream.KeyValueEntry
	get := func() error {
		return engine.RetryRead(ctx, func(ctx context.Context) (err error) {
			ent, err = kv.Get(ctx, sid)
			return err
		})
	}
	err = get()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		m, rev, rerr := s.rebuildMeta(ctx, kv, sid)
		if !errors.Is(rerr, jetstream.ErrKeyExists) {
			return m, rev, rerr
		}
		err = get() // another writer made it meanwhile
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Meta{}, 0, notFound("session %s does not exist", sid)
	}
	if err != nil {
		return Meta{}, 0, storeErr(ctx, err, "read session %s", sid)
	}
	var m Meta
	if err := json.Unmarshal(ent.Value(), &m); err != nil || m.SessionID != sid {
		return Meta{}, 0, wire.Errorf(wire.CodeInternal, "meta of session %s does not decode (`nats kv del %s %s` rebuilds it from the session's newest entry; a fork loses its link to its parent)", sid, kv.Bucket(), sid)
	}
	s.meta.put(m, ent.Revision())
	return m, ent.Revision(), nil
}

// rebuildMeta writes the meta of sid, missing from kv, from the newest
// entry on its subject: the meta is a cache of the entries, and deleting
// it (`nats kv del`) is how one that does not decode is repaired. A fork
// loses its link to the session it was forked from (its path still reads
// through it). Without an entry, the session does not exist: not_found.
// jetstream.ErrKeyExists means another writer wrote the meta meanwhile.
func (s *Store) rebuildMeta(ctx context.Context, kv jetstream.KeyValue, sid string) (Meta, uint64, error) {
	last, ok, foreign, err := s.lastOwn(ctx, sid, 0)
	if err != nil {
		return Meta{}, 0, err
	}
	if !ok {
		return Meta{}, 0, notFound("session %s does not exist", sid)
	}
	now := s.nowMs()
	m := Meta{SessionID: sid, CreatedAt: now, UpdatedAt: now}
	foldInto(&m, last, userSummary(last.rec), now)
	m.LastSeq = max(m.LastSeq, foreign)
	data, err := wire.MarshalJSON(m)
	if err != nil {
		return Meta{}, 0, wire.Wrap(wire.CodeInternal, err, "encode meta")
	}
	rev, err := kv.Create(ctx, sid, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return Meta{}, 0, err
	}
	if err != nil {
		return Meta{}, 0, storeErr(ctx, err, "rebuild session %s", sid)
	}
	s.opts.logger.Warn("session meta missing; rebuilt from the newest entry", "session_id", sid, "entry_id", last.id(), "entry_count", m.EntryCount)
	s.meta.put(m, rev)
	return m, rev, nil
}

// currentMeta is the meta of sid as this store knows it (view: with its
// kept fold applied, see deferred.go) and as stored at revision rev: the
// cached one when no write is known to have passed it, else read
// (loadMeta).
func (s *Store) currentMeta(ctx context.Context, sid string) (view, stored Meta, rev uint64, err error) {
	stored, rev, ok := s.meta.get(sid)
	if !ok {
		if stored, rev, err = s.loadMeta(ctx, sid); err != nil {
			return Meta{}, Meta{}, 0, err
		}
	}
	return s.withKept(stored), stored, rev, nil
}

// maxCASAttempts bounds a compare-and-set loop on one meta key.
const maxCASAttempts = 64

// updateMeta applies fn to the current meta of sid under compare-and-set,
// retrying when another writer got there first. fn returns false to leave
// the meta as it is.
func (s *Store) updateMeta(ctx context.Context, sid string, fn func(*Meta) (bool, error)) (Meta, error) {
	return s.updateMetaFrom(ctx, sid, nil, 0, fn)
}

// updateMetaFrom is updateMeta whose first attempt starts from known, as
// stored at revision rev, instead of reading the meta (nil: read it).
// The write carries sid's kept fold (deferred.go), if any.
func (s *Store) updateMetaFrom(ctx context.Context, sid string, known *Meta, rev uint64, fn func(*Meta) (bool, error)) (m Meta, err error) {
	kv, err := s.metaKV(ctx, sid)
	if err != nil {
		return Meta{}, err
	}
	if k := s.takeKept(sid); k != nil {
		inner := fn
		fn = func(m *Meta) (bool, error) {
			folded := foldInto(m, k.last, k.summary, k.atMs)
			change, err := inner(m)
			return folded || change, err
		}
		defer func() {
			if err != nil {
				s.restoreKept(sid, k)
			}
		}()
	}
	for range maxCASAttempts {
		var m Meta
		if known != nil {
			m, known = *known, nil
		} else {
			var err error
			if m, rev, err = s.loadMeta(ctx, sid); err != nil {
				return Meta{}, err
			}
		}
		change, err := fn(&m)
		if err != nil || !change {
			return m, err
		}
		data, err := wire.MarshalJSON(m)
		if err != nil {
			return Meta{}, wire.Wrap(wire.CodeInternal, err, "encode meta")
		}
		nrev, err := kv.Update(ctx, sid, data, rev)
		if err == nil {
			s.meta.put(m, nrev)
			return m, nil
		}
		s.meta.drop(sid)
		if !isCASConflict(err) {
			return Meta{}, storeErr(ctx, err, "write session %s", sid)
		}
	}
	return Meta{}, wire.Errorf(wire.CodeConflict, "session %s: too many concurrent writers", sid)
}

// isCASConflict reports a lost compare-and-set (KV update or expected
// last subject sequence).
func isCASConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}

// fold accounts for n, an own entry of sid, in the meta: when the meta
// has not seen it yet, n becomes the newest entry (last_seq, entry_count
// from its ordinal) and the active leaf. Entries are folded in sequence
// order, so folding n also accounts for every older entry. summary, when
// not empty, becomes the session's summary if it has none.
func (s *Store) fold(ctx context.Context, sid string, n node, summary string) (Meta, error) {
	return s.foldFrom(ctx, sid, nil, 0, n, summary)
}

// foldFrom is fold whose first compare-and-set starts from known, read at
// revision rev (nil: read the meta).
func (s *Store) foldFrom(ctx context.Context, sid string, known *Meta, rev uint64, n node, summary string) (Meta, error) {
	now := s.opts.now().UnixMilli()
	return s.updateMetaFrom(ctx, sid, known, rev, func(m *Meta) (bool, error) {
		return foldInto(m, n, summary, now), nil
	})
}

// userSummary is the list summary an entry gives a session: the first
// text of a user message, on one line, truncated.
func userSummary(r record) string {
	if r.Type != TypeMessage || r.Message == nil || r.Message.Role != agent.RoleUser {
		return ""
	}
	for _, c := range r.Message.Content {
		if c.Type == agent.ContentText && strings.TrimSpace(c.Text) != "" {
			return oneLine(c.Text, SummaryLen)
		}
	}
	return ""
}

// oneLine folds whitespace runs (newlines included) into single spaces,
// drops control characters and invalid UTF-8, and truncates to n runes,
// the last being "…" when s was cut.
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) && !unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)[:n-1]
	return strings.TrimRight(string(runes), " ") + "…"
}
