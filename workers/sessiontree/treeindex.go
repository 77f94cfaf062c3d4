package sessiontree

import (
	"context"
	"strings"
	"sync"
	"time"
)

// Bounds of the [treeCache].
const (
	// treeCacheBytes bounds the cache's memory: the strings of its
	// nodes plus treeNodeBytes per node. A tree larger alone is not
	// kept (its pages each read the session again).
	treeCacheBytes = 32 << 20
	// treeNodeBytes is what a node holds beyond its strings (the node,
	// its place in the position and child count maps).
	treeNodeBytes = 256
	// treeCacheTTL is how long a tree is kept after its last page.
	treeCacheTTL = time.Minute
)

// treeIndex is the tree of one session as session::tree lists it: each
// entry as its one-line node, never its record, so that a session of
// large entries is not held to list it. Its nodes are the fork's shared
// path then the session's own entries up to last; appends extend it.
// A cached index is read and extended under its [treeCache]'s lock.
type treeIndex struct {
	sid string
	// created and fork tell the session apart from one deleted and made
	// anew under its id (or whose meta was rebuilt without its fork).
	created int64
	fork    string
	// last is the newest sequence the index accounts for.
	last     uint64
	nodes    []TreeNode // ChildrenCount unset: see children
	pos      map[string]int
	children map[string]int
	bytes    int
	used     time.Time
}

func newTreeIndex(m Meta) *treeIndex {
	t := &treeIndex{sid: m.SessionID, created: m.CreatedAt, fork: forkEntry(m), pos: map[string]int{}, children: map[string]int{}}
	return t
}

// forkEntry is the entry a fork's tree starts from ("": none).
func forkEntry(m Meta) string {
	if m.ForkedFrom == nil {
		return ""
	}
	return m.ForkedFrom.EntryID
}

// treeNodeOf is the node of n, with nothing of n's record but copies of
// short strings: the summary of a large text would otherwise keep the
// text.
func treeNodeOf(n *node, sid string) TreeNode {
	if n.sid != sid {
		sid = strings.Clone(n.sid)
	}
	return TreeNode{
		EntryID: n.id(), ParentID: n.rec.ParentID, Type: n.rec.Type, Timestamp: n.rec.Timestamp,
		Summary: strings.Clone(entrySummary(n.rec)), SessionID: sid,
	}
}

// add appends nodes (the session's entries after t.last, oldest first;
// last the newest sequence they account for), passing over those the
// index has (two pages that extend it at once read the same entries).
func (t *treeIndex) add(nodes []TreeNode, last uint64) {
	for i := range nodes {
		n := &nodes[i]
		if _, ok := t.pos[n.EntryID]; ok {
			continue
		}
		t.pos[n.EntryID] = len(t.nodes)
		t.nodes = append(t.nodes, *n)
		if n.ParentID != "" {
			t.children[n.ParentID]++
		}
		t.bytes += treeNodeBytes + len(n.EntryID) + len(n.ParentID) + len(n.Summary) + len(n.SessionID)
	}
	t.last = max(t.last, last)
}

// window copies at most n nodes from the one at start, with their child
// counts (an empty list, not nil, when there are none).
func (t *treeIndex) window(start, n int) []TreeNode {
	start = min(start, len(t.nodes))
	end := min(start+n, len(t.nodes))
	out := make([]TreeNode, end-start)
	copy(out, t.nodes[start:end])
	for i := range out {
		out[i].ChildrenCount = t.children[out[i].EntryID]
	}
	return out
}

// buildTree reads the tree of session m (refreshed): the fork's shared
// path, then every entry of the session, each made its node as it is
// read.
func (s *Store) buildTree(ctx context.Context, m Meta) (*treeIndex, error) {
	t := newTreeIndex(m)
	if fp := forkEntry(m); fp != "" {
		leaf, err := s.getID(ctx, m.SessionID, fp)
		if err != nil {
			return nil, err
		}
		p, err := s.path(ctx, leaf)
		if err != nil {
			return nil, err
		}
		shared := make([]TreeNode, len(p))
		for i := range p {
			shared[i] = treeNodeOf(&p[i], m.SessionID)
		}
		t.add(shared, 0)
	}
	own, last, err := s.treeNodes(ctx, m.SessionID, 1)
	if err != nil {
		return nil, err
	}
	t.add(own, max(last, m.LastSeq))
	return t, nil
}

// treeNodes reads the entries of session sid from sequence from on, each
// made its node as it is read, and the sequence of the last.
func (s *Store) treeNodes(ctx context.Context, sid string, from uint64) ([]TreeNode, uint64, error) {
	var out []TreeNode
	var last uint64
	err := s.scan(ctx, sid, from, 0, 0, func(n node) (bool, error) {
		out = append(out, treeNodeOf(&n, sid))
		last = n.seq
		return true, nil
	})
	return out, last, err
}

