package sandbox

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
)

// nodeBeat is a node's heartbeat, under [beatKey] in the records bucket.
type nodeBeat struct {
	Node string `json:"node"`
	// At is when it was written (Unix ms, by the writer's clock).
	At int64 `json:"at"`
	// StartedAt is when the writer's worker started (Unix ms).
	StartedAt int64 `json:"started_at"`
	// Root is the writer's root folder and Host its host name: once the
	// node is gone, a reaper on that host removes the root when empty
	// ([manager.removeGoneRoots]). Empty in older versions' heartbeats.
	Root string `json:"root,omitempty"`
	Host string `json:"host,omitempty"`
}

// plainNode matches the node names that are a KV key as they are.
var plainNode = regexp.MustCompile(`^[A-Za-z0-9][-_A-Za-z0-9]*(\.[-_A-Za-z0-9]+)*$`)

// beatKey is the KV key of node's heartbeat: "node.<node>", or for a name
// that is no valid key "node.=<hex of the name>" (a plain name never
// starts with '=').
func beatKey(node string) string {
	if plainNode.MatchString(node) {
		return "node." + node
	}
	return "node.=" + hex.EncodeToString([]byte(node))
}

// nodeState is what the heartbeats say about a node.
type nodeState struct {
	// known is false when the node never wrote a heartbeat (or its key
	// was removed).
	known bool
	// last is its last heartbeat: the later of the time it wrote in it and
	// the server's time of the write, so a live node whose clock is late
	// still looks alive.
	last time.Time
	rev  uint64
	// root and host are what the heartbeat says of the node's root folder.
	root, host string
}

// beatState reads a heartbeat entry; a value that does not decode counts
// by the server's time alone.
func beatState(ent jetstream.KeyValueEntry) (nodeBeat, nodeState) {
	st := nodeState{known: true, last: ent.Created(), rev: ent.Revision()}
	var b nodeBeat
	if err := json.Unmarshal(ent.Value(), &b); err == nil && b.At > 0 {
		if t := time.UnixMilli(b.At); t.After(st.last) {
			st.last = t
		}
		st.root, st.host = b.Root, b.Host
	}
	return b, st
}

// beat writes this node's heartbeat.
func (m *manager) beat(ctx context.Context) error {
	data, err := json.Marshal(nodeBeat{Node: m.o.node, At: m.o.now().UnixMilli(), StartedAt: m.started.UnixMilli(),
		Root: m.o.root, Host: m.host})
	if err != nil {
		return err
	}
	if _, err := m.kv.Put(ctx, beatKey(m.o.node), data); err != nil {
		return kvErr(err)
	}
	return nil
}

