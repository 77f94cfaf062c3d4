package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/subjects"
)

// pathWatch follows the writes to the primary copy of the session tree's
// meta bucket (subjects.SessionsBucket; values, a meta is a few hundred
// bytes) for the sessions whose path this process holds, and so knows
// whether a held path is still the session's: a run that starts on a
// tree nobody else wrote reads nothing, where it used to call
// session::get to compare the entry count and active leaf.
//
// For each tracked session it keeps the entry count and active leaf of
// the newest meta write it saw. A held path is current while the watch
// runs and either saw no write since the session was tracked (tracking
// starts before the read that made the path) or the newest write it saw
// has the path's count and leaf — this process's own appends included,
// whichever of the append's reply and the watch comes first. Any other
// write (another process's append, set_active_leaf, a delete) makes the
// next run read again. The watch lags a write by the time the server
// takes to pass it on: a write landing just before a run starts may be
// seen at the next one instead, as one landing just after would be.
// Sessions homed in a region keep their metas in the region's copy,
// which is not watched: their runs always read.
type pathWatch struct {
	e      *engine.Engine
	logger *slog.Logger

	mu      sync.Mutex
	running bool
	tried   time.Time // the last start attempt
	tracked map[string]*metaSeen
	// skipped counts the loads answered without a read.
	skipped atomic.Int64
	cancel  context.CancelFunc
	done    chan struct{}
}

// metaSeen is the newest meta write the watch saw of a tracked session.
type metaSeen struct {
	seen  bool
	rev   uint64
	count uint64
	leaf  string
}

// pathWatchRetry spaces the attempts to start the watch while the meta
// bucket does not exist (no session worker has started yet).
const pathWatchRetry = time.Second

func newPathWatch(e *engine.Engine, logger *slog.Logger) *pathWatch {
	return &pathWatch{e: e, logger: logger, tracked: map[string]*metaSeen{}, cancel: func() {}}
}

// maybeStart starts the watch in the background unless it runs or was
// tried within pathWatchRetry.
func (w *pathWatch) maybeStart() {
	if w == nil {
		return
	}
	w.mu.Lock()
	if w.running || w.done != nil || time.Since(w.tried) < pathWatchRetry {
		w.mu.Unlock()
		return
	}
	w.tried = time.Now()
	w.mu.Unlock()
	w.e.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := w.start(ctx); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			w.logger.Warn("session meta watch not started; runs read the transcript's meta", "error", err)
		}
	})
}

// start watches the meta bucket's primary copy until stop.
func (w *pathWatch) start(ctx context.Context) error {
	kv, err := w.e.JetStream().KeyValue(ctx, subjects.SessionsBucket)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.Background())
	// New writes only: the subscription is in place when WatchAll
	// returns, so every write from here on is delivered.
	kw, err := engine.WatchKV(wctx, w.e.Conn(), kv, engine.KVWatchConfig{UpdatesOnly: true})
	if err != nil {
		cancel()
		return err
	}
	w.mu.Lock()
	if w.done != nil { // started meanwhile, or stopped
		w.mu.Unlock()
		cancel()
		_ = kw.Stop()
		return nil
	}
	w.running, w.cancel, w.done = true, cancel, make(chan struct{})
	// A path read before the watch ran may have missed a write: read
	// each again once.
	clear(w.tracked)
	done := w.done
	w.mu.Unlock()
	go func() {
		defer close(done)
		err := engine.FollowKV(wctx, kw, w.saw, nil)
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
		if err != nil {
			w.logger.Warn("session meta watch ended; runs read the transcript's meta", "error", err)
		}
	}()
	return nil
}

// saw records a write of a session's meta, when the session is tracked.
func (w *pathWatch) saw(ent jetstream.KeyValueEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tracked[ent.Key()]
	if t == nil || ent.Revision() <= t.rev {
		return
	}
	t.seen, t.rev, t.count, t.leaf = true, ent.Revision(), 0, ""
	var m sessionMeta
	if ent.Operation() != jetstream.KeyValuePut || json.Unmarshal(ent.Value(), &m) != nil {
		t.leaf = "\x00gone" // matches no path: read again
		return
	}
	t.count, t.leaf = m.EntryCount, m.ActiveLeaf
}

// track is called before a read of sid's path: the read sees every
// write made until then, so the watch need only judge the writes after
// it. The newest revision seen is kept, so an older write the watch
// delivers late is ignored.
func (w *pathWatch) track(sid string) {
	if w == nil || subjects.SessionRegion(sid) != "" {
		return
	}
	w.mu.Lock()
	if t := w.tracked[sid]; t != nil {
		t.seen = false
	} else {
		w.tracked[sid] = &metaSeen{}
	}
	w.mu.Unlock()
}

// untrack stops tracking sid (its grain passivated).
func (w *pathWatch) untrack(sid string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	delete(w.tracked, sid)
	w.mu.Unlock()
}

// current reports whether a held path is still sid's, as far as the
// watch knows: no write seen since it was tracked, or the newest one
// seen is own (a count and leaf the path had: this process's own append,
// its meta written now or late).
func (w *pathWatch) current(sid string, own func(count uint64, leaf string) bool) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tracked[sid]
	if !w.running || t == nil || t.seen && !own(t.count, t.leaf) {
		return false
	}
	w.skipped.Add(1)
	return true
}

// stop ends the watch; every run reads from then on.
func (w *pathWatch) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	if done == nil {
		w.done = make(chan struct{}) // never started: nothing starts later
		close(w.done)
	}
	w.mu.Unlock()
	cancel()
	if done != nil {
		<-done
	}
}
