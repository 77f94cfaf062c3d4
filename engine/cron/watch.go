package cron

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
)

// defaultBucketCheck is how often a scheduler checks that its watch still
// follows the bucket named JobsBucket (engine.FollowBucket).
const defaultBucketCheck = engine.DefaultBucketCheck

// watch keeps the running set equal to the jobs bucket w watches until
// ctx ends (engine.FollowBucket): each watch's snapshot replaces the
// running set, so jobs it holds unchanged keep running untouched (no tick
// fires twice) and the others are replaced or removed; while the bucket is
// gone the running jobs go on as they were. If the first watch ends before
// the jobs load, watch returns and Start fails.
func (s *Scheduler) watch(ctx context.Context, w *engine.KVWatch, ready chan struct{}) {
	defer close(s.watchDone)
	defer s.stopAll()
	var snapshot map[string]bool
	err := engine.FollowBucket(ctx, s.e, w, engine.BucketFollower{
		Name:  "cron jobs",
		Check: s.opts.bucketCheck,
		KVMirror: engine.KVMirror{
			Begin: func() { snapshot = map[string]bool{} },
			Entry: func(ent jetstream.KeyValueEntry, live bool) {
				if ent.Operation() != jetstream.KeyValuePut {
					s.remove(ent.Key())
					return
				}
				if !live {
					snapshot[ent.Key()] = true
				}
				s.apply(ent.Key(), ent.Value())
			},
			Loaded: func(first bool) {
				s.retain(snapshot)
				snapshot = nil
				if first {
					close(ready)
				}
			},
		},
	})
	if err != nil {
		s.e.Logger().Error("cron jobs watch ended before the jobs loaded", "bucket", JobsBucket, "error", err)
	}
}
