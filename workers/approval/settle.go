package approval

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Bounds of the sweep's checks of one receipt.
const (
	// sweepAttempts bounds the checks of one receipt that fail (the
	// buckets unreachable); the next snapshot of the watch, after it
	// reconnects, or a list_pending, checks it again.
	sweepAttempts    = 8
	sweepBackoffMin  = time.Second
	sweepBackoffMax  = time.Minute
	sweepCallTimeout = 10 * time.Second
)

// settle finishes a decision that was taken but not recorded: when a live
// receipt is bound to ent, the pending record of req's call under key (its
// resolver stopped between its two writes, or is between them now), it
// writes the receipt's decision into the record, by a compare-and-set on
// ent's revision — the write a resolve that finds the receipt makes.
// taken reports such a receipt: the call waits for no human any more,
// whether the write succeeded or another writer came first (err wraps
// jetstream.ErrKeyRevisionMismatch). A record that is not pending, or
// has no live receipt bound to it, is left as it is: a receipt of
// another run's call, or one older than the decision TTL, decides
// nothing.
func (s *Store) settle(ctx context.Context, approvals, receipts jetstream.KeyValue, key string, ent jetstream.KeyValueEntry, req ResolveRequest) (taken bool, err error) {
	rec, raw, werr := readRecord(ent.Value(), req)
	if werr != nil || rec.Status != agent.ApprovalPending {
		return false, nil
	}
	rent, err := receipts.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, storeErr(ctx, err, "read decision receipt %s", key)
	}
	r, ok := s.liveReceipt(rent.Value(), req)
	if !ok || !r.binds(req, rec) {
		return false, nil
	}
	data, werr := decide(rec, raw, req, r.verdict)
	if werr != nil {
		return true, werr
	}
	if _, err := approvals.Update(ctx, key, data, ent.Revision()); err != nil {
		return true, storeErr(ctx, err, "write approval %s", key)
	}
	s.logger.Info("decision written from its receipt", "session_id", req.SessionID, "function_call_id", req.FunctionCallID,
		"decision", r.Decision, "decided_at", r.DecidedAt)
	return true, nil
}

// settleKey settles the call under key in region's copies of the buckets
// (see settle): nothing when the record is gone or not pending, or no
// live receipt is bound to it. A compare-and-set lost to another writer
// reads the record again once.
func (s *Store) settleKey(ctx context.Context, region, key string) error {
	sid, callID, err := splitKey(region, key)
	if err != nil {
		return nil // no call's key: resolve could not have written it
	}
	req := ResolveRequest{SessionID: sid, FunctionCallID: callID}
	var kvs [2]jetstream.KeyValue
	for i, bucket := range []string{subjects.ApprovalsBucket, DecisionsBucket} {
		kv, err := s.regionKV(ctx, bucket, region)
		if errors.Is(err, engine.ErrUnknownRegion) {
			return nil // the copy was deleted: no record to settle
		}
		if err != nil {
			return storeErr(ctx, err, "open bucket %s", subjects.RegionalBucket(bucket, region))
		}
		kvs[i] = kv
	}
	approvals, receipts := kvs[0], kvs[1]
	for attempt := 0; ; attempt++ {
		ent, err := approvals.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil // consumed, or the run ended
		}
		if err != nil {
			return storeErr(ctx, err, "read approval %s", key)
		}
		_, err = s.settle(ctx, approvals, receipts, key, ent, req)
		if err == nil || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || attempt > 0 {
			return err
		}
	}
}

// sweepKey names a receipt: its copy's region and its key.
type sweepKey struct{ region, key string }

// sweepItem is a receipt to check and the checks of it that failed.
type sweepItem struct {
	sweepKey
	failed int
}

// sweeper follows the receipts of the copies of [DecisionsBucket] this
// node opened and checks each one delay after it sees it (the snapshot at
// start, then each new receipt): a record still pending with that receipt
// bound to it is settled. Every replica of the worker runs one; the writes
// are compare-and-sets, so they finish a decision once.
type sweeper struct {
	s     *Store
	delay time.Duration

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	wake   chan struct{}

	mu       sync.Mutex
	stopped  bool
	timers   map[sweepKey]*time.Timer // scheduled, not yet checked
	ready    []sweepItem
	checking bool
}

