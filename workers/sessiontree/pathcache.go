package sessiontree

import (
	"sync"
	"time"

	"github.com/iii-on-nats/iii/subjects"
)

// Bounds of the [pathCache].
const (
	// pathCacheBytes bounds the cache's memory: the encoded records of
	// its paths plus pathNodeBytes per entry. A path larger alone is not
	// kept (its pages each read it again).
	pathCacheBytes = 64 << 20
	// pathNodeBytes is what a decoded entry holds beyond its encoded
	// record (the node, the record, the message and its content).
	pathNodeBytes = 512
	// pathCacheTTL is how long a path is kept after its last page: the
	// next page of a read comes at once, a read left half done is
	// dropped.
	pathCacheTTL = time.Minute
)

// pathCache keeps the paths that paged answers (session::messages,
// session::entries, session::export_html) read for a page that said more
// follow, by leaf, so that the next pages of the read, which name that
// leaf, read no path: reading every page of a path of N entries reads N
// entries, not N per page. The path from the root to an entry never
// changes (entries are immutable and the stream refuses deletes), so a
// kept path is never stale and needs no invalidation: appends make new
// leaves. A store that serves a page without the path (another replica
// served the first) reads it once and keeps it. The last page of a read
// drops it; otherwise the least recently used paths go first, and any
// after pathCacheTTL.
type pathCache struct {
	mu    sync.Mutex
	paths map[leafKey]*keptPath
	bytes int
	// budget is pathCacheBytes (tests lower it).
	budget int
	now    func() time.Time
}

type keptPath struct {
	nodes []node
	bytes int
	used  time.Time
}

func newPathCache() *pathCache {
	return &pathCache{paths: map[leafKey]*keptPath{}, budget: pathCacheBytes, now: time.Now}
}

// pathKey names the path to leaf: its home region's copy and sequence.
func pathKey(leaf node) leafKey { return leafKey{subjects.SessionRegion(leaf.sid), leaf.seq} }

// get returns the kept path to leaf, if any. The path's last entry is
// checked to be leaf (a stream deleted and made anew numbers other
// entries alike).
func (c *pathCache) get(leaf node) ([]node, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := pathKey(leaf)
	kp, ok := c.paths[k]
	if !ok {
		return nil, false
	}
	now := c.now()
	last := &kp.nodes[len(kp.nodes)-1]
	if now.Sub(kp.used) > pathCacheTTL || last.sid != leaf.sid || last.rec.N != leaf.rec.N ||
		last.rec.Depth != leaf.rec.Depth || last.rec.ParentID != leaf.rec.ParentID || last.rec.Timestamp != leaf.rec.Timestamp {
		c.dropLocked(k)
		return nil, false
	}
	kp.used = now
	return kp.nodes, true
}

// put keeps path p (not empty; its readers must not change it), unless
// it is larger than the whole budget, dropping expired paths and then the
// least recently used ones to make room.
func (c *pathCache) put(p []node) {
	size := 0
	for i := range p {
		size += p[i].size + pathNodeBytes
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(p) == 0 || size > c.budget {
		return
	}
	k := pathKey(p[len(p)-1])
	c.dropLocked(k)
	now := c.now()
	for key, kp := range c.paths {
		if now.Sub(kp.used) > pathCacheTTL {
			c.dropLocked(key)
		}
	}
	for c.bytes+size > c.budget {
		var oldest leafKey
		var at time.Time
		for key, kp := range c.paths {
			if at.IsZero() || kp.used.Before(at) {
				oldest, at = key, kp.used
			}
		}
		c.dropLocked(oldest)
	}
	c.paths[k] = &keptPath{nodes: p, bytes: size, used: now}
	c.bytes += size
}

// drop forgets the path to leaf (its read is done).
func (c *pathCache) drop(leaf node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(pathKey(leaf))
}

func (c *pathCache) dropLocked(k leafKey) {
	if kp, ok := c.paths[k]; ok {
		c.bytes -= kp.bytes
		delete(c.paths, k)
	}
}
