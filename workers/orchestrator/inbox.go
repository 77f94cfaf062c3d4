package orchestrator

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Inbox names.
const (
	InboxSteering = "steering"
	InboxFollowup = "followup"
	// maxInboxItems bounds one inbox.
	maxInboxItems = 256
)

// inbox keeps each session's steering and follow-up messages in KV as a
// JSON array, changed by compare-and-set. With watch, a steering check of
// a session whose inboxes are known to be empty reads nothing.
type inbox struct {
	kvs    sessionKV
	watch  *inboxWatch
	logger *slog.Logger // nil: discard
}

// itemDigest identifies an inbox item by its encoding (the first 16
// bytes of the SHA-256 of its JSON, in hex): a steering check's record
// names the items it takes in by these, and their removal takes only
// items that still head the inbox with the same digests. An inbox drained
// by session::inbox_drain and pushed to between the check's read and the
// removal heads with items no run saw, which a removal by count lost.
func itemDigest(m agent.Message) string {
	data, _ := wire.MarshalJSON(m)
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:16])
}

func digests(items []agent.Message) []string {
	if len(items) == 0 {
		return nil
	}
	out := make([]string, len(items))
	for i, m := range items {
		out[i] = itemDigest(m)
	}
	return out
}

func inboxKey(sid, name string) string { return sid + "." + name }

// decode reads an inbox's stored value. What another client wrote there
// that is not a JSON array of user messages (`nats kv put` by hand, an
// older or foreign writer) is dropped with a warning, never an error: a
// check that failed on it would halt the session's grain at every
// redelivery and wedge the session, and push and drain could not repair
// it. The next write of the inbox replaces the value.
func (b inbox) decode(key string, value []byte) []agent.Message {
	if len(value) == 0 {
		return nil
	}
	var items []agent.Message
	if err := json.Unmarshal(value, &items); err != nil {
		b.warn("an inbox that does not decode is read as empty; its next write replaces it", key, value, err)
		return nil
	}
	valid := items[:0]
	for _, m := range items {
		if m.Role == agent.RoleUser && m.Validate() == nil {
			valid = append(valid, m)
		}
	}
	if len(valid) < len(items) {
		b.warn("inbox items that are not valid user messages are skipped; the inbox's next write drops them", key, value,
			fmt.Errorf("%d of %d items", len(items)-len(valid), len(items)))
	}
	return valid
}

func (b inbox) warn(msg, key string, value []byte, err error) {
	if b.logger == nil {
		return
	}
	excerpt := value[:min(len(value), 200)]
	b.logger.Warn(msg, "key", key, "bytes", len(value), "value", string(excerpt), "error", err)
}

// update applies fn to the inbox under CAS, retrying on conflict.
func (b inbox) update(ctx context.Context, sid, key string, fn func([]agent.Message) ([]agent.Message, error)) ([]agent.Message, error) {
	kv, err := b.kvs.of(ctx, sid)
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 64; attempt++ {
		var (
			cur []agent.Message
			rev uint64
		)
		ent, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, wire.Wrap(wire.CodeUnavailable, err, "inbox")
		default:
			rev = ent.Revision()
			cur = b.decode(key, ent.Value())
		}
		next, err := fn(cur)
		if err != nil {
			return nil, err
		}
		if rev == 0 && len(next) == 0 {
			return cur, nil
		}
		data, _ := wire.MarshalJSON(next)
		var wrote uint64
		if rev == 0 {
			wrote, err = kv.Create(ctx, key, data)
		} else if len(next) == 0 {
			err = kv.Delete(ctx, key, jetstream.LastRevision(rev))
		} else {
			wrote, err = kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			if wrote > 0 && subjects.SessionRegion(sid) == "" {
				// Checks on this node see the items at once; an
				// emptied inbox is left to the watch (reading a
				// while longer is harmless).
				b.watch.saw(key, wrote, true)
			}
			return cur, nil
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			// The items together outgrow the one value an inbox is: as
			// full as at maxInboxItems, and no retry makes room.
			return nil, wire.Errorf(wire.CodeConflict, "inbox %s is full: its items would take %d bytes, over the server's max payload", key, len(data))
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSeq(err) {
			return nil, wire.Wrap(wire.CodeUnavailable, err, "inbox")
		}
	}
	return nil, wire.Errorf(wire.CodeConflict, "inbox %s: too many concurrent writers", key)
}

// push appends msg to the inbox. An inbox holds at most a quarter of the
// max payload (as JSON), as run::start's messages do: a steering check
// takes all of it into one turn record write, which carries each message
// twice (the transcript append and its message_complete event). A larger
// inbox made that write too large for the server, failing the run with the
// items still queued, so every later run failed the same way. A quarter
// also lets session::inbox_drain answer with all of it.
func (b inbox) push(ctx context.Context, sid, name string, msg agent.Message) (int, error) {
	limit := b.kvs.e.Conn().MaxPayload() / 4
	if one, _ := wire.MarshalJSON([]agent.Message{msg}); int64(len(one)) > limit {
		return 0, wire.Errorf(wire.CodeInvalidPayload, "item is %d bytes as JSON: an inbox holds at most %d (a quarter of the server's max payload)", len(one), limit)
	}
	var n int
	_, err := b.update(ctx, sid, inboxKey(sid, name), func(cur []agent.Message) ([]agent.Message, error) {
		if len(cur) >= maxInboxItems {
			return nil, wire.Errorf(wire.CodeConflict, "inbox %s of %s is full (%d items)", name, sid, maxInboxItems)
		}
		next := append(cur, msg)
		if data, _ := wire.MarshalJSON(next); int64(len(data)) > limit {
			return nil, wire.Errorf(wire.CodeConflict, "inbox %s of %s is full: its items would take %d bytes as JSON, over %d (a quarter of the server's max payload)", name, sid, len(data), limit)
		}
		n = len(next)
		return next, nil
	})
	return n, err
}

