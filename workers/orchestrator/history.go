package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Functions of the session tree worker the orchestrator calls.
const (
	sessionEnsure      = "session::ensure"
	sessionMessages    = "session::messages"
	sessionAppendBatch = "session::append_batch"
)

// appendTimeout bounds one transcript append.
const appendTimeout = 30 * time.Second

var _ session.History = (*history)(nil)

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
}

// appendOp is one append in flight; done closes when it ended.
type appendOp struct {
	done chan struct{}
	err  error
}

func newHistory(e *engine.Engine, pub *publisher) *history {
	return &history{e: e, pub: pub, tail: map[string]*appendOp{}}
}

// pathEntry is one message of session::messages.
type pathEntry struct {
	EntryID string        `json:"entry_id"`
	Message agent.Message `json:"message"`
}

func (h *history) Load(ctx context.Context, sid string) ([]agent.Message, error) {
	// A grain loads the transcript when it activates or a run starts:
	// another process may have emitted this session's events since this
	// one last did, so the next seq is read from the stream again.
	h.pub.Forget(sid)
	if err := h.Flush(ctx, sid); err != nil {
		return nil, err
	}
	var out struct {
		Messages []pathEntry `json:"messages"`
	}
	err := h.e.Trigger(ctx, sessionMessages, map[string]string{"session_id": sid}, &out)
	if errors.Is(err, wire.ErrNotFound) {
		return nil, nil // no session yet: nothing said
	}
	if err != nil {
		return nil, fmt.Errorf("transcript of %s: %w", sid, err)
	}
	msgs := make([]agent.Message, len(out.Messages))
	for i, pe := range out.Messages {
		msgs[i] = pe.Message
	}
	return msgs, nil
}

func (h *history) Append(_ context.Context, sid, id string, msgs []agent.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	op := &appendOp{done: make(chan struct{})}
	h.mu.Lock()
	prev := h.tail[sid]
	h.tail[sid] = op
	h.mu.Unlock()
	req := map[string]any{"session_id": sid, "messages": msgs, "dedup_id": dedupID(sid, id)}
	go func() {
		defer close(op.done)
		if prev != nil {
			<-prev.done
			if prev.err != nil {
				op.err = prev.err // keep the order: nothing after a failed append
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
		defer cancel()
		if err := h.e.Trigger(ctx, sessionAppendBatch, req, nil); err != nil {
			op.err = fmt.Errorf("append to the transcript of %s: %w", sid, err)
		}
	}()
	return nil
}

func (h *history) Flush(ctx context.Context, sid string) error {
	h.mu.Lock()
	op := h.tail[sid]
	h.mu.Unlock()
	if op != nil {
		select {
		case <-op.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		h.mu.Lock()
		if h.tail[sid] == op {
			delete(h.tail, sid)
		}
		h.mu.Unlock()
		if op.err != nil {
			return op.err
		}
	}
	return h.pub.Flush(ctx, sid)
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
