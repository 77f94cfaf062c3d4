package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nuid"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Functions of the session tree worker the orchestrator calls.
const (
	sessionEnsure      = "session::ensure"
	sessionMessages    = "session::messages"
	sessionGet         = "session::get"
	sessionAppendBatch = "session::append_batch"
)

// appendTimeout bounds one transcript append.
const appendTimeout = 30 * time.Second

// appendAttempt bounds one try of an append (appendTimeout bounds them all).
const appendAttempt = 5 * time.Second

var (
	_ session.History           = (*history)(nil)
	_ session.Forgetter         = (*history)(nil)
	_ session.IdentifiedHistory = (*history)(nil)
)

// history is the grain's History port on the session tree: the transcript
// is the session's active path as the model sees it (session::messages:
// compactions applied), and appends are session::append_batch calls, sent
// in order per session and awaited at Flush together with the event
// publishes. Each append carries a dedup id derived from its effect id, so
// an outbox delivered again after a crash does not append twice (within
// the tree's dedup window).
type history struct {
	e   *engine.Engine
	pub *publisher

	mu   sync.Mutex
	tail map[string]*appendOp // the last append of each session
	// known is what this process knows of each active session's path, so
	// a run that starts on an unchanged tree reads one meta instead of the
	// whole path.
	known map[string]*knownPath
	// paths tells when a known path is still current without asking
	// session::get.
	paths *pathWatch
}

// knownPath is a session's path as this process last read or wrote it:
// the tree's entry count and active leaf then, and the messages. A tree
// whose meta shows another count or leaf changed under us (a compaction,
// another writer, set_active_leaf) and is read again.
type knownPath struct {
	count uint64
	leaf  string
	msgs  []agent.Message
	// id names msgs while they only grow by this process's appends (a
	// read of a changed path makes a new knownPath): the grain's history
	// id, which lets a model call send only what is new.
	id string
	// metaWritten is set once an append since the read went out without
	// defer_meta: the first append after a read writes the session's meta
	// at once, so that another process holding an older path of the
	// session sees that someone else appended (its meta watch), even if
	// this process stops before the tree writes the deferred metas of its
	// later appends.
	metaWritten bool
	// states are the (count, leaf) pairs of the path since it was read,
	// the newest last and at most maxOwnStates: a meta write the watch
	// shows with one of them is this process's own, written late (the
	// tree defers the meta of these appends, defer_meta), not a change.
	states []pathState
}

// pathState is a session's entry count and active leaf after one of
// this process's appends (or its read).
type pathState struct {
	count uint64
	leaf  string
}

// maxOwnStates bounds knownPath.states: the tree writes a deferred meta
// within two seconds, a handful of turns.
const maxOwnStates = 64

// own reports whether count and leaf are one of k's states.
func (k *knownPath) own(count uint64, leaf string) bool {
	for i := len(k.states) - 1; i >= 0; i-- {
		if k.states[i].count == count {
			return k.states[i].leaf == leaf
		}
	}
	return false
}

// sessionMeta is the part of session::get's answer used here.
type sessionMeta struct {
	ActiveLeaf string `json:"active_leaf"`
	EntryCount uint64 `json:"entry_count"`
}

// appendOp is one append in flight; done closes when it ended.
type appendOp struct {
	done chan struct{}
	err  error
}

func newHistory(e *engine.Engine, pub *publisher, paths *pathWatch) *history {
	return &history{e: e, pub: pub, paths: paths, tail: map[string]*appendOp{}, known: map[string]*knownPath{}}
}

// pathEntry is one message of session::messages.
type pathEntry struct {
	EntryID string        `json:"entry_id"`
	Message agent.Message `json:"message"`
}

// forGood marks an error of the session tree that trying again cannot
// help (session.ErrUnstorable): it refused the request (an entry over its
// size limit) or failed inside (a meta that does not decode). The grain
// then fails the run, saying why, instead of trying the same checkpoint at
// every redelivery.
func forGood(err error) error {
	if errors.Is(err, wire.ErrInvalidPayload) || errors.Is(err, wire.ErrInternal) {
		return fmt.Errorf("%w: %w", session.ErrUnstorable, err)
	}
	return err
}

func (h *history) Load(ctx context.Context, sid string) ([]agent.Message, error) {
	msgs, _, err := h.LoadIdentified(ctx, sid)
	return msgs, err
}

// readAttempt bounds one attempt of a transcript read (read).
var readAttempt = 10 * time.Second

// read calls the session tree's read function fn, asking again when an
// attempt times out: a request taken by a worker whose node then died is
// never answered, and the grain's load would wait out its whole deadline
// (30 s), then for its step's redelivery. A read is safe to repeat.
func (h *history) read(ctx context.Context, fn string, req, out any) error {
	return engine.Retry(ctx, readAttempt, func(ctx context.Context) error {
		return h.e.Trigger(ctx, fn, req, out)
	}, func(err error) bool { return wire.From(err).Code == wire.CodeTimeout })
}

