package membership

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/nats-io/nats.go/jetstream"
)

// view is one provider's picture of the live members, built from the watch
// of "<cluster>.*". It is not safe for concurrent use (Provider.mu guards
// it).
//
// A member id that left (delete, purge, expiry marker, sweep) is
// remembered in gone and never comes back: proto.actor blocks it for good,
// so an entry that reappears under it (a late heartbeat of a member that
// was presumed dead) must not be offered to placement either.
type view struct {
	prefix string        // "<cluster>."
	self   string        // own member id; "" for a client
	stale  time.Duration // sweep threshold, in server time
	synced bool          // the watch's initial values are in

	members map[string]*seenEntry
	gone    map[string]struct{}
	newest  time.Time // newest server timestamp the watch delivered
}

type seenEntry struct {
	Entry
	at  time.Time // server timestamp of its last put (or of the end of an outage)
	rev uint64    // KV revision of its last put
}

// change is what one update did to the view.
type change struct {
	topology bool // members joined or left, or a member's address or kinds changed
	selfGone bool // the own entry went away
	// selfExpired: the bucket expired the own entry (its heartbeats could
	// not land for the bucket's TTL, an outage): write it again now.
	selfExpired bool
	// swept are the members the sweep dropped, and departed members that
	// wrote again, with the revision of their last put: a member deletes
	// their keys, so that a member that was only cut off learns, when it
	// is back, that it is out.
	swept map[string]uint64
}

func (c *change) merge(o change) {
	c.topology = c.topology || o.topology
	c.selfGone = c.selfGone || o.selfGone
	c.selfExpired = c.selfExpired || o.selfExpired
	for id, rev := range o.swept {
		if c.swept == nil {
			c.swept = map[string]uint64{}
		}
		c.swept[id] = rev
	}
}

func newView(clusterName, self string, stale time.Duration) *view {
	return &view{
		prefix:  clusterName + ".",
		self:    self,
		stale:   stale,
		members: map[string]*seenEntry{},
		gone:    map[string]struct{}{},
	}
}

// apply folds one watch update into the view. at is the server's timestamp
// of the message (KeyValueEntry.Created). An update it cannot use (foreign
// key, undecodable value) leaves the view as it was and returns an error
// to log.
func (v *view) apply(key string, op jetstream.KeyValueOp, value []byte, at time.Time) (change, error) {
	return v.applyRev(key, op, value, at, 0)
}

// applyRev is apply with the update's KV revision.
func (v *view) applyRev(key string, op jetstream.KeyValueOp, value []byte, at time.Time, rev uint64) (change, error) {
	if !v.newest.IsZero() && at.Sub(v.newest) > v.stale/2 {
		// Nothing landed in the bucket for half a lifetime, though every
		// live member heartbeats several times per lifetime: NATS was out
		// (a stream leader election after a node died), not everyone
		// died. Give everyone a fresh lifetime from now, or the first put
		// after the outage would sweep all the others before their own
		// heartbeats land.
		//
		// This holds for the watch's initial values too (one message per
		// key, so a gap there proves nothing either): a member that joins
		// as the bucket comes back (the killed node restarting) sees its
		// own put after the survivors' last ones from before the outage,
		// and must not sweep them — it would delete their keys, and every
		// survivor would be expelled at once.
		for _, m := range v.members {
			m.at = at
		}
	}
	if at.After(v.newest) {
		v.newest = at
	}
	id, ok := strings.CutPrefix(key, v.prefix)
	if !ok || id == "" || strings.Contains(id, ".") {
		return change{}, fmt.Errorf("%w: key %q is not in this cluster", ErrInvalidEntry, key)
	}
	switch op {
	case jetstream.KeyValueDelete:
		return v.remove(id), nil
	case jetstream.KeyValuePurge:
		return v.expire(id), nil
	case jetstream.KeyValuePut:
	default:
		return change{}, fmt.Errorf("%w: key %q: operation %v", ErrInvalidEntry, key, op)
	}
	if _, left := v.gone[id]; left {
		// A member that was presumed dead wrote again: a put it sent
		// while cut off landed after the sweeper's delete (NATS clients
		// flush what they buffered), or it never saw the delete (its new
		// watch's initial values hold only its own put). Delete it again,
		// so that it sees its key go and knows it is out.
		return change{swept: map[string]uint64{id: rev}}, nil
	}
	e, err := decodeEntry(value)
	if err != nil {
		return change{}, fmt.Errorf("key %q: %w", key, err)
	}
	if e.ID != id {
		return change{}, fmt.Errorf("%w: key %q holds member %q", ErrInvalidEntry, key, e.ID)
	}
	old, known := v.members[id]
	v.members[id] = &seenEntry{Entry: e, at: at, rev: rev}
	return change{topology: !known || !sameAddress(old.Entry, e)}, nil
}

