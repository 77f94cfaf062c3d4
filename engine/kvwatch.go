package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrWatchClosed is returned by [FollowKV] when the watcher's updates end
// before ctx does (the connection closed or the bucket went away).
var ErrWatchClosed = errors.New("engine: kv watch closed")

// FollowKV feeds a KV watcher's entries to onEntry until ctx ends (it
// returns nil) or the watcher closes (ErrWatchClosed). onLoaded runs once,
// at the watcher's end-of-initial-values marker. On ctx's end it stops the
// watcher and drains it briefly, so nats.go's delivery goroutine is never
// left blocked on a send.
func FollowKV(ctx context.Context, w jetstream.KeyWatcher, onEntry func(jetstream.KeyValueEntry), onLoaded func()) error {
	loaded := false
	for {
		select {
		case <-ctx.Done():
			_ = w.Stop()
			drain := time.After(time.Second)
			for {
				select {
				case _, ok := <-w.Updates():
					if !ok {
						return nil
					}
				case <-drain:
					return nil
				}
			}
		case ent, ok := <-w.Updates():
			if !ok {
				return ErrWatchClosed
			}
			if ent == nil {
				if !loaded {
					loaded = true
					if onLoaded != nil {
						onLoaded()
					}
				}
				continue
			}
			onEntry(ent)
		}
	}
}

// Backoff bounds of [MirrorKV]'s reconnects.
const (
	mirrorBackoffMin = 100 * time.Millisecond
	mirrorBackoffMax = 5 * time.Second
)

// KVMirror receives what [MirrorKV] sees of a bucket.
type KVMirror struct {
	// Begin starts a snapshot: the first load, or the load after a
	// watch was opened again.
	Begin func()
	// Entry gets every entry: those of the snapshot being loaded (live
	// false), then every change (live true).
	Entry func(ent jetstream.KeyValueEntry, live bool)
	// Loaded ends a snapshot; first is true for the first one.
	Loaded func(first bool)
}

// MirrorKV follows every key of kv until ctx ends: a snapshot, then the
// changes. A watch that closes (the connection went away) is opened again
// with backoff (logged), and its snapshot starts over with Begin, so the
// mirror never keeps a key that was deleted meanwhile.
func MirrorKV(ctx context.Context, kv jetstream.KeyValue, logger *slog.Logger, m KVMirror) {
	first := true
	backoff := mirrorBackoffMin
	for {
		w, err := kv.WatchAll(ctx)
		if err == nil {
			live := false
			m.Begin()
			err = FollowKV(ctx, w, func(ent jetstream.KeyValueEntry) { m.Entry(ent, live) }, func() {
				live = true
				m.Loaded(first)
				first = false
				backoff = mirrorBackoffMin
			})
		}
		if ctx.Err() != nil {
			return
		}
		logger.Warn("kv watch closed; retrying", "bucket", kv.Bucket(), "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, mirrorBackoffMax)
	}
}