// startSweep starts the sweeper over region's copies of the decisions
// bucket, for each of regions ("" the primary copy); with no settle delay
// it starts nothing (Stop still works).
func (s *Store) startSweep(ctx context.Context, regions []string) (*sweeper, error) {
	sw := &sweeper{s: s, delay: s.settleDelay, cancel: func() {}, wake: make(chan struct{}, 1), timers: map[sweepKey]*time.Timer{}}
	if s.settleDelay <= 0 {
		return sw, nil
	}
	kvs := make([]jetstream.KeyValue, len(regions))
	for i, r := range regions {
		kv, err := s.regionKV(ctx, DecisionsBucket, r)
		if err != nil {
			return nil, err
		}
		kvs[i] = kv
	}
	run, cancel := context.WithCancel(context.Background())
	sw.cancel = cancel
	for i, kv := range kvs {
		region := regions[i]
		sw.wg.Go(func() {
			engine.MirrorKV(run, s.nc, kv, s.logger, engine.KVMirror{
				Begin: func() {},
				Entry: func(ent jetstream.KeyValueEntry, _ bool) {
					if ent.Operation() == jetstream.KeyValuePut {
						sw.schedule(sweepItem{sweepKey: sweepKey{region, ent.Key()}}, sw.delay)
					}
				},
				Loaded: func(bool) {},
			})
		})
	}
	sw.wg.Go(func() { sw.run(run) })
	return sw, nil
}

// schedule checks it after d, unless its receipt is already waiting for a
// check (which reads the receipt as it is then).
func (sw *sweeper) schedule(it sweepItem, d time.Duration) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.stopped {
		return
	}
	if _, ok := sw.timers[it.sweepKey]; ok {
		return
	}
	sw.timers[it.sweepKey] = time.AfterFunc(d, func() {
		sw.mu.Lock()
		sw.ready = append(sw.ready, it)
		sw.mu.Unlock()
		select {
		case sw.wake <- struct{}{}:
		default:
		}
	})
}

// next takes the next receipt due for its check.
func (sw *sweeper) next() (sweepItem, bool) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if len(sw.ready) == 0 {
		return sweepItem{}, false
	}
	it := sw.ready[0]
	sw.ready = sw.ready[1:]
	delete(sw.timers, it.sweepKey)
	sw.checking = true
	return it, true
}

// idle says whether no receipt waits for a check or is being checked.
func (sw *sweeper) idle() bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return len(sw.timers) == 0 && len(sw.ready) == 0 && !sw.checking
}

// run checks the receipts as they fall due, one at a time, until ctx
// ends.
func (sw *sweeper) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sw.wake:
		}
		for {
			it, ok := sw.next()
			if !ok {
				break
			}
			if ctx.Err() == nil {
				sw.check(ctx, it)
			}
			sw.mu.Lock()
			sw.checking = false
			sw.mu.Unlock()
		}
	}
}

// check settles the receipt it names, and schedules it again with backoff
// when the buckets cannot be read or written, up to sweepAttempts times.
func (sw *sweeper) check(ctx context.Context, it sweepItem) {
	cctx, cancel := context.WithTimeout(ctx, sweepCallTimeout)
	err := sw.s.settleKey(cctx, it.region, it.key)
	cancel()
	if err == nil || ctx.Err() != nil {
		return
	}
	attrs := []any{slog.String("bucket", subjects.RegionalBucket(DecisionsBucket, it.region)), slog.String("key", it.key), slog.Any("error", err)}
	it.failed++
	if !wire.From(err).Retryable || it.failed >= sweepAttempts {
		sw.s.logger.Error("decision receipt not checked; giving up (a list_pending or resolve of the call settles it)", append(attrs, slog.Int("attempts", it.failed))...)
		return
	}
	backoff := min(sweepBackoffMin<<(it.failed-1), sweepBackoffMax)
	sw.s.logger.Warn("decision receipt not checked; retrying", append(attrs, slog.Duration("backoff", backoff))...)
	sw.schedule(it, backoff)
}

// Stop ends the sweep and waits for a check in progress. It is
// idempotent.
func (sw *sweeper) Stop() {
	sw.once.Do(func() {
		sw.mu.Lock()
		sw.stopped = true
		for _, t := range sw.timers {
			t.Stop()
		}
		sw.mu.Unlock()
		sw.cancel()
		sw.wg.Wait()
	})
}