// LoadIdentified is Load with the transcript's id: the same id as an
// earlier load means the transcript only grew since, by this process's
// appends ([session.IdentifiedHistory]).
func (h *history) LoadIdentified(ctx context.Context, sid string) ([]agent.Message, string, error) {
	if err := h.Flush(ctx, sid); err != nil {
		return nil, "", err
	}
	h.mu.Lock()
	if k := h.known[sid]; k != nil && h.paths.current(sid, k.own) {
		msgs := slices.Clip(k.msgs)
		h.mu.Unlock()
		return msgs, k.id, nil
	}
	h.mu.Unlock()
	h.paths.maybeStart()
	h.paths.track(sid)
	var meta sessionMeta
	err := h.read(ctx, sessionGet, map[string]string{"session_id": sid}, &meta)
	if errors.Is(err, wire.ErrNotFound) {
		h.forget(sid)
		return nil, "", nil // no session yet: nothing said
	}
	if err != nil {
		return nil, "", fmt.Errorf("transcript of %s: %w", sid, forGood(err))
	}
	h.mu.Lock()
	if k := h.known[sid]; k != nil && k.count == meta.EntryCount && k.leaf == meta.ActiveLeaf {
		msgs := slices.Clip(k.msgs)
		h.mu.Unlock()
		return msgs, k.id, nil
	}
	h.mu.Unlock()
	out, err := h.readMessages(ctx, sid)
	if errors.Is(err, wire.ErrNotFound) {
		h.forget(sid)
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("transcript of %s: %w", sid, forGood(err))
	}
	msgs := make([]agent.Message, len(out.Messages))
	for i, pe := range out.Messages {
		msgs[i] = pe.Message
	}
	id := ""
	h.mu.Lock()
	if out.Leaf == meta.ActiveLeaf {
		// The count was read before the path: a writer in between makes
		// it look changed next time (one read more, never one less).
		id = nuid.Next()
		h.known[sid] = &knownPath{count: meta.EntryCount, leaf: out.Leaf, msgs: msgs, id: id,
			states: []pathState{{meta.EntryCount, out.Leaf}}}
	} else {
		delete(h.known, sid)
	}
	h.mu.Unlock()
	return slices.Clip(msgs), id, nil
}

// pathMessages is the part of session::messages's answer the
// orchestrator reads.
type pathMessages struct {
	Leaf      string      `json:"leaf"`
	Messages  []pathEntry `json:"messages"`
	Truncated bool        `json:"truncated"`
}

// maxMessagePages bounds the pages of one transcript read (a session tree
// that kept answering truncated would otherwise be read for ever).
const maxMessagePages = 10_000

// readMessages reads sid's active path with session::messages, every
// page of it: an answer that would outgrow the server's max payload is
// cut (truncated), and the rest is read after its last message on the
// same leaf, so the model sees the whole transcript and never only its
// oldest part.
func (h *history) readMessages(ctx context.Context, sid string) (pathMessages, error) {
	var out pathMessages
	if err := h.read(ctx, sessionMessages, map[string]string{"session_id": sid}, &out); err != nil {
		return out, err
	}
	for page := 1; out.Truncated; page++ {
		if len(out.Messages) == 0 || page == maxMessagePages {
			return out, fmt.Errorf("%w: session::messages answered truncated after %d messages in %d pages", wire.ErrInternal, len(out.Messages), page)
		}
		var next pathMessages
		req := map[string]string{"session_id": sid, "leaf": out.Leaf, "after": out.Messages[len(out.Messages)-1].EntryID}
		if err := h.read(ctx, sessionMessages, req, &next); err != nil {
			return out, err
		}
		if len(next.Messages) == 0 && next.Truncated {
			return out, fmt.Errorf("%w: session::messages answered an empty truncated page", wire.ErrInternal)
		}
		out.Messages = append(out.Messages, next.Messages...)
		out.Truncated = next.Truncated
	}
	return out, nil
}

// Forget drops what this process knows of sid's path (its grain
// passivated).
func (h *history) Forget(sid string) {
	h.forget(sid)
	h.paths.untrack(sid)
}

func (h *history) forget(sid string) {
	h.mu.Lock()
	delete(h.known, sid)
	h.mu.Unlock()
}

// appended records that this process appended msgs to sid's path, ending
// at leaf.
func (h *history) appended(sid string, msgs []agent.Message, leaf string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := h.known[sid]
	if k == nil {
		return
	}
	k.count += uint64(len(msgs))
	k.leaf = leaf
	k.msgs = append(k.msgs, msgs...)
	if len(k.states) == maxOwnStates {
		k.states = append(k.states[:0], k.states[1:]...)
	}
	k.states = append(k.states, pathState{k.count, leaf})
}

func (h *history) Append(ctx context.Context, sid, id string, msgs []agent.Message) error {
	return h.append(ctx, sid, id, msgs, 0)
}

