package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrWatchClosed is returned by [FollowKV] when the watcher's updates end
// before ctx does (the connection closed or the bucket went away).
var ErrWatchClosed = errors.New("engine: kv watch closed")

// FollowKV feeds a KV watcher's entries to onEntry until ctx ends (it
// returns nil) or the watcher closes (ErrWatchClosed, wrapping the reason
// when w is a [KVWatch]). onLoaded runs once, at the watcher's
// end-of-initial-values marker. On ctx's end it stops the watcher and
// drains it briefly, so nats.go's delivery goroutine is never left blocked
// on a send.
//
// A watcher from kv.Watch* resumes after its server restarted only once
// nats.go misses its heartbeats (≈ 20 s); one from [WatchKV] resumes as
// soon as the connection is back.
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
				if kw, isKV := w.(*KVWatch); isKV {
					if err := kw.Err(); err != nil {
						return fmt.Errorf("%w: %w", ErrWatchClosed, err)
					}
				}
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

// KVWatchConfig says what a [WatchKV] watch follows; its fields are
// nats.go's watch options of the same names.
type KVWatchConfig struct {
	// Keys filter the keys (wildcards allowed); none: every key.
	Keys []string
	// UpdatesOnly skips the current values: only the writes made after
	// the watch began, and no end-of-initial-values marker.
	UpdatesOnly bool
	// MetaOnly leaves the values out of the entries.
	MetaOnly bool
	// IgnoreDeletes leaves deletes and purges out.
	IgnoreDeletes bool
}

// kvReopenAttempt bounds the bucket's status read that starts each of a
// [KVWatch]'s attempts to open its watch again ([Retry] spaces them; the
// open itself is bounded by the JetStream context's default timeout).
const kvReopenAttempt = 5 * time.Second

// KVWatch is a KV watch that outlives the connection's reconnects: see
// [WatchKV]. It is a jetstream.KeyWatcher, to follow with [FollowKV].
type KVWatch struct {
	nc     *nats.Conn
	kv     jetstream.KeyValue
	cfg    KVWatchConfig
	status chan nats.Status
	// life ends with the watch: Stop, or the end of WatchKV's ctx.
	life context.Context
	stop context.CancelFunc
	// created and floor are the bucket's stream creation time and last
	// revision just before the first watch opened: a watch opened again
	// on a stream created at another time follows another bucket, and
	// one that has delivered nothing resumes after floor.
	created time.Time
	floor   uint64

	updates chan jetstream.KeyValueEntry

	mu  sync.Mutex
	err error
}

var _ jetstream.KeyWatcher = (*KVWatch)(nil)

// innerWatch is one of nats.go's watches behind a [KVWatch]; nats.go
// unsubscribes it when its ctx ends (cancel).
type innerWatch struct {
	jetstream.KeyWatcher
	cancel context.CancelFunc
}

// WatchKV watches kv's keys as kv.WatchFiltered does, over nc, the
// connection kv uses, and opens the watch again as soon as nc reconnects:
// the server it reconnected to may have lost the watch's (ephemeral)
// consumer, which nats.go alone notices only when heartbeats go missing
// (≈ 20 s). Across reopens the updates go on with nothing missed and
// nothing repeated: the watch resumes after the last revision delivered.
// Reopened before all of the initial values were delivered, it loads
// them again as they are then and delivers only those newer than the
// last one delivered (never a value replaced before the watch began); the
// end-of-initial-values marker is delivered once.
//
// As with kv.WatchFiltered, the watch ends when ctx does (or on Stop).
// It also ends by itself, Err saying why, when the connection closes,
// when the bucket is gone or was created again at a reconnect, or when a
// reopen fails otherwise than by a timeout or JetStream being briefly
// unavailable (those are tried again with backoff).
func WatchKV(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, cfg KVWatchConfig) (*KVWatch, error) {
	if nc == nil || kv == nil {
		return nil, errors.New("engine: WatchKV needs a connection and a bucket")
	}
	cfg.Keys = append([]string(nil), cfg.Keys...)
	w := &KVWatch{nc: nc, kv: kv, cfg: cfg, updates: make(chan jetstream.KeyValueEntry)}
	w.life, w.stop = context.WithCancel(ctx)
	// Listen before opening: a reconnect while the watch opens is not
	// missed.
	w.status = nc.StatusChanged(nats.CONNECTED)
	var err error
	if w.created, w.floor, err = w.identity(ctx); err == nil {
		var inner innerWatch
		if inner, err = w.open(0); err == nil {
			go w.run(inner)
			return w, nil
		}
	}
	nc.RemoveStatusListener(w.status)
	w.stop()
	return nil, err
}

