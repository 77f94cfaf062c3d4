package httpgw

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/subjects"
)

// defaultBucketCheck is how often a gateway checks that its watch still
// follows the bucket named subjects.HTTPRoutesBucket
// (engine.FollowBucket).
const defaultBucketCheck = engine.DefaultBucketCheck

// watch keeps the served routes equal to the routes bucket w watches until
// ctx ends (engine.FollowBucket): each watch's snapshot replaces the
// routes; while the bucket is gone the routes are served as they were. If
// the first watch ends before the routes load, watch returns and New
// fails.
func (g *Gateway) watch(ctx context.Context, w *engine.KVWatch, ready chan struct{}) {
	defer close(g.watchDone)
	var snapshot map[string]entry
	err := engine.FollowBucket(ctx, g.e, w, engine.BucketFollower{
		Name:  "http routes",
		Check: g.opts.bucketCheck,
		KVMirror: engine.KVMirror{
			Begin: func() { snapshot = map[string]entry{} },
			Entry: func(ent jetstream.KeyValueEntry, live bool) {
				var c *compiled
				if ent.Operation() == jetstream.KeyValuePut {
					var err error
					if c, err = decodeRoute(ent.Key(), ent.Value()); err != nil {
						// Written by hand: serve nothing under that key rather
						// than a stale route.
						g.e.Logger().Error("http route ignored: bad definition", "key", ent.Key(), "error", err)
					}
				}
				if !live {
					snapshot[ent.Key()] = entry{route: c, rev: ent.Revision()}
					return
				}
				g.apply(ent.Key(), c, ent.Revision(), true)
			},
			Loaded: func(first bool) {
				g.replace(snapshot)
				snapshot = nil
				if first {
					close(ready)
				}
			},
		},
	})
	if err != nil {
		g.e.Logger().Error("http routes watch ended before the routes loaded", "bucket", subjects.HTTPRoutesBucket, "error", err)
	}
}