// expire handles the bucket's expiry marker (a purge: this package itself
// only ever deletes) for member id. The stream leader expires by its own
// clock, which runs on while the bucket is out, so an expiry is no
// evidence that the member died: the sweep alone decides that, in server
// time with outages forgiven. A member that is known stays; if it is
// alive its next heartbeat writes the entry again (the own entry is
// rewritten at once: selfExpired).
func (v *view) expire(id string) change {
	if _, known := v.members[id]; !known {
		// Not gone either: if the member is alive (the marker is the
		// last message of its key in a joiner's initial values), its
		// next put is taken, as every other view takes it.
		return change{}
	}
	return change{selfExpired: id == v.self && v.self != ""}
}

// remove drops member id for good.
func (v *view) remove(id string) change {
	v.gone[id] = struct{}{}
	_, known := v.members[id]
	delete(v.members, id)
	return change{topology: known, selfGone: id == v.self && v.self != ""}
}

// sweep drops members whose last put is more than stale older than the
// reference: this is how a crashed member is detected (the bucket's own
// TTL is only a much longer garbage collection, see bucketTTL). Measured
// in server time, a stalled watcher (a paused process) cannot make live
// members look old, and an outage of NATS itself makes nobody old
// (applyRev).
//
// A member's reference is its own last put seen, not the newest message:
// it declares others dead only on the evidence of its own heartbeats
// landing, and never sweeps itself (while its heartbeats fail, the others
// sweep it and delete its key, which expels it). A client's reference is
// the newest message.
func (v *view) sweep() change {
	var c change
	if v.stale <= 0 {
		return c
	}
	ref := v.newest
	if v.self != "" {
		s, ok := v.members[v.self]
		if !ok {
			return c // own put not seen yet: no evidence
		}
		ref = s.at
	}
	for id, m := range v.members {
		if id != v.self && ref.Sub(m.at) > v.stale {
			c.merge(v.remove(id))
			c.merge(change{swept: map[string]uint64{id: m.rev}})
		}
	}
	return c
}

// sameAddress reports whether a and b place grains alike.
func sameAddress(a, b Entry) bool {
	return a.Host == b.Host && a.Port == b.Port && slices.Equal(a.Kinds, b.Kinds)
}

// topology is the live set in proto.actor's terms, sorted by id.
func (v *view) topology() cluster.Members {
	out := make(cluster.Members, 0, len(v.members))
	for _, e := range v.entries() {
		out = append(out, &cluster.Member{Id: e.ID, Host: e.Host, Port: int32(e.Port), Kinds: e.Kinds})
	}
	return out
}

// entries copies the live entries, sorted by id.
func (v *view) entries() []Entry {
	out := make([]Entry, 0, len(v.members))
	for _, m := range v.members {
		out = append(out, m.clone())
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// accepting reports whether member id is live, up and hosts kind.
func (v *view) accepting(id, kind string) bool {
	m, ok := v.members[id]
	return ok && m.Accepts(kind)
}
