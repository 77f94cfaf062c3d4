package sessiontree

import "sync"

// leafCacheSize bounds the [leafCache]: the entries appended last, one per
// recently active session in practice.
const leafCacheSize = 1024

// leafCacheMaxBytes keeps big entries out of the cache (their message
// would hold memory for a read saved).
const leafCacheMaxBytes = 16 << 10

// leafCache remembers the last entries the store appended, by stream
// sequence. Entries are immutable (the stream refuses deletes), so a
// cached entry is never stale; the cache only saves the direct get of the
// active leaf when a session's next append goes under it. Oldest entries
// are dropped first.
type leafCache struct {
	mu    sync.Mutex
	nodes map[uint64]node
	order []uint64 // ring of the cached sequences, oldest at next
	next  int
}

func (c *leafCache) put(n node) {
	if n.rec.Message != nil && approxSize(n) > leafCacheMaxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		c.nodes = make(map[uint64]node, leafCacheSize)
		c.order = make([]uint64, 0, leafCacheSize)
	}
	if _, ok := c.nodes[n.seq]; ok {
		return
	}
	if len(c.order) < leafCacheSize {
		c.order = append(c.order, n.seq)
	} else {
		delete(c.nodes, c.order[c.next])
		c.order[c.next] = n.seq
		c.next = (c.next + 1) % leafCacheSize
	}
	c.nodes[n.seq] = n
}

func (c *leafCache) get(seq uint64) (node, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[seq]
	return n, ok
}

// approxSize is the bytes of text an entry's message holds.
func approxSize(n node) int {
	size := 0
	for _, c := range n.rec.Message.Content {
		size += len(c.Text) + len(c.Data)
	}
	return size
}
