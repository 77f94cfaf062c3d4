package orchestrator

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/subjects"
)

// inboxWatch follows the writes to the primary copy of the inbox bucket,
// headers only, and so knows which sessions have items waiting. A
// steering check of a session whose inboxes are both empty then reads
// nothing: most checks find nothing, and each read was two KV gets on
// the run's critical path.
//
// The watch sees every write to the bucket, whoever makes it
// (session::inbox_push on any node, `nats kv put`), in the stream's order.
// It lags a write by the time the server takes to pass it on, so a push
// landing just before a check may be seen at the next check instead, as
// one landing just after the check would be; a write this process makes
// (session::inbox_push served here, a requeue) counts at once. Until the
// watch has caught up with the bucket, and after it stops, every check
// reads. Sessions homed in a region keep their inboxes in the region's
// copy, which is not watched: their checks always read.
type inboxWatch struct {
	mu    sync.Mutex
	ready bool // caught up with the bucket, still running
	keys  map[string]keyState
	// skipped counts the checks answered without a read.
	skipped atomic.Int64
	cancel  context.CancelFunc
	done    chan struct{}
}

// keyState is the last write known of an inbox key: its revision and
// whether it left items. Emptied keys are kept for their revision (a
// session that used its inbox costs one entry).
type keyState struct {
	rev  uint64
	full bool
}

// newInboxWatch is a watch that knows nothing yet: every check reads
// until start has caught up with the bucket.
func newInboxWatch() *inboxWatch {
	return &inboxWatch{keys: map[string]keyState{}, cancel: func() {}}
}

// start watches kv (the primary copy of the inbox bucket) until stop.
func (w *inboxWatch) start(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, logger *slog.Logger) error {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	kw, err := engine.WatchKV(wctx, nc, kv, engine.KVWatchConfig{MetaOnly: true})
	if err != nil {
		cancel()
		return err
	}
	w.cancel, w.done = cancel, make(chan struct{})
	go func() {
		defer close(w.done)
		err := engine.FollowKV(wctx, kw, func(ent jetstream.KeyValueEntry) {
			// Anything else than a put is a delete or a purge: the inbox
			// was emptied.
			w.saw(ent.Key(), ent.Revision(), ent.Operation() == jetstream.KeyValuePut)
		}, func() {
			w.mu.Lock()
			w.ready = true // the bucket's state as of the watch's start is in
			w.mu.Unlock()
		})
		w.mu.Lock()
		w.ready = false
		w.mu.Unlock()
		if err != nil {
			logger.Warn("inbox watch ended; every steering check reads the inbox", "error", err)
		}
	}()
	return nil
}

// saw records a write of key at revision rev that left items in it
// (full) or emptied it. A write older than the last one known for key
// changes nothing: a put this process made can be known before the watch
// delivers an earlier delete.
func (w *inboxWatch) saw(key string, rev uint64, full bool) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if last, ok := w.keys[key]; ok && rev < last.rev {
		return
	}
	w.keys[key] = keyState{rev: rev, full: full}
}

// empty reports whether both of sid's inboxes are known to be empty.
func (w *inboxWatch) empty(sid string) bool {
	if w == nil || subjects.SessionRegion(sid) != "" {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ready {
		return false
	}
	if w.keys[inboxKey(sid, InboxSteering)].full || w.keys[inboxKey(sid, InboxFollowup)].full {
		return false
	}
	w.skipped.Add(1)
	return true
}

// stop ends the watch; every check reads from then on.
func (w *inboxWatch) stop() {
	if w == nil {
		return
	}
	w.cancel()
	if w.done != nil {
		<-w.done
	}
}