// pageTree is the tree of session m for a page of session::tree: one
// that continues a read takes the index an earlier page of it kept
// ([treeCache]), reading only the entries appended since; any other
// reads the session.
func (s *Store) pageTree(ctx context.Context, m Meta, continues bool) (*treeIndex, error) {
	if continues {
		if t, from, ok := s.trees.get(m); ok {
			if from == 0 {
				return t, nil
			}
			own, last, err := s.treeNodes(ctx, m.SessionID, from)
			if err != nil {
				return nil, err
			}
			s.trees.extend(t, own, max(last, m.LastSeq))
			return t, nil
		}
	}
	return s.buildTree(ctx, m)
}

// treeCache keeps the trees that pages of session::tree read for a page
// that said more follow, by session, so that the next pages of the read
// read only what was appended meanwhile: reading every page of a tree of
// N entries reads N entries, not N per page, and holds one line a node,
// not the entries. An entry never changes, so a kept tree is stale only
// by the entries appended since, which its next page reads (the meta's
// last_seq says whether there are). The last page of a read drops it;
// otherwise the least recently used trees go first, and any after
// treeCacheTTL.
type treeCache struct {
	mu    sync.Mutex
	trees map[string]*treeIndex
	bytes int
	// budget is treeCacheBytes (tests lower it).
	budget int
	now    func() time.Time
}

func newTreeCache() *treeCache {
	return &treeCache{trees: map[string]*treeIndex{}, budget: treeCacheBytes, now: time.Now}
}

// get returns the kept tree of session m, if any, and the sequence to
// read it on from (0: it is up to date).
func (c *treeCache) get(m Meta) (*treeIndex, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.trees[m.SessionID]
	if !ok {
		return nil, 0, false
	}
	now := c.now()
	if now.Sub(t.used) > treeCacheTTL || t.created != m.CreatedAt || t.fork != forkEntry(m) {
		c.dropLocked(m.SessionID)
		return nil, 0, false
	}
	t.used = now
	if m.LastSeq > t.last {
		return t, t.last + 1, true
	}
	return t, 0, true
}

// extend adds to t (kept or not) the nodes of the entries appended since
// it was read.
func (c *treeCache) extend(t *treeIndex, nodes []TreeNode, last uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.trees[t.sid] == t
	before := t.bytes
	t.add(nodes, last)
	if !kept {
		return
	}
	c.bytes += t.bytes - before
	c.fitLocked(t.sid)
}

// position is where the nodes after after start in t (-1: after is not
// a node of t), and how many nodes t has.
func (c *treeCache) position(t *treeIndex, after string) (start, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if after != "" {
		i, ok := t.pos[after]
		if !ok {
			return -1, len(t.nodes)
		}
		start = i + 1
	}
	return start, len(t.nodes)
}

// window is t.window under the cache's lock (t may be kept, and
// extended by another page).
func (c *treeCache) window(t *treeIndex, start, n int) []TreeNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return t.window(start, n)
}

// put keeps t, unless it is larger than the whole budget, dropping
// expired trees and then the least recently used ones to make room.
func (c *treeCache) put(t *treeIndex) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.trees[t.sid]; ok && old == t {
		t.used = c.now()
		return
	}
	c.dropLocked(t.sid)
	if t.bytes > c.budget {
		return
	}
	t.used = c.now()
	c.trees[t.sid] = t
	c.bytes += t.bytes
	c.fitLocked(t.sid)
}

// fitLocked drops expired trees, then the least recently used ones other
// than keep, until the cache is within its budget; then keep itself if it
// alone is over.
func (c *treeCache) fitLocked(keep string) {
	now := c.now()
	for sid, t := range c.trees {
		if sid != keep && now.Sub(t.used) > treeCacheTTL {
			c.dropLocked(sid)
		}
	}
	for c.bytes > c.budget && len(c.trees) > 1 {
		var oldest string
		var at time.Time
		for sid, t := range c.trees {
			if sid != keep && (at.IsZero() || t.used.Before(at)) {
				oldest, at = sid, t.used
			}
		}
		c.dropLocked(oldest)
	}
	if c.bytes > c.budget {
		c.dropLocked(keep)
	}
}

// drop forgets t (its read is done).
func (c *treeCache) drop(t *treeIndex) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trees[t.sid] == t {
		c.dropLocked(t.sid)
	}
}

func (c *treeCache) dropLocked(sid string) {
	if t, ok := c.trees[sid]; ok {
		c.bytes -= t.bytes
		delete(c.trees, sid)
	}
}
