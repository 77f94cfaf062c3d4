package sessiontree

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// errNoEntry is returned by [Store.get] when no message is stored at the
// sequence; callers turn it into not_found or corrupt as fits.
var errNoEntry = errors.New("sessiontree: no entry at this sequence")

// maxBatch bounds the messages of one batch direct get; maxBatchBytes
// bounds its bytes (the server stops early and the loop asks again).
const (
	maxBatch      = 1024
	maxBatchBytes = 8 << 20
)

// get reads the entry stored at seq in the stream copy of session sid's
// home region (the copy that holds sid's whole history: a fork is homed
// where the session it forks is). It costs one direct get, and when that
// finds nothing, one get from the stream leader (in a cluster, a replica
// that answers direct gets may not have the newest entries yet).
func (s *Store) get(ctx context.Context, sid string, seq uint64) (node, error) {
	st, err := s.entries(ctx, sid)
	if err != nil {
		return node{}, err
	}
	s.fetched.Add(1)
	s.trips.Add(1)
	var msg *jetstream.RawStreamMsg
	err = engine.RetryRead(ctx, func(ctx context.Context) (err error) {
		msg, err = st.GetMsg(ctx, seq)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return s.leaderGet(ctx, subjects.SessionStream(EntryStream, sid), seq)
	}
	if err != nil {
		return node{}, storeErr(ctx, err, "read entry %s", FormatEntryID(seq))
	}
	return storedNode(msg.Subject, msg.Sequence, msg.Data)
}

// storedNode is the entry a read by sequence found: a message there that
// is not an entry (another client's) is no entry (errNoEntry).
func storedNode(subj string, seq uint64, data []byte) (node, error) {
	n, err := toNode(subj, seq, data)
	if errors.Is(err, errNotEntry) {
		return node{}, fmt.Errorf("%w: %w", errNoEntry, err)
	}
	return n, err
}

// leaderGet reads the entry stored at seq from the leader of stream.
func (s *Store) leaderGet(ctx context.Context, stream string, seq uint64) (node, error) {
	s.trips.Add(1)
	m, err := s.e.LeaderGet(ctx, stream, engine.LeaderGet{Seq: seq})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return node{}, errNoEntry
	}
	if err != nil {
		return node{}, storeErr(ctx, err, "read entry %s", FormatEntryID(seq))
	}
	return storedNode(m.Subject, m.Sequence, m.Data)
}

// getID reads the entry id names, which the store wrote itself (an active
// leaf, a parent pointer) in the history of session sid: a missing entry
// is a corrupt store.
func (s *Store) getID(ctx context.Context, sid, id string) (node, error) {
	seq, err := ParseEntryID(id)
	if err != nil {
		return node{}, corrupt("stored id %q", id)
	}
	n, err := s.get(ctx, sid, seq)
	if errors.Is(err, errNoEntry) {
		return node{}, corrupt("entry %s is missing", id)
	}
	return n, err
}

func toNode(subj string, seq uint64, data []byte) (node, error) {
	var n node
	err := n.decode(subj, seq, data)
	return n, err
}

// decode fills n with the entry stored at seq on subject subj. The
// session id is the whole rest of the subject: "<region>.<name>" for a
// session homed in a region.
func (n *node) decode(subj string, seq uint64, data []byte) error {
	sid, ok := strings.CutPrefix(subj, EntrySubjectPrefix)
	if !ok || sid == "" {
		return corrupt("entry %s on subject %q", FormatEntryID(seq), subj)
	}
	n.seq, n.sid, n.size = seq, sid, len(data)
	if err := decodeRecordInto(&n.rec, data, seq); err != nil {
		return wire.Wrap(wire.CodeInternal, notEntry{err}, "")
	}
	return nil
}

// lastOwn reads the newest entry on sid's subject; ok is false when the
// session has none. The newest message may not be an entry (another
// client published it): then the newest entry after after is looked for
// (none: ok false), and foreign is the sequence of that message.
func (s *Store) lastOwn(ctx context.Context, sid string, after uint64) (last node, ok bool, foreign uint64, err error) {
	n, ok, err := s.lastMessage(ctx, sid)
	if !errors.Is(err, errNotEntry) {
		return n, ok, 0, err
	}
	foreign = n.seq
	s.opts.logger.Warn("a message on a session's entry subject is not an entry; passed over", "session_id", sid,
		"sequence", foreign, "stream", subjects.SessionStream(EntryStream, sid), "error", err)
	if foreign <= after+1 {
		return node{}, false, foreign, nil
	}
	err = s.scan(ctx, sid, after+1, foreign-1, 0, func(e node) (bool, error) {
		last, ok = e, true
		return true, nil
	})
	return last, ok, foreign, err
}

