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
// bytes of the SHA-256 of its JSON, in hex; within computes the same
// from the encoding it measures): a
// steering check's record names the items it takes in by these, and their
// removal takes only items that still head the inbox with the same
// digests. An inbox drained by session::inbox_drain and pushed to between
// the check's read and the removal heads with items no run saw, which a
// removal by count lost.
func itemDigest(m agent.Message) string {
	data, _ := wire.MarshalJSON(m)
	return digestJSON(data)
}

// digestJSON is the digest of an item's JSON encoding.
func digestJSON(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:16])
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
	var raws []json.RawMessage
	if err := json.Unmarshal(value, &raws); err != nil {
		b.warn("an inbox that does not decode is read as empty; its next write replaces it", key, value, err)
		return nil
	}
	limit := b.itemLimit()
	valid := make([]agent.Message, 0, len(raws))
	for _, raw := range raws {
		// An item over an inbox's bound (written by another client: a
		// push refuses it) could never be taken into a turn record.
		if int64(len(raw)) > limit {
			continue
		}
		var m agent.Message
		if json.Unmarshal(raw, &m) == nil && m.Role == agent.RoleUser && m.Validate() == nil {
			valid = append(valid, m)
		}
	}
	if len(valid) < len(raws) {
		b.warn("inbox items that are not valid user messages, or larger than an inbox holds, are skipped; the inbox's next write drops them", key, value,
			fmt.Errorf("%d of %d items", len(raws)-len(valid), len(raws)))
	}
	return valid
}

// itemLimit is the most an inbox holds, as JSON: a quarter of the max
// payload (push).
func (b inbox) itemLimit() int64 {
	if b.kvs.e == nil {
		return 1 << 62
	}
	return b.kvs.e.Conn().MaxPayload() / 4
}

// within returns the longest head of items within limit bytes as JSON
// (one item at least) and maxInboxItems items, and their digests. A value
// another client wrote may hold more than one turn record can take in:
// the rest waits for the next steering check. The count matters as much
// as the bytes: each item costs the record some 200 bytes beyond its JSON
// twice (its message_complete event's envelope, the effect id, its
// digest in taken), so thousands of small items within the bytes made a
// record too large to store.
// itemOverhead is what within counts for an item beyond its JSON: the
// record carries each item twice and some 200 bytes more, so on a server
// with a small max payload many small items alone outgrew the record.
const itemOverhead = 256

func within(items []agent.Message, limit int64) ([]agent.Message, []string) {
	if len(items) == 0 {
		return nil, nil
	}
	ds := make([]string, 0, min(len(items), maxInboxItems))
	var size int64
	for i, m := range items {
		data, _ := wire.MarshalJSON(m)
		size += int64(len(data)) + 1 + itemOverhead
		if i > 0 && (size > limit || i >= maxInboxItems) {
			return items[:i], ds
		}
		ds = append(ds, digestJSON(data))
	}
	return items, ds
}

func (b inbox) warn(msg, key string, value []byte, err error) {
	if b.logger == nil {
		return
	}
	excerpt := value[:min(len(value), 200)]
	b.logger.Warn(msg, "key", key, "bytes", len(value), "value", string(excerpt), "error", err)
}

// errUnchanged, from an update's fn, leaves the inbox as it is: nothing
// is written (a removal that matched nothing, a requeue done before).
var errUnchanged = errors.New("inbox unchanged")

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
		if errors.Is(err, errUnchanged) {
			return cur, nil
		}
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
	limit := b.itemLimit()
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

// drain empties the inbox and returns its items. Items too large
// together for one reply (another client wrote the value: a push keeps an
// inbox within a quarter of the max payload) are refused and left where
// they are: emptied first, they would be lost with the reply.
func (b inbox) drain(ctx context.Context, sid, name string) ([]agent.Message, error) {
	limit := int64(1 << 62)
	if b.kvs.e != nil {
		limit = b.kvs.e.Conn().MaxPayload() - drainReplyRoom
	}
	return b.update(ctx, sid, inboxKey(sid, name), func(cur []agent.Message) ([]agent.Message, error) {
		if data, _ := wire.MarshalJSON(cur); int64(len(data)) > limit {
			return nil, wire.Errorf(wire.CodeConflict, "inbox %s of %s holds %d bytes of items, too many for one reply: left as it is (its next steering check reads it)", name, sid, len(data))
		}
		return nil, nil
	})
}

// drainReplyRoom is what session::inbox_drain's reply needs beyond its
// items: the envelope and the reply's headers.
const drainReplyRoom = 1 << 10

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
	limit := b.itemLimit()
	var mark session.InboxMark
	steering, mark.Steering = within(steering, limit)
	followups, mark.Followups = within(followups, limit)
	return steering, followups, mark, nil
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
			if drop == 0 {
				return nil, errUnchanged
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
				return nil, errUnchanged // requeued before
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
