package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucketCheck is how often [FollowBucket] checks, unless told
// otherwise, that its watch still follows the bucket it was opened on: a
// bucket deleted and created again (`nats kv rm`/`add`, a restore) leaves
// the old watch open but silent, or resumed at a sequence the new bucket
// has passed.
const DefaultBucketCheck = 5 * time.Second

const (
	// Backoff bounds of [FollowBucket]'s reopens.
	followBackoffMin = 100 * time.Millisecond
	followBackoffMax = 10 * time.Second
	// bucketStatusTimeout bounds one bucket check.
	bucketStatusTimeout = 5 * time.Second
)

// Why a [FollowBucket] watch was stopped (logged as it is reopened).
var (
	errBucketGone     = errors.New("bucket deleted")
	errBucketReplaced = errors.New("bucket deleted and created again")
)

// BucketFollower says what [FollowBucket] does with what it sees.
type BucketFollower struct {
	// Name starts the log messages, which say the bucket in an
	// attribute: with "cron jobs", "cron jobs watch ended; reopening",
	// "cron jobs watch not reopened; retrying" (warnings) and "cron jobs
	// watch reopened".
	Name string
	// Check is how often the bucket's identity is checked; 0 or less:
	// [DefaultBucketCheck].
	Check time.Duration
	// KVMirror gets the entries, every field required: Begin, then each
	// watch's snapshot (live false) and Loaded (first true for the first
	// watch only), then its changes (live true). A snapshot may follow
	// changes of the watch before: it replaces what they built.
	KVMirror
}

// FollowBucket follows every key of the bucket w watches until ctx ends,
// starting with w, a [WatchKV] watch the caller opened (so that it can
// report a failure to open it). A watch that ends, or whose bucket a check
// every Check finds deleted or created again, is opened again with w's
// config and backoff (100 ms to 10 s), and its snapshot starts over with
// Begin. The bucket is looked up, never created: while it is gone f keeps
// what it has.
//
// It returns nil once ctx ends. If the first watch ends before its
// snapshot loaded, it returns why at once, so that the caller's start
// fails rather than waits.
func FollowBucket(ctx context.Context, e *Engine, w *KVWatch, f BucketFollower) error {
	if f.Check <= 0 {
		f.Check = DefaultBucketCheck
	}
	log := e.Logger()
	bucket, cfg := w.kv.Bucket(), w.cfg
	backoff := followBackoffMin
	first := true
	for {
		if w != nil {
			live := false
			f.Begin()
			err := followWatch(ctx, w, f.Check, func(ent jetstream.KeyValueEntry) { f.Entry(ent, live) }, func() {
				live = true
				f.Loaded(first)
				if !first {
					log.Info(f.Name+" watch reopened", "bucket", bucket)
				}
				first = false
				backoff = followBackoffMin
			})
			if ctx.Err() != nil {
				return nil
			}
			if first {
				return err
			}
			log.Warn(f.Name+" watch ended; reopening", "bucket", bucket, "error", err)
			w = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, followBackoffMax)
		kv, err := e.JetStream().KeyValue(ctx, bucket)
		if err == nil {
			w, err = WatchKV(ctx, e.Conn(), kv, cfg)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn(f.Name+" watch not reopened; retrying", "bucket", bucket, "error", err, "backoff", backoff)
		}
	}
}

// followWatch feeds w to onEntry and onLoaded as [FollowKV] does until ctx
// ends (nil), w closes, or a check every check finds w's bucket deleted or
// replaced.
func followWatch(ctx context.Context, w *KVWatch, check time.Duration, onEntry func(jetstream.KeyValueEntry), onLoaded func()) error {
	wctx, stop := context.WithCancelCause(ctx)
	checked := make(chan struct{})
	defer func() { <-checked }()
	defer stop(nil)
	var lastRev atomic.Uint64
	go func() {
		defer close(checked)
		checkBucket(wctx, w, check, &lastRev, stop)
	}()
	err := FollowKV(wctx, w, func(ent jetstream.KeyValueEntry) {
		if rev := ent.Revision(); rev > lastRev.Load() {
			lastRev.Store(rev) // only this goroutine stores
		}
		onEntry(ent)
	}, onLoaded)
	if err == nil && ctx.Err() == nil {
		err = context.Cause(wctx)
	}
	return err
}

// checkBucket asks every check whether w's bucket is still the one w was
// opened on (same creation time, last sequence not behind what w
// delivered), and stops w when it is gone or replaced. An error that is
// not "not found" (JetStream unreachable for a moment) changes nothing:
// the watch resumes on its own.
func checkBucket(ctx context.Context, w *KVWatch, check time.Duration, lastRev *atomic.Uint64, stop context.CancelCauseFunc) {
	t := time.NewTicker(check)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seen := lastRev.Load() // before the status, which must cover it
		sctx, cancel := context.WithTimeout(ctx, bucketStatusTimeout)
		created, last, err := w.identity(sctx)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound):
			stop(errBucketGone)
			return
		case err != nil:
			continue
		}
		if !created.Equal(w.created) || last < seen {
			stop(errBucketReplaced)
			return
		}
	}
}
