package httpgw

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/subjects"
)

// Recovery of the routes watch.
const (
	// defaultBucketCheck is how often a gateway checks that its watch
	// still follows the bucket named subjects.HTTPRoutesBucket: a bucket
	// deleted and created again (`nats kv rm`/`add`, a restore) leaves the
	// old watch open but silent, or resumed at a sequence the new bucket
	// has passed.
	defaultBucketCheck = 5 * time.Second
	watchBackoffMin    = 100 * time.Millisecond
	watchBackoffMax    = 10 * time.Second
	// statusTimeout bounds one bucket check.
	statusTimeout = 5 * time.Second
)

var (
	errBucketGone     = errors.New("routes bucket deleted")
	errBucketReplaced = errors.New("routes bucket deleted and created again")
)

// openWatch watches every key of kv. created identifies the bucket the
// watch follows; it is read first, so a bucket replaced in between is
// caught by the next check rather than missed.
func openWatch(ctx context.Context, e *engine.Engine, kv jetstream.KeyValue) (w jetstream.KeyWatcher, created time.Time, err error) {
	sctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	st, err := kv.Status(sctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	created, _ = bucketIdentity(st)
	w, err = engine.WatchKV(ctx, e.Conn(), kv, engine.KVWatchConfig{})
	if err != nil {
		return nil, time.Time{}, err
	}
	return w, created, nil
}

// bucketIdentity is when the bucket's stream was created and its last
// sequence; neither goes back in one stream's life.
func bucketIdentity(st jetstream.KeyValueStatus) (created time.Time, last uint64) {
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return time.Time{}, 0
	}
	info := bs.StreamInfo()
	return info.Created, info.State.LastSeq
}

// watch keeps the served routes equal to the routes bucket until ctx
// ends. A watch that ends, or whose bucket is deleted or replaced, is
// opened again with backoff, and the new watch's snapshot replaces the
// routes. The bucket is opened, never created, here: while it is gone the
// routes are served as they were. If the first watch ends before the
// routes load, watch returns and New fails.
func (g *Gateway) watch(ctx context.Context, kv jetstream.KeyValue, w jetstream.KeyWatcher, created time.Time, ready chan struct{}) {
	defer close(g.watchDone)
	log := g.e.Logger()
	backoff := watchBackoffMin
	for {
		if w != nil {
			err := g.follow(ctx, kv, w, created, func() {
				if ready != nil {
					close(ready)
					ready = nil
				} else {
					log.Info("http routes watch reopened", "bucket", subjects.HTTPRoutesBucket)
				}
				backoff = watchBackoffMin
			})
			if ctx.Err() != nil {
				return
			}
			if ready != nil {
				log.Error("http routes watch ended before the routes loaded", "bucket", subjects.HTTPRoutesBucket, "error", err)
				return
			}
			log.Warn("http routes watch ended; reopening", "bucket", subjects.HTTPRoutesBucket, "error", err)
			w = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, watchBackoffMax)
		var err error
		kv, err = g.e.JetStream().KeyValue(ctx, subjects.HTTPRoutesBucket)
		if err == nil {
			w, created, err = openWatch(ctx, g.e, kv)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("http routes watch not reopened; retrying", "bucket", subjects.HTTPRoutesBucket, "error", err, "backoff", backoff)
			continue
		}
	}
}

// follow applies one watch until ctx ends (nil), the watch closes, or a
// check finds its bucket deleted or replaced. The first entries are a
// snapshot of the bucket, which replaces the served routes once loaded.
func (g *Gateway) follow(ctx context.Context, kv jetstream.KeyValue, w jetstream.KeyWatcher, created time.Time, loaded func()) error {
	wctx, stop := context.WithCancelCause(ctx)
	checked := make(chan struct{})
	defer func() { <-checked }()
	defer stop(nil)
	var lastRev atomic.Uint64
	go func() {
		defer close(checked)
		g.checkBucket(wctx, kv, created, &lastRev, stop)
	}()
	snapshot := map[string]entry{}
	err := engine.FollowKV(wctx, w, func(ent jetstream.KeyValueEntry) {
		rev := ent.Revision()
		if rev > lastRev.Load() {
			lastRev.Store(rev) // only this goroutine stores
		}
		var c *compiled
		if ent.Operation() == jetstream.KeyValuePut {
			var err error
			if c, err = decodeRoute(ent.Key(), ent.Value()); err != nil {
				// Written by hand: serve nothing under that key rather
				// than a stale route.
				g.e.Logger().Error("http route ignored: bad definition", "key", ent.Key(), "error", err)
			}
		}
		if snapshot != nil {
			snapshot[ent.Key()] = entry{route: c, rev: rev}
			return
		}
		g.apply(ent.Key(), c, rev, true)
	}, func() {
		g.replace(snapshot)
		snapshot = nil
		loaded()
	})
	if err == nil && ctx.Err() == nil {
		err = context.Cause(wctx)
	}
	return err
}

// checkBucket asks every bucketCheck whether the bucket kv names is still
// the one the watch was opened on (same creation time, last sequence not
// behind what the watch saw), and stops the watch when it is gone or
// replaced. An error that is not "not found" (JetStream unreachable for a
// moment) changes nothing: the watch resumes on its own.
func (g *Gateway) checkBucket(ctx context.Context, kv jetstream.KeyValue, created time.Time, lastRev *atomic.Uint64, stop context.CancelCauseFunc) {
	t := time.NewTicker(g.opts.bucketCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seen := lastRev.Load() // before the status, which must cover it
		sctx, cancel := context.WithTimeout(ctx, statusTimeout)
		st, err := kv.Status(sctx)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound):
			stop(errBucketGone)
			return
		case err != nil:
			continue
		}
		if c, last := bucketIdentity(st); !c.Equal(created) || last < seen {
			stop(errBucketReplaced)
			return
		}
	}
}
