package engine

import (
	"context"
	"errors"
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