func (b inbox) drain(ctx context.Context, sid, name string) ([]agent.Message, error) {
	return b.update(ctx, sid, inboxKey(sid, name), func([]agent.Message) ([]agent.Message, error) { return nil, nil })
}

func (b inbox) peek(ctx context.Context, sid, key string) ([]agent.Message, error) {
	kv, err := b.kvs.of(ctx, sid)
	if err != nil {
		return nil, err
	}
	ent, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "inbox")
	}
	return b.decode(key, ent.Value()), nil
}

// Peek implements session.Inbox. Inboxes the watch knows to be empty
// are not read (inboxwatch.go); otherwise the two are read at once: a
// steering check waits for one round trip, not two.
func (b inbox) Peek(ctx context.Context, sid string) ([]agent.Message, []agent.Message, session.InboxMark, error) {
	if b.watch.empty(sid) {
		return nil, nil, session.InboxMark{}, nil
	}
	var (
		followups []agent.Message
		ferr      error
		done      = make(chan struct{})
	)
	go func() {
		defer close(done)
		followups, ferr = b.peek(ctx, sid, inboxKey(sid, InboxFollowup))
	}()
	steering, err := b.peek(ctx, sid, inboxKey(sid, InboxSteering))
	<-done
	if err = cmp.Or(err, ferr); err != nil {
		return nil, nil, session.InboxMark{}, err
	}
	return steering, followups, session.InboxMark{Steering: digests(steering), Followups: digests(followups)}, nil
}

// Ack implements session.Inbox: it drops the items mark names that still
// head their inbox, matched by digest in order (an inbox_drain may have
// taken them, and a push followed; or an earlier Ack, before a crash,
// removed them already).
func (b inbox) Ack(ctx context.Context, sid string, mark session.InboxMark) error {
	for _, x := range []struct {
		name string
		ds   []string
	}{{InboxSteering, mark.Steering}, {InboxFollowup, mark.Followups}} {
		if len(x.ds) == 0 {
			continue
		}
		if _, err := b.update(ctx, sid, inboxKey(sid, x.name), func(cur []agent.Message) ([]agent.Message, error) {
			drop := min(len(x.ds), len(cur))
			for i := range drop {
				if itemDigest(cur[i]) != x.ds[i] {
					drop = i
					break
				}
			}
			return cur[drop:], nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// Requeue implements session.Inbox. It is idempotent, as delivering an
// outbox twice must be (a crash after the requeue and before the run's
// record was checkpointed delivers it again): follow-ups that already
// head the inbox, the same to the byte, are not put back twice.
func (b inbox) Requeue(ctx context.Context, sid string, msgs []agent.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	want, err := json.Marshal(msgs)
	if err != nil {
		return wire.Wrap(wire.CodeInternal, err, "requeue")
	}
	_, err = b.update(ctx, sid, inboxKey(sid, InboxFollowup), func(cur []agent.Message) ([]agent.Message, error) {
		if len(cur) >= len(msgs) {
			if head, err := json.Marshal(cur[:len(msgs)]); err == nil && bytes.Equal(head, want) {
				return cur, nil // requeued before
			}
		}
		return append(append([]agent.Message(nil), msgs...), cur...), nil
	})
	return err
}

// InboxPushRequest is session::inbox_push's request.
type InboxPushRequest struct {
	SessionID string        `json:"session_id"`
	Name      string        `json:"name"`
	Item      agent.Message `json:"item"`
}

// Validate checks the request.
func (r InboxPushRequest) Validate() error {
	if err := agent.ValidateSessionID(r.SessionID); err != nil {
		return err
	}
	if r.Name != InboxSteering && r.Name != InboxFollowup {
		return fmt.Errorf("name must be %q or %q", InboxSteering, InboxFollowup)
	}
	if r.Item.Role != agent.RoleUser {
		return errors.New("item must be a user message")
	}
	return r.Item.Validate()
}

// InboxDrainRequest is session::inbox_drain's request.
type InboxDrainRequest struct {
	SessionID string `json:"session_id"`
	Name      string `json:"name"`
}

// Validate checks the request.
func (r InboxDrainRequest) Validate() error {
	if err := agent.ValidateSessionID(r.SessionID); err != nil {
		return err
	}
	if r.Name != InboxSteering && r.Name != InboxFollowup {
		return fmt.Errorf("name must be %q or %q", InboxSteering, InboxFollowup)
	}
	return nil
}
