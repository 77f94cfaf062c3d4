package cron

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
)

// Recovery of the jobs watch.
const (
	// defaultBucketCheck is how often a scheduler checks that its watch
	// still follows the bucket named JobsBucket: a bucket deleted and
	// created again (`nats kv rm`/`add`, a restore) leaves the old watch
	// open but silent, or resumed at a sequence the new bucket has passed.
	defaultBucketCheck = 5 * time.Second
	watchBackoffMin    = 100 * time.Millisecond
	watchBackoffMax    = 10 * time.Second
	// statusTimeout bounds one bucket check.
	statusTimeout = 5 * time.Second
)

var (
	errBucketGone     = errors.New("jobs bucket deleted")
	errBucketReplaced = errors.New("jobs bucket deleted and created again")
)

// openWatch watches every key of kv. created identifies the bucket the
// watch follows; it is read first, so a bucket replaced in between is
// caught by the next check rather than missed.
func (s *Scheduler) openWatch(ctx context.Context, kv jetstream.KeyValue) (w jetstream.KeyWatcher, created time.Time, err error) {
	sctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	st, err := kv.Status(sctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	created, _ = bucketIdentity(st)
	w, err = engine.WatchKV(ctx, s.e.Conn(), kv, engine.KVWatchConfig{})
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

// watch keeps the running set equal to the jobs bucket until ctx ends. A
// watch that ends, or whose bucket is deleted or replaced, is opened again
// with backoff, and the new watch's snapshot replaces the running set: jobs
// it holds unchanged keep running untouched (no tick fires twice), the
// others are replaced or removed. The bucket is opened, never created,
// here: while it is gone the running jobs go on as they were. If the first
// watch ends before the jobs load, watch returns and Start fails.
func (s *Scheduler) watch(ctx context.Context, kv jetstream.KeyValue, w jetstream.KeyWatcher, created time.Time, ready chan struct{}) {
	defer close(s.watchDone)
	defer s.stopAll()
	log := s.e.Logger()
	backoff := watchBackoffMin
	reopened := false
	for {
		if w != nil {
			err := s.follow(ctx, kv, w, created, func() {
				if ready != nil {
					close(ready)
					ready = nil
				}
				if reopened {
					log.Info("cron jobs watch reopened", "bucket", JobsBucket)
					reopened = false
				}
				backoff = watchBackoffMin
			})
			if ctx.Err() != nil {
				return
			}
			if ready != nil {
				log.Error("cron jobs watch ended before the jobs loaded", "bucket", JobsBucket, "error", err)
				return
			}
			log.Warn("cron jobs watch ended; reopening", "bucket", JobsBucket, "error", err)
			w = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, watchBackoffMax)
		var err error
		kv, err = s.e.JetStream().KeyValue(ctx, JobsBucket)
		if err == nil {
			w, created, err = s.openWatch(ctx, kv)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("cron jobs watch not reopened; retrying", "bucket", JobsBucket, "error", err, "backoff", backoff)
			continue
		}
		reopened = true
	}
}

// follow applies one watch until ctx ends (nil), the watch closes, or a
// check finds its bucket deleted or replaced. The first entries are a
// snapshot of the bucket: once it is loaded, running jobs it lacks are
// removed.
func (s *Scheduler) follow(ctx context.Context, kv jetstream.KeyValue, w jetstream.KeyWatcher, created time.Time, loaded func()) error {
	wctx, stop := context.WithCancelCause(ctx)
	checked := make(chan struct{})
	defer func() { <-checked }()
	defer stop(nil)
	var lastRev atomic.Uint64
	go func() {
		defer close(checked)
		s.checkBucket(wctx, kv, created, &lastRev, stop)
	}()
	snapshot := map[string]bool{}
	err := engine.FollowKV(wctx, w, func(ent jetstream.KeyValueEntry) {
		if rev := ent.Revision(); rev > lastRev.Load() {
			lastRev.Store(rev) // only this goroutine stores
		}
		if ent.Operation() != jetstream.KeyValuePut {
			s.remove(ent.Key())
			return
		}
		if snapshot != nil {
			snapshot[ent.Key()] = true
		}
		s.apply(ent.Key(), ent.Value())
	}, func() {
		s.retain(snapshot)
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
func (s *Scheduler) checkBucket(ctx context.Context, kv jetstream.KeyValue, created time.Time, lastRev *atomic.Uint64, stop context.CancelCauseFunc) {
	t := time.NewTicker(s.opts.bucketCheck)
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