// lastMessage decodes the newest message on sid's subject; ok is false
// when there is none.
func (s *Store) lastMessage(ctx context.Context, sid string) (node, bool, error) {
	st, err := s.entries(ctx, sid)
	if err != nil {
		return node{}, false, err
	}
	s.fetched.Add(1)
	s.trips.Add(1)
	var msg *jetstream.RawStreamMsg
	err = engine.RetryRead(ctx, func(ctx context.Context) (err error) {
		msg, err = st.GetLastMsgForSubject(ctx, EntrySubjectPrefix+sid)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return node{}, false, nil
	}
	if err != nil {
		return node{}, false, storeErr(ctx, err, "read session %s", sid)
	}
	n, err := toNode(msg.Subject, msg.Sequence, msg.Data)
	return n, err == nil, err
}

// batchRequest is the JSON request of a batch direct get.
type batchRequest struct {
	Seq      uint64 `json:"seq"`
	NextFor  string `json:"next_by_subj"`
	Batch    int    `json:"batch"`
	MaxBytes int    `json:"max_bytes"`
	// NoHeaders leaves out every header, the sequence and subject
	// included: the server then skips rewriting each stored header, which
	// dominates the cost of a batch of entries (stored with the
	// expected-sequence header of their publish).
	NoHeaders bool `json:"no_hdr,omitempty"`
	// StartTime starts the batch at the first message stored at or after
	// it (instead of Seq).
	StartTime *time.Time `json:"start_time,omitempty"`
}

// scan reads the entries of session sid from sequence from up to upTo (0:
// no bound), oldest first, at most limit of them (0: no limit), with batch
// direct gets: one request per [maxBatch] entries. fn returns false to
// stop.
func (s *Store) scan(ctx context.Context, sid string, from, upTo uint64, limit int, fn func(node) (bool, error)) error {
	stream, err := s.entriesName(ctx, sid)
	if err != nil {
		return err
	}
	subj := EntrySubjectPrefix + sid
	got := 0
	done := false
	each := func(n node) (bool, error) {
		if upTo > 0 && n.seq > upTo {
			done = true
			return false, nil
		}
		ok, err := fn(n)
		done = !ok
		return ok, err
	}
	for limit == 0 || got < limit {
		want := maxBatch
		if limit > 0 {
			want = min(want, limit-got)
		}
		n, last, more, err := s.batch(ctx, stream, batchRequest{Seq: from, NextFor: subj, Batch: want, MaxBytes: maxBatchBytes}, each)
		got += n
		if err != nil || done || !more || last == 0 {
			return err
		}
		from = last + 1
	}
	return nil
}

// batch runs one batch direct get on stream, handing each entry to fn.
// It returns how many entries fn saw, the last sequence, and whether the
// server has more matching messages.
func (s *Store) batch(ctx context.Context, stream string, req batchRequest, fn func(node) (bool, error)) (n int, last uint64, more bool, err error) {
	more, err = s.rawBatch(ctx, stream, req, func(msg *nats.Msg) (bool, error) {
		nd, err := directNode(msg)
		if errors.Is(err, errNotEntry) {
			// Another client's message on the subject: passed over.
			last = nd.seq
			return true, nil
		}
		if err != nil {
			return false, err
		}
		n++
		last = nd.seq
		return fn(nd)
	})
	return n, last, more, err
}

// rawBatch runs one batch direct get on stream (a copy of [EntryStream],
// engine.DirectGetBatch), handing each message to fn until it returns
// false. more reports whether the server has more matching messages.
func (s *Store) rawBatch(ctx context.Context, stream string, req batchRequest, fn func(*nats.Msg) (bool, error)) (more bool, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return false, wire.Wrap(wire.CodeInternal, err, "batch request")
	}
	s.trips.Add(1)
	got, end, err := engine.DirectGetBatch(ctx, s.nc, stream, body)
	if err != nil {
		return false, storeErr(ctx, err, "batch read of %s", req.NextFor)
	}
	more = end.Pending > 0
	for _, m := range got {
		s.fetched.Add(1)
		ok, err := fn(m)
		if err != nil || !ok {
			return false, err
		}
	}
	return more, nil
}

