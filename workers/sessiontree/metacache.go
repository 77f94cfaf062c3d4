package sessiontree

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/subjects"
)

// metaCacheSize bounds the metas a [metaCache] holds: one per recently
// active session in practice.
const metaCacheSize = 4096

// metaCache keeps the metas this store last read or wrote, and follows
// the writes to the primary copy of [MetaBucket] (a watch, headers only)
// so that it knows when one is not the newest any more. An append or a
// read of a session whose cached meta no write has passed then reads no
// meta: in a conversation every append read the meta its previous append
// had just written.
//
// The watch sees every write to the bucket, whoever makes it (this store,
// another process's, `nats kv put`), in the stream's order, and lags a
// write by the time the server takes to pass it on; a write this store
// makes counts at once. A meta used in that lag is one read a moment
// earlier, which a read could not rule out either: appends are still
// serialized by the entry stream (every publish expects the subject's
// last sequence, so an append that went unseen fails the publish, and the
// store reads again), and a meta write that did not append (a moved
// active leaf, a new display name) races an append as it always did.
// The watch delivers new writes only (not the bucket's state): a meta is
// cached when this store reads or writes it. Before the watch starts and
// after it stops, every meta is read; a watch that ends early (nats.go
// could not resume it) is started again ([metaCache.follow]). Sessions homed in a region keep
// their metas in the region's copy, which is not watched: they are
// always read.
type metaCache struct {
	mu      sync.Mutex
	running bool // the watch is on
	// seen is the newest revision known of each key written since the
	// watch started (the watch's or this store's own write). It is
	// trimmed to the cached keys when it grows past seenLimit; floor is
	// then the newest revision the watch had delivered, and a meta read
	// or written before it is not cached (a newer write of it may have
	// been forgotten).
	seen  map[string]uint64
	floor uint64
	last  uint64 // the newest revision the watch delivered
	metas map[string]cachedMeta
	// hits counts the metas served without a read.
	hits   atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
	// watcher is the watch running (the tests end it as nats.go would).
	watcher jetstream.KeyWatcher
	// nc is the connection kv is used over, set by start.
	nc *nats.Conn
	// created is when the bucket the watch follows was created: one
	// created again has another time, and its revisions start over.
	created time.Time
}

// cachedMeta is a meta and the revision it was read or written at.
type cachedMeta struct {
	m   Meta
	rev uint64
}

// seenLimit bounds [metaCache.seen] before it is trimmed.
const seenLimit = 4 * metaCacheSize

// newMetaCache is a cache that caches nothing until start.
func newMetaCache() *metaCache {
	return &metaCache{seen: map[string]uint64{}, metas: map[string]cachedMeta{}, cancel: func() {}}
}

// start watches kv (the primary copy of the meta bucket) until stop.
func (c *metaCache) start(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, logger *slog.Logger) error {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.nc = nc
	// Read before the watch opens: a bucket created again in between is
	// then found replaced at the first check (a spare reopen).
	created, _, err := bucketIdentity(ctx, kv)
	if err != nil {
		cancel()
		return err
	}
	// New writes only: the subscription is in place when WatchKV
	// returns, so every write from here on is delivered.
	kw, err := engine.WatchKV(wctx, nc, kv, engine.KVWatchConfig{MetaOnly: true, UpdatesOnly: true})
	if err != nil {
		cancel()
		return err
	}
	c.mu.Lock()
	c.running, c.watcher, c.created = true, kw, created
	c.mu.Unlock()
	c.cancel, c.done = cancel, make(chan struct{})
	go c.follow(wctx, kv, kw, logger)
	return nil
}

// metaRewatch bounds the wait between two tries to watch the bucket
// again after the watch ended.
var metaRewatch = struct{ first, max time.Duration }{time.Second, 30 * time.Second}

// metaBucketCheck is how often the watch's bucket is checked to be the
// one it was opened on: a bucket deleted (`nats kv rm`) and created
// again leaves the watch open but silent, or resumed at a revision the
// new bucket has not reached, so that no later write dropped a cached
// meta.
var metaBucketCheck = engine.DefaultBucketCheck

// bucketIdentity is when kv's stream was created and its last revision.
func bucketIdentity(ctx context.Context, kv jetstream.KeyValue) (time.Time, uint64, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return time.Time{}, 0, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return time.Time{}, 0, errors.New("bucket status without stream info")
	}
	return bs.StreamInfo().Created, bs.StreamInfo().State.LastSeq, nil
}