// Updates delivers the entries as kv.WatchFiltered's watcher does: the
// initial values (unless UpdatesOnly), one nil marker, then every change.
// It is closed soon after the watch ends.
func (w *KVWatch) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

// Stop ends the watch.
func (w *KVWatch) Stop() error {
	w.stop()
	return nil
}

// Err is why the watch ended by itself; nil while it runs, or once it
// was stopped or its ctx ended.
func (w *KVWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// identity reads the bucket's stream creation time and last revision.
func (w *KVWatch) identity(ctx context.Context) (time.Time, uint64, error) {
	st, err := w.kv.Status(ctx)
	if err != nil {
		return time.Time{}, 0, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return time.Time{}, 0, fmt.Errorf("engine: status of bucket %s has no stream info", w.kv.Bucket())
	}
	return bs.StreamInfo().Created, bs.StreamInfo().State.LastSeq, nil
}

// open opens one of nats.go's watches, from revision from when it is not
// 0, for the life of w at most.
func (w *KVWatch) open(from uint64) (innerWatch, error) {
	var opts []jetstream.WatchOpt
	if w.cfg.UpdatesOnly {
		opts = append(opts, jetstream.UpdatesOnly())
	}
	if w.cfg.MetaOnly {
		opts = append(opts, jetstream.MetaOnly())
	}
	if w.cfg.IgnoreDeletes {
		opts = append(opts, jetstream.IgnoreDeletes())
	}
	if from > 0 {
		// Overrides UpdatesOnly's and the initial values' start.
		opts = append(opts, jetstream.ResumeFromRevision(from))
	}
	ctx, cancel := context.WithCancel(w.life)
	// WatchFiltered rewrites the slice it is given.
	kw, err := w.kv.WatchFiltered(ctx, append([]string(nil), w.cfg.Keys...), opts...)
	if err != nil {
		cancel()
		return innerWatch{}, err
	}
	return innerWatch{kw, cancel}, nil
}

// run hands inner's entries on until the watch ends, and replaces inner
// after each reconnect.
func (w *KVWatch) run(inner innerWatch) {
	defer close(w.updates)
	defer w.nc.RemoveStatusListener(w.status)
	defer w.stop() // an end by itself releases life too
	var (
		seen    uint64 // revision of the last entry delivered
		skip    uint64 // entries of inner up to this one were delivered
		loaded  = w.cfg.UpdatesOnly
		pending jetstream.KeyValueEntry
		has     bool // pending is to be delivered (nil: the marker)
	)
	for {
		in, out := inner.Updates(), chan<- jetstream.KeyValueEntry(nil)
		if has {
			in, out = nil, w.updates
		}
		select {
		case <-w.life.Done():
			go discard(inner)
			return
		case <-w.status:
			// pending, if any, is delivered again by the new watch.
			has = false
			go discard(inner)
			var err error
			if inner, skip, err = w.reopen(seen, loaded); err != nil {
				if w.life.Err() == nil {
					w.end(err)
				}
				return
			}
		case ent, ok := <-in:
			switch {
			case !ok:
				if w.life.Err() == nil {
					err := errors.New("nats.go ended the watch")
					if w.nc.IsClosed() {
						err = nats.ErrConnectionClosed
					}
					w.end(err)
				}
				inner.cancel()
				return
			case ent == nil:
				pending, has = nil, !loaded
			default:
				pending, has = ent, ent.Revision() > skip
			}
		case out <- pending:
			has = false
			if pending == nil {
				loaded = true
			} else {
				seen = pending.Revision()
			}
		}
	}
}

// reopen opens the watch again after a reconnect, trying again with
// backoff while the failure may pass. Once every initial value was
// delivered (loaded) it resumes after seen (or floor, the bucket's last
// revision before the first watch, if nothing was delivered); before, it
// loads the initial values again and skip tells which were delivered
// already. An error ends the watch: it was stopped, or the failure
// lasts.
func (w *KVWatch) reopen(seen uint64, loaded bool) (inner innerWatch, skip uint64, err error) {
	var from uint64
	if loaded {
		from = max(seen, w.floor) + 1
	} else {
		skip = seen
	}
	err = Retry(w.life, kvReopenAttempt, func(ctx context.Context) error {
		// Reconnects before this attempt are covered by it.
		for drained := false; !drained; {
			select {
			case <-w.status:
			default:
				drained = true
			}
		}
		created, _, err := w.identity(ctx)
		if err != nil {
			return err
		}
		if !created.Equal(w.created) {
			return fmt.Errorf("bucket %s was deleted and created again", w.kv.Bucket())
		}
		inner, err = w.open(from)
		return err
	}, reopenable)
	if err == nil && w.life.Err() != nil { // opened as the watch ended
		inner.cancel()
		err = w.life.Err()
	}
	return inner, skip, err
}

// reopenable reports whether a failure to open a watch again may pass: no
// answer in time, or JetStream not up yet on the server reconnected to.
func reopenable(err error) bool {
	if Unanswered(err) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, nats.ErrConnectionReconnecting) {
		return true
	}
	var legacy *nats.APIError
	if errors.As(err, &legacy) {
		return legacy.Code == 503 || legacy.ErrorCode == nats.JSErrCodeInsufficientResourcesErr || legacy.ErrorCode == nats.JSErrCodeJetStreamNotAvailable
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code == 503 || api.ErrorCode == jetstream.ErrorCode(nats.JSErrCodeInsufficientResourcesErr) || api.ErrorCode == jetstream.ErrorCode(nats.JSErrCodeJetStreamNotAvailable)
	}
	return false
}