// entriesName is the name of the copy of [EntryStream] that holds
// session sid's entries, checked to exist (not_found for a region without
// one).
func (s *Store) entriesName(ctx context.Context, sid string) (string, error) {
	if _, err := s.entries(ctx, sid); err != nil {
		return "", err
	}
	return subjects.SessionStream(EntryStream, sid), nil
}

// directNode decodes one message of a direct get reply.
func directNode(msg *nats.Msg) (node, error) {
	seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return node{}, wire.Errorf(wire.CodeInternal, "direct get reply without a sequence")
	}
	return toNode(msg.Header.Get(jetstream.SubjectHeader), seq, msg.Data)
}

// path returns the entries from the root to leaf, oldest first. It costs
// two round trips per run on the path (one direct get for the run's last
// entry, one batch direct get for the rest) and reads only the path's
// entries.
func (s *Store) path(ctx context.Context, leaf node) ([]node, error) {
	rev := make([]node, 0, min(leaf.rec.Depth+1, 1<<16))
	cur := leaf
	for {
		rev = append(rev, cur)
		if cur.runStart() != cur.seq {
			var err error
			if rev, err = s.readRun(ctx, cur, rev); err != nil {
				return nil, err
			}
		}
		top := &rev[len(rev)-1]
		if top.rec.ParentID == "" {
			break
		}
		// A parent is in the copy of its child: a session's history
		// never leaves its home region.
		next, err := s.getID(ctx, top.sid, top.rec.ParentID)
		if err != nil {
			return nil, err
		}
		cur = next
	}
	// Every link, checked once: a corrupt record fails the read instead
	// of yielding a wrong history.
	for i := 0; i+1 < len(rev); i++ {
		child, parent := &rev[i], &rev[i+1]
		if child.rec.ParentID != parent.id() || child.rec.Depth != parent.rec.Depth+1 {
			return nil, corrupt("entry %s (depth %d) does not follow %s (depth %d)", child.id(), child.rec.Depth, parent.id(), parent.rec.Depth)
		}
	}
	if root := &rev[len(rev)-1]; root.rec.Depth != 0 {
		return nil, corrupt("root %s at depth %d", root.id(), root.rec.Depth)
	}
	slices.Reverse(rev)
	return rev, nil
}

// maxRunBytes bounds the bytes of one batch that reads (part of) a run
// (Store.runBytes, which tests lower).
const maxRunBytes = 32 << 20

// readRun appends to dst the entries of cur's run before cur, newest
// first. A run's entries follow one another on the session's subject, so
// one batch direct get from the run's first sequence reads exactly them;
// it asks for no headers, and each entry's sequence follows from its
// child's parent pointer (the first from cur's). A run the batch does not
// bring whole (over [maxRunBytes]) is read on by further batches
// ([Store.readRunRest]); what no batch brings (a replica behind the
// leader) is read entry by entry, following the parent pointers.
func (s *Store) readRun(ctx context.Context, cur node, dst []node) ([]node, error) {
	start := cur.runStart()
	k := int(cur.rec.Depth - cur.runDepth()) // entries before cur in its run
	subj := EntrySubjectPrefix + cur.sid
	stream, err := s.entriesName(ctx, cur.sid)
	if err != nil {
		return nil, err
	}
	data := make([][]byte, 0, k)
	_, err = s.rawBatch(ctx, stream, batchRequest{Seq: start, NextFor: subj, Batch: k, MaxBytes: s.runBytes, NoHeaders: true}, func(msg *nats.Msg) (bool, error) {
		data = append(data, msg.Data)
		return len(data) < k, nil
	})
	if err != nil {
		return nil, err
	}
	if len(data) > 0 && len(data) < k {
		if data, err = s.readRunRest(ctx, stream, subj, start, k, data); err != nil {
			return nil, err
		}
	}
	// data holds the run's first len(data) entries, oldest first; the
	// newer ones it lacks are read one by one.
	parent := cur.rec.ParentID
	for i := k - 1; i >= 0; i-- {
		if i < len(data) {
			seq, err := ParseEntryID(parent)
			if err != nil {
				return nil, corrupt("run of %s: parent %q", cur.id(), parent)
			}
			dst = append(dst, node{})
			if err := dst[len(dst)-1].decode(subj, seq, data[i]); err != nil {
				return nil, err
			}
		} else {
			n, err := s.getID(ctx, cur.sid, parent)
			if err != nil {
				return nil, err
			}
			dst = append(dst, n)
		}
		parent = dst[len(dst)-1].rec.ParentID
	}
	if first := &dst[len(dst)-1]; first.seq != start {
		return nil, corrupt("run of %s starts at %s, not %s", cur.id(), first.id(), FormatEntryID(start))
	}
	return dst, nil
}