// nodeState reads node's heartbeat.
func (m *manager) nodeState(ctx context.Context, node string) (nodeState, error) {
	ent, err := m.kv.Get(ctx, beatKey(node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nodeState{}, nil
	}
	if err != nil {
		return nodeState{}, kvErr(err)
	}
	_, st := beatState(ent)
	return st, nil
}

// expiresAt is when rec's node reaps it for max_age: its recorded expiry,
// or (a record written before expires_at existed) created_at plus this
// node's max_age.
func (m *manager) expiresAt(rec Sandbox) time.Time {
	if rec.ExpiresAt > 0 {
		return time.UnixMilli(rec.ExpiresAt)
	}
	return time.UnixMilli(rec.CreatedAt).Add(m.o.maxAge)
}

// expiresAtOwn is the expiry this node gives its record rec (Unix ms).
func (m *manager) expiresAtOwn(rec Sandbox) int64 {
	return rec.CreatedAt + m.o.maxAge.Milliseconds()
}

// orphanReason says why rec, a record of another node, is an orphan, or
// "" when it is not: its node would still serve it. A record is an orphan
// when
//   - its node's last heartbeat is older than orphan_after, or
//   - it is past its expiry by more than orphan_after (its node, were it
//     alive, would have reaped it), or
//   - its node never wrote a heartbeat (a version before heartbeats, or
//     its key was removed) and it was not used for idle_ttl plus
//     orphan_after (its node, were it alive, would have reaped it idle).
func (m *manager) orphanReason(rec Sandbox, node nodeState, now time.Time) string {
	grace := m.o.orphanAfter
	if exp := m.expiresAt(rec); now.Sub(exp) > grace {
		return fmt.Sprintf("it was on node %s and expired at %s (max_age)", rec.Node, stamp(exp))
	}
	if node.known {
		if silent := now.Sub(node.last); silent > grace {
			return fmt.Sprintf("it was on node %s, gone since %s: no heartbeat for %s, %s %s",
				rec.Node, stamp(node.last), silent.Round(time.Second), SettingOrphanAfter, grace)
		}
		return ""
	}
	used := time.UnixMilli(max(rec.CreatedAt, rec.LastUsedAt))
	if now.Sub(used) > m.o.idleTTL+grace {
		return fmt.Sprintf("it was on node %s, which never wrote a heartbeat, and was last used at %s", rec.Node, stamp(used))
	}
	return ""
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// orphan reads rec's node's heartbeat and answers [manager.orphanReason].
func (m *manager) orphan(ctx context.Context, rec Sandbox) (string, error) {
	node, err := m.nodeState(ctx, rec.Node)
	if err != nil {
		return "", err
	}
	return m.orphanReason(rec, node, m.o.now()), nil
}

// otherNode answers a call for rec, a record of another node: unavailable
// while that node lives, not_found (wrapping ErrNoSandbox and ErrOrphan)
// once the record is an orphan.
func (m *manager) otherNode(ctx context.Context, rec Sandbox) error {
	why, err := m.orphan(ctx, rec)
	if err != nil {
		return err
	}
	if why != "" {
		return goneErr(rec, why)
	}
	return otherNode(rec)
}

func goneErr(rec Sandbox, why string) error {
	return wire.Wrap(wire.CodeNotFound, fmt.Errorf("%w %s: %s (%w); sandbox::create gives the session a new one",
		ErrNoSandbox, rec.SandboxID, why, ErrOrphan), "")
}

// takeOver deletes rec, an orphan, if its record is still at rev. deleted
// is false when it changed meanwhile: its node claimed it again, or
// another node took it over first; the caller reads it again.
func (m *manager) takeOver(ctx context.Context, rec Sandbox, rev uint64, why string) (deleted bool, err error) {
	err = m.kv.Delete(ctx, recordKey(rec.SessionID), jetstream.LastRevision(rev))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, kvErr(err)
	}
	m.logger.Info("sandbox orphan record deleted", slog.String("sandbox_id", rec.SandboxID),
		slog.String("session_id", rec.SessionID), slog.String("node", rec.Node), slog.String("reason", why))
	return true, nil
}

// scanned is one record read by [manager.scan].
type scanned struct {
	rec Sandbox
	rev uint64
	// bad is set for a record that does not decode (rec is zero);
	// written is when it was.
	bad     error
	written time.Time
}

// scan reads the whole bucket with one watcher (one ordered consumer,
// every latest value once): the records by session, those that do not
// decode apart, and the heartbeats by node. It fails rather than answer
// less than all of them.
func (m *manager) scan(ctx context.Context) (recs, bad map[string]scanned, beats map[string]nodeState, err error) {
	w, err := m.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, nil, kvErr(err)
	}
	defer func() { _ = w.Stop() }()
	recs, bad, beats = map[string]scanned{}, map[string]scanned{}, map[string]nodeState{}
	for {
		var ent jetstream.KeyValueEntry
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil, nil, wire.Errorf(wire.CodeUnavailable, "sandbox records: the scan ended early")
			}
			ent = e
		case <-ctx.Done():
			return nil, nil, nil, kvErr(ctx.Err())
		}
		if ent == nil {
			return recs, bad, beats, nil
		}
		if sid, ok := strings.CutPrefix(ent.Key(), "session."); ok {
			rec, err := decodeRecord(ent.Value())
			if err == nil && rec.SessionID != sid {
				err = fmt.Errorf("%w: %s names session %q", ErrBadRecord, ent.Key(), rec.SessionID)
			}
			if err != nil {
				bad[sid] = scanned{rev: ent.Revision(), bad: err, written: ent.Created()}
				continue
			}
			recs[sid] = scanned{rec: rec, rev: ent.Revision()}
			continue
		}
		if strings.HasPrefix(ent.Key(), "node.") {
			b, st := beatState(ent)
			if b.Node != "" && beatKey(b.Node) == ent.Key() {
				beats[b.Node] = st
			}
		}
	}
}