// end records why the watch ended by itself.
func (w *KVWatch) end(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// discard ends a watch that is no longer followed and drains it, so
// nats.go's delivery goroutine is never left blocked on a send.
func discard(inner innerWatch) {
	_ = inner.Stop()
	inner.cancel()
	drain := time.NewTimer(5 * time.Second)
	defer drain.Stop()
	for {
		select {
		case _, ok := <-inner.Updates():
			if !ok {
				return
			}
		case <-drain.C:
			return
		}
	}
}

// Backoff bounds of [MirrorKV]'s reconnects.
const (
	mirrorBackoffMin = 100 * time.Millisecond
	mirrorBackoffMax = 5 * time.Second
)

// KVMirror receives what [MirrorKV] or [FollowBucket] sees of a bucket.
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

// MirrorKV follows every key of kv, over nc (the connection kv uses),
// until ctx ends: a snapshot, then the changes. The watch is a [WatchKV]
// one: a reconnect changes nothing for m. A watch that ends (the
// connection closed, the bucket was deleted or created again) is opened
// again with backoff (logged), and its snapshot starts over with Begin,
// so the mirror never keeps a key that was deleted meanwhile.
func MirrorKV(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, logger *slog.Logger, m KVMirror) {
	first := true
	backoff := mirrorBackoffMin
	for {
		w, err := WatchKV(ctx, nc, kv, KVWatchConfig{})
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