// AppendReplayed implements [session.ReplayedHistory]: the append carries
// dedup_since_ms, the record's write less replayMargin (for carried
// effects and the clocks), and the session tree looks the dedup id up
// among the entries stored since instead of relying on its ten-minute
// window.
func (h *history) AppendReplayed(ctx context.Context, sid, id string, msgs []agent.Message, writtenMs int64) error {
	return h.append(ctx, sid, id, msgs, max(time.UnixMilli(writtenMs).Add(-replayMargin).UnixMilli(), 1))
}

// append publishes msgs asynchronously (Append), with dedup_since_ms
// when sinceMs is not 0.
func (h *history) append(ctx context.Context, sid, id string, msgs []agent.Message, sinceMs int64) error {
	if len(msgs) == 0 {
		return nil
	}
	op := &appendOp{done: make(chan struct{})}
	req := map[string]any{"session_id": sid, "messages": msgs, "dedup_id": dedupID(sid, id)}
	h.mu.Lock()
	prev := h.tail[sid]
	h.tail[sid] = op
	// defer_meta: this port holds the session's path itself (known), so
	// the tree may write its meta once per burst of appends; the meta
	// watch (pathWatch) sees that write match the held path. The first
	// append after a read of the path is written at once (metaWritten).
	if k := h.known[sid]; k != nil {
		if k.metaWritten {
			req["defer_meta"] = true
		}
		k.metaWritten = true
	}
	h.mu.Unlock()
	if sinceMs != 0 {
		req["dedup_since_ms"] = sinceMs
	}
	// The append outlives the caller's ctx (it is awaited at Flush) but
	// keeps its trace.
	parent := context.WithoutCancel(ctx)
	h.e.Go(func() {
		defer close(op.done)
		if prev != nil {
			<-prev.done
			if prev.err != nil {
				op.err = prev.err // keep the order: nothing after a failed append
				return
			}
		}
		ctx, cancel := context.WithTimeout(parent, appendTimeout)
		defer cancel()
		var res struct {
			EntryIDs []string `json:"entry_ids"`
		}
		// The dedup id makes a repeated append that did land harmless.
		err := engine.Retry(ctx, appendAttempt, func(ctx context.Context) error {
			return h.e.Trigger(ctx, sessionAppendBatch, req, &res)
		}, transientCall)
		if errors.Is(err, wire.ErrNotFound) {
			// A session whose turn record predates its tree entry (or
			// whose tree meta was lost): make it, then append.
			h.forget(sid)
			if err = h.ensure(ctx, sid); err == nil {
				err = h.e.Trigger(ctx, sessionAppendBatch, req, &res)
			}
		}
		if err != nil {
			h.forget(sid)
			op.err = fmt.Errorf("append to the transcript of %s: %w", sid, forGood(err))
			return
		}
		if n := len(res.EntryIDs); n == len(msgs) {
			h.appended(sid, msgs, res.EntryIDs[n-1])
		} else {
			h.forget(sid)
		}
	})
	return nil
}

func (h *history) Flush(ctx context.Context, sid string) error {
	if op := h.lastAppend(sid); op != nil {
		select {
		case <-op.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		h.dropAppend(sid, op)
		if op.err != nil {
			return op.err
		}
	}
	return h.pub.Flush(ctx, sid)
}

// Settled implements [session.SettledHistory]: whether sid's appends and
// event acks are all in, without waiting for them; session.ErrUndelivered
// when an event's publish failed (Flush publishes it again).
func (h *history) Settled(sid string) (bool, error) {
	if op := h.lastAppend(sid); op != nil {
		select {
		case <-op.done:
		default:
			return false, nil
		}
		if op.err != nil {
			return false, op.err
		}
		h.dropAppend(sid, op)
	}
	done, failed := h.pub.settled(sid)
	if failed {
		return false, session.ErrUndelivered
	}
	return done, nil
}

// lastAppend is sid's latest append (the others finished before it).
func (h *history) lastAppend(sid string) *appendOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tail[sid]
}

// dropAppend forgets op, which finished, unless another append followed.
func (h *history) dropAppend(sid string, op *appendOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tail[sid] == op {
		delete(h.tail, sid)
	}
}

// ensure creates the session in the tree if it is new.
func (h *history) ensure(ctx context.Context, sid string) error {
	err := h.e.Trigger(ctx, sessionEnsure, map[string]string{"session_id": sid}, nil)
	if err != nil {
		we := wire.From(err)
		if we.Code == wire.CodeFunctionNotFound {
			return wire.Errorf(wire.CodeUnavailable, "no session worker answers %s: start the session module", sessionEnsure)
		}
		return we
	}
	return nil
}

// dedupID maps an effect id onto the tree's dedup id alphabet.
func dedupID(sid, id string) string {
	sum := sha256.Sum256([]byte(sid + "\x00" + id))
	return "h" + hex.EncodeToString(sum[:20])
}
