package sessiontree

import (
	"sync"

	"github.com/iii-on-nats/iii/subjects"
)

// leafCacheSize bounds the [leafCache]: the entries appended last, one per
// recently active session in practice.
const leafCacheSize = 1024

// leafCacheMaxBytes keeps big entries out of the cache (they would hold
// memory for a read saved): those whose encoded record is bigger, however
// the bytes are held (text, a call's arguments, custom data, a summary).
const leafCacheMaxBytes = 16 << 10

// leafCache remembers the last entries the store appended, by home region
// and stream sequence (each region's copy of the stream numbers its own
// entries). Entries are immutable (the stream refuses deletes), so a
// cached entry is never stale; the cache only saves the direct get of the
// active leaf when a session's next append goes under it. Oldest entries
// are dropped first.
type leafCache struct {
	mu    sync.Mutex
	nodes map[leafKey]node
	order []leafKey // ring of the cached keys, oldest at next
	next  int
}

// leafKey names an entry: the home region of its copy and its sequence.
type leafKey struct {
	region string
	seq    uint64
}

// put caches n, whose encoded record is size bytes, unless it is big.
func (c *leafCache) put(n node, size int) {
	if size > leafCacheMaxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		c.nodes = make(map[leafKey]node, leafCacheSize)
		c.order = make([]leafKey, 0, leafCacheSize)
	}
	k := leafKey{subjects.SessionRegion(n.sid), n.seq}
	if _, ok := c.nodes[k]; ok {
		return
	}
	if len(c.order) < leafCacheSize {
		c.order = append(c.order, k)
	} else {
		delete(c.nodes, c.order[c.next])
		c.order[c.next] = k
		c.next = (c.next + 1) % leafCacheSize
	}
	c.nodes[k] = n
}

// get returns the entry at seq in the copy of region, if cached.
func (c *leafCache) get(region string, seq uint64) (node, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[leafKey{region, seq}]
	return n, ok
}