// readRunRest reads on the run of k entries from start whose first
// entries (data, at least one) one batch brought, with batches that carry
// headers: each then knows its last sequence. The sequence of data's last
// entry is not known (its batch had no headers), so it is read again,
// after the one before it (its parent). Before, every entry of such a run
// was read one by one: a path over 32 MiB took a round trip per entry.
func (s *Store) readRunRest(ctx context.Context, stream, subj string, start uint64, k int, data [][]byte) ([][]byte, error) {
	from := start + 1
	if last := len(data) - 1; last > 0 {
		var r record
		if err := wire.Msgpack.Unmarshal(data[last], &r); err != nil {
			return data, nil // read one by one, which reports it
		}
		p, err := ParseEntryID(r.ParentID)
		if err != nil {
			return data, nil
		}
		data, from = data[:last], p+1
	}
	for len(data) < k {
		got := 0
		_, err := s.rawBatch(ctx, stream, batchRequest{Seq: from, NextFor: subj, Batch: k - len(data), MaxBytes: s.runBytes}, func(msg *nats.Msg) (bool, error) {
			seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
			if err != nil {
				return false, wire.Errorf(wire.CodeInternal, "direct get reply without a sequence")
			}
			data, from = append(data, msg.Data), seq+1
			got++
			return len(data) < k, nil
		})
		if err != nil {
			return nil, err
		}
		if got == 0 {
			break
		}
	}
	return data, nil
}

// isAncestorOrSelf reports whether a is b or one of b's ancestors. It
// walks b's path one run per round trip, stopping at a's depth.
func (s *Store) isAncestorOrSelf(ctx context.Context, a, b node) (bool, error) {
	cur := b
	for {
		if a.rec.Depth > cur.rec.Depth {
			return false, nil
		}
		if a.rec.Depth >= cur.runDepth() {
			// The ancestor at a's depth is in cur's run: a is it when a
			// is in that run (a run is a chain, one entry per depth).
			return a.runStart() == cur.runStart(), nil
		}
		rp := cur.runParent()
		if rp == "" {
			return false, nil
		}
		next, err := s.getID(ctx, cur.sid, rp)
		if err != nil {
			return false, err
		}
		cur = next
	}
}

// resolve reads entry id (a caller's) and checks that it is in the
// history of session m: one of its own entries, or the fork point or one
// of its ancestors. A malformed id is invalid_payload; any other id is
// not_found.
func (s *Store) resolve(ctx context.Context, m Meta, id, what string) (node, error) {
	seq, err := ParseEntryID(id)
	if err != nil {
		return node{}, invalid("%s: %v", what, err)
	}
	n, err := s.get(ctx, m.SessionID, seq)
	if errors.Is(err, errNoEntry) {
		return node{}, notFound("%s %s does not exist", what, id)
	}
	if err != nil {
		return node{}, err
	}
	if n.sid == m.SessionID {
		return n, nil
	}
	if m.ForkedFrom != nil && m.ForkedFrom.EntryID != "" {
		fp, err := s.getID(ctx, m.SessionID, m.ForkedFrom.EntryID)
		if err != nil {
			return node{}, err
		}
		ok, err := s.isAncestorOrSelf(ctx, n, fp)
		if err != nil {
			return node{}, err
		}
		if ok {
			return n, nil
		}
	}
	return node{}, notFound("%s %s is not in the history of session %s", what, id, m.SessionID)
}

// leafOf is the leaf a read starts from: the caller's leaf (checked to be
// in the session's history) or the active leaf. ok is false when the
// session has no history.
func (s *Store) leafOf(ctx context.Context, m Meta, leaf string) (node, bool, error) {
	if leaf != "" {
		n, err := s.resolve(ctx, m, leaf, "leaf")
		return n, err == nil, err
	}
	if m.ActiveLeaf == "" {
		return node{}, false, nil
	}
	n, err := s.getID(ctx, m.SessionID, m.ActiveLeaf)
	return n, err == nil, err
}