// checkBucket stops kw once a check every metaBucketCheck finds its
// bucket deleted, or created again (another creation time, or a last
// revision behind one the watch delivered), until ctx ends. A failed
// check (JetStream unreachable for a moment) changes nothing.
func (c *metaCache) checkBucket(ctx context.Context, kv jetstream.KeyValue, kw jetstream.KeyWatcher) {
	t := time.NewTicker(metaBucketCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		created, delivered := c.created, c.last
		c.mu.Unlock()
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		at, last, err := bucketIdentity(sctx, kv)
		cancel()
		gone := errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
		if gone || err == nil && (!at.Equal(created) || last < delivered) {
			_ = kw.Stop()
			return
		}
	}
}

// follow feeds the watch kw to the cache until ctx ends. A watch that ends
// before (engine.WatchKV reopens it itself at a reconnect, and ends it
// when it cannot: the connection closed, the bucket deleted or created
// again) empties the cache, every meta is read meanwhile, and
// the bucket is watched again; before, the cache stayed off for the rest
// of the process.
func (c *metaCache) follow(ctx context.Context, kv jetstream.KeyValue, kw jetstream.KeyWatcher, logger *slog.Logger) {
	defer close(c.done)
	for {
		cctx, stopCheck := context.WithCancel(ctx)
		go c.checkBucket(cctx, kv, kw)
		err := engine.FollowKV(ctx, kw, func(ent jetstream.KeyValueEntry) { c.saw(ent.Key(), ent.Revision()) }, nil)
		stopCheck()
		c.mu.Lock()
		c.running = false
		clear(c.metas)
		c.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		logger.Warn("session meta watch ended; every append reads the meta until it is watched again", "error", err)
		if kw = c.rewatch(ctx, kv); kw == nil {
			return
		}
		logger.Info("session meta watch resumed")
	}
}

// rewatch watches kv again, trying with a growing pause until ctx ends
// (nil). The writes made while nothing watched are unknown, so a meta read
// or written before the new watch began is not cached: the floor moves to
// the bucket's last revision once the new watch is in place. A bucket
// created again starts its revisions over: what was known of the old
// one's is forgotten.
func (c *metaCache) rewatch(ctx context.Context, kv jetstream.KeyValue) jetstream.KeyWatcher {
	for pause := metaRewatch.first; ; pause = min(2*pause, metaRewatch.max) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		created, _, err := bucketIdentity(ctx, kv)
		if err != nil {
			continue
		}
		kw, err := engine.WatchKV(ctx, c.nc, kv, engine.KVWatchConfig{MetaOnly: true, UpdatesOnly: true})
		if err != nil {
			continue
		}
		_, last, err := bucketIdentity(ctx, kv)
		if err != nil {
			_ = kw.Stop()
			continue
		}
		c.mu.Lock()
		if !created.Equal(c.created) {
			clear(c.seen)
			c.floor, c.last, c.created = last, last, created
		}
		c.running, c.watcher = true, kw
		c.floor, c.last = max(c.floor, last), max(c.last, last)
		c.mu.Unlock()
		return kw
	}
}

// saw records a write of key at revision rev (a put, a delete or a
// purge): a cached meta older than it is dropped.
func (c *metaCache) saw(key string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = max(c.last, rev)
	if rev <= c.seen[key] {
		return
	}
	c.seen[key] = rev
	if cm, ok := c.metas[key]; ok && cm.rev < rev {
		delete(c.metas, key)
	}
	if len(c.seen) > seenLimit {
		for k := range c.seen {
			if _, ok := c.metas[k]; !ok {
				delete(c.seen, k)
			}
		}
		c.floor = c.last
	}
}

// put caches m, read or written at revision rev, unless a newer write of
// it is known.
func (c *metaCache) put(m Meta, rev uint64) {
	if c == nil || subjects.SessionRegion(m.SessionID) != "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running || rev < c.floor || rev < c.seen[m.SessionID] {
		return
	}
	c.seen[m.SessionID] = rev
	if _, ok := c.metas[m.SessionID]; !ok && len(c.metas) >= metaCacheSize {
		for k := range c.metas { // any one: map order is random
			delete(c.metas, k)
			break
		}
	}
	c.metas[m.SessionID] = cachedMeta{m: m, rev: rev}
}

// get is sid's cached meta when no newer write of it is known.
func (c *metaCache) get(sid string) (Meta, uint64, bool) {
	if c == nil {
		return Meta{}, 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cm, ok := c.metas[sid]
	if !ok || !c.running || cm.rev < c.seen[sid] {
		return Meta{}, 0, false
	}
	c.hits.Add(1)
	return cm.m, cm.rev, true
}

// watching reports whether the watch runs (a write by another store is
// then noticed).
func (c *metaCache) watching() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

// drop forgets sid's cached meta (a compare-and-set on it was lost).
func (c *metaCache) drop(sid string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.metas, sid)
}

// stop ends the watch; every meta is read from then on.
func (c *metaCache) stop() {
	if c == nil {
		return
	}
	c.cancel()
	if c.done != nil {
		<-c.done
	}
}
