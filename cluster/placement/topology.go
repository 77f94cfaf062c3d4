package placement

import (
	"hash/fnv"
	"slices"

	"github.com/asynkron/protoactor-go/cluster"
)

// topology is an immutable snapshot of the cluster members, replaced as a
// whole on every *cluster.ClusterTopology event (never protoactor's
// MemberList, whose reads are not locked).
type topology struct {
	byID    map[string]*cluster.Member
	members []*cluster.Member // sorted by id
}

func newTopology(ms []*cluster.Member) *topology {
	t := &topology{byID: make(map[string]*cluster.Member, len(ms))}
	for _, m := range ms {
		if m == nil || m.Id == "" {
			continue
		}
		t.byID[m.Id] = m
		t.members = append(t.members, m)
	}
	slices.SortFunc(t.members, func(a, b *cluster.Member) int {
		switch {
		case a.Id < b.Id:
			return -1
		case a.Id > b.Id:
			return 1
		}
		return 0
	})
	return t
}

// member returns the live member with that id, or nil.
func (t *topology) member(id string) *cluster.Member {
	if t == nil {
		return nil
	}
	return t.byID[id]
}

// pick returns the member that rendezvous hashing assigns key to, among
// the members that list kind, pass accepting and are not excluded; nil if
// there is none. When prefer is set and holds for some of those members,
// the pick is among them only (a session homed in a region goes to a
// member of that region while one accepts it). Every member computes the
// same answer from the same topology, so concurrent first calls meet at
// one placement actor.
func (t *topology) pick(kind, key string, accepting func(string, string) bool, excluded map[string]bool, prefer func(string) bool) *cluster.Member {
	if t == nil {
		return nil
	}
	var best, bestPreferred *cluster.Member
	var bestScore, bestPreferredScore uint64
	for _, m := range t.members {
		if excluded[m.Id] || !slices.Contains(m.Kinds, kind) || (accepting != nil && !accepting(m.Id, kind)) {
			continue
		}
		s := score(m.Id, key)
		if best == nil || s > bestScore {
			best, bestScore = m, s
		}
		if prefer != nil && prefer(m.Id) && (bestPreferred == nil || s > bestPreferredScore) {
			bestPreferred, bestPreferredScore = m, s
		}
	}
	if bestPreferred != nil {
		return bestPreferred
	}
	return best
}

// score is FNV-1a 64 of member id and key, finished with the splitmix64
// mixer so that ids differing in one character still spread evenly.
func score(memberID, key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(memberID))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
