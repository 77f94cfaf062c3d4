package budget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/internal/answer"
)

const (
	// pendingLease: a pending reservation record younger than this belongs
	// to a reserve still in flight; an older one was abandoned by a reserve
	// that died, and the next reserve of the id takes it over.
	pendingLease = 30 * time.Second
	// cleanupTimeout bounds the releases and alerts that run after the
	// caller's context ended.
	cleanupTimeout = 5 * time.Second
	// skewMargin: an expired hold stays in its period state this much
	// longer than its reservation record lives, so that clock skew between
	// nodes and the server never drops a hold whose record still exists.
	skewMargin = 5 * time.Minute
	// defWait bounds how long create and delete wait for this node's copy
	// of the definitions to show their own write.
	defWait = 2 * time.Second
	// backoffBase and backoffMax shape the jittered pause after a lost
	// compare-and-set.
	backoffBase = 50 * time.Microsecond
	backoffMax  = 5 * time.Millisecond
)

// BucketConfig is the ledger bucket subjects.BudgetsBucket: one value per
// key (History 1), file storage, and per-key TTLs (LimitMarkerTTL) so that
// reservation records lapse on their own.
func BucketConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         subjects.BudgetsBucket,
		Description:    "iii budget ledger: definitions, per-period spend and holds, reservations",
		History:        1,
		Storage:        jetstream.FileStorage,
		LimitMarkerTTL: time.Minute,
	}
}

// Ledger is the budget ledger over its KV bucket: the logic behind the
// budget functions, callable in process. Every error it returns is a
// *wire.Error. A Ledger is safe for concurrent use, and any number of
// Ledgers (one per node) may share the bucket: every write is a
// compare-and-set on one key.
type Ledger struct {
	kv     jetstream.KeyValue
	js     jetstream.JetStream
	o      options
	logger *slog.Logger
	defs   *defs

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once

	// testStage, when set (tests only), runs at the named stages of a
	// create, to interleave another writer deterministically.
	testStage func(stage string)
}

// stage runs the test hook of a stage, if any.
func (l *Ledger) stage(name string) {
	if l.testStage != nil {
		l.testStage(name)
	}
}

// Open opens the ledger through e: it ensures the bucket ([BucketConfig])
// and the alert stream ([AlertStreamConfig]), and loads the budget
// definitions, which it then follows until [Ledger.Close].
func Open(ctx context.Context, e *engine.Engine, opts ...Option) (*Ledger, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	kv, err := e.EnsureKV(ctx, BucketConfig())
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, storeErr(ctx, err, "status of bucket %s", subjects.BudgetsBucket)
	}
	if st.LimitMarkerTTL() <= 0 {
		return nil, fmt.Errorf("%w: bucket %s was created without LimitMarkerTTL; recreate it with budget.BucketConfig", ErrNoTTLSupport, subjects.BudgetsBucket)
	}
	if _, err := e.EnsureStream(ctx, AlertStreamConfig(e.Replicas())); err != nil {
		return nil, err
	}
	logger := o.logger
	if logger == nil {
		logger = e.Logger().With("worker", WorkerName)
	}
	l := &Ledger{kv: kv, js: e.JetStream(), o: o, logger: logger, defs: newDefs(logger), done: make(chan struct{})}
	if err := l.follow(ctx, e); err != nil {
		return nil, err
	}
	return l, nil
}

// follow starts following the definitions and waits for the initial
// values. A watch that ends, or whose bucket is deleted and created again
// (a restore, `nats kv rm`/`add`), is opened again with backoff
// (engine.FollowBucket), and its snapshot replaces the copy; while the
// bucket is gone the copy stays.
func (l *Ledger) follow(ctx context.Context, e *engine.Engine) error {
	wctx, stop := context.WithCancel(context.Background())
	w, err := engine.WatchKV(wctx, l.js.Conn(), l.kv, engine.KVWatchConfig{Keys: []string{defPrefix + "*"}})
	if err != nil {
		stop()
		return storeErr(ctx, err, "watch budget definitions")
	}
	l.stop = stop
	loaded := make(chan struct{})
	go func() {
		defer close(l.done)
		var fresh map[string]Budget
		err := engine.FollowBucket(wctx, e, w, engine.BucketFollower{
			Name:  "budget definitions",
			Check: l.o.bucketCheck,
			KVMirror: engine.KVMirror{
				Begin: func() { fresh = map[string]Budget{} },
				Entry: func(ent jetstream.KeyValueEntry, live bool) {
					if live {
						l.defs.apply(ent)
						return
					}
					if b, ok := l.defs.decode(ent); ok {
						fresh[b.BudgetID] = b
					} else {
						delete(fresh, strings.TrimPrefix(ent.Key(), defPrefix))
					}
				},
				Loaded: func(first bool) {
					l.defs.replace(fresh)
					fresh = nil
					if first {
						close(loaded)
					}
				},
			},
		})
		if err != nil && wctx.Err() == nil {
			l.logger.Error("budget definitions watch ended before they loaded", "error", err)
		}
	}()
	select {
	case <-loaded:
		return nil
	case <-l.done:
		stop()
		return wire.Errorf(wire.CodeUnavailable, "budget definitions watch closed while loading")
	case <-ctx.Done():
		stop()
		<-l.done
		return storeErr(ctx, ctx.Err(), "load budget definitions")
	}
}

// Close stops following the definitions. Close is idempotent.
func (l *Ledger) Close(ctx context.Context) error {
	l.closeOnce.Do(l.stop)
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// budgetExists is the conflict of a create whose id is taken: no retry
// can win it, so it is not retryable.
func budgetExists(id string) *wire.Error {
	return wire.Errorf(wire.CodeConflict, "budget %q exists", id).Permanent()
}

// Create stores a new budget. An explicit budget id that exists is a
// conflict; without one the id is "b_" and a NUID.
func (l *Ledger) Create(ctx context.Context, req CreateRequest) (Budget, error) {
	if err := req.Validate(); err != nil {
		return Budget{}, err
	}
	id := req.BudgetID
	if id == "" {
		id = "b_" + nuid.Next()
	}
	b := Budget{
		BudgetID: id, CeilingUSD: req.CeilingUSD, Period: req.Period, WorkspaceID: req.WorkspaceID,
		AgentID: req.AgentID, AlertThresholds: req.thresholds(), CreatedAt: l.o.now().UnixMilli(),
	}
	data, err := wire.MarshalJSON(b)
	if err != nil {
		return Budget{}, wire.Wrap(wire.CodeInternal, err, "encode budget")
	}
	if req.BudgetID != "" {
		// A delete of an earlier budget of this id that failed between
		// its definition and its spend left the spend behind: the new
		// budget must not start with it.
		if err := l.purgeLeftovers(ctx, id); err != nil {
			return Budget{}, err
		}
	}
	if _, err := l.kv.Create(ctx, defKey(id), data); err != nil {
		if isConflict(err) {
			return Budget{}, budgetExists(id)
		}
		return Budget{}, storeErr(ctx, err, "create budget %s", id)
	}
	// Read your writes: the next call on this node sees the budget.
	l.waitDefs(ctx, func() bool { _, ok := l.defs.byID[id]; return ok })
	return b, nil
}

// Delete removes a budget and its spend records; it reports whether the
// budget existed. Reservations holding in it settle without it.
func (l *Ledger) Delete(ctx context.Context, budgetID string) (bool, error) {
	if err := (DeleteRequest{BudgetID: budgetID}).Validate(); err != nil {
		return false, err
	}
	existed := true
	if _, err := l.kv.Get(ctx, defKey(budgetID)); errors.Is(err, jetstream.ErrKeyNotFound) {
		existed = false
	} else if err != nil {
		return false, storeErr(ctx, err, "read budget %s", budgetID)
	}
	if existed {
		if err := l.kv.Purge(ctx, defKey(budgetID)); err != nil {
			return false, storeErr(ctx, err, "delete budget %s", budgetID)
		}
	}
	// Spend records go too, even when the definition was already gone (a
	// reserve racing an earlier delete may have left one). Should this
	// fail, a create of the same id purges them first.
	if err := l.purgeSpend(ctx, budgetID); err != nil {
		return false, err
	}
	l.waitDefs(ctx, func() bool { _, ok := l.defs.byID[budgetID]; return !ok })
	return existed, nil
}

// purgeLeftovers removes the spend records an earlier budget of id left
// behind, before a create of id; budgetExists when id is defined. Only
// leftovers go: the records are read, the definition checked again, and
// each record purged only at the revision read. A create of the same id
// racing this one (defined, then spending, between the checks) is never
// wiped: its definition is seen at the second check, or its spend moved
// a record past the revision read.
func (l *Ledger) purgeLeftovers(ctx context.Context, id string) error {
	defined := func() error {
		if _, err := l.kv.Get(ctx, defKey(id)); err == nil {
			return budgetExists(id)
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return storeErr(ctx, err, "read budget %s", id)
		}
		return nil
	}
	if err := defined(); err != nil {
		return err
	}
	l.stage("defined")
	keys, err := l.spendKeys(ctx, id)
	if err != nil {
		return err
	}
	revs := make(map[string]uint64, len(keys))
	for _, k := range keys {
		ent, err := l.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return storeErr(ctx, err, "read %s", k)
		}
		revs[k] = ent.Revision()
	}
	if err := defined(); err != nil {
		return err
	}
	l.stage("listed")
	for k, rev := range revs {
		err := l.kv.Purge(ctx, k, jetstream.LastRevision(rev))
		if err == nil {
			continue
		}
		if !isConflict(err) {
			return storeErr(ctx, err, "delete %s", k)
		}
		// The record moved since it was read: a budget of this id
		// spends, or a reserve that raced an earlier delete wrote it.
		if err := defined(); err != nil {
			return err
		}
		return wire.Errorf(wire.CodeConflict, "spend of budget %s changed while it was cleared; retry", id)
	}
	return nil
}

// spendKeys lists the keys of budget id's spend records.
func (l *Ledger) spendKeys(ctx context.Context, id string) ([]string, error) {
	lister, err := l.kv.ListKeysFiltered(ctx, spendPrefix+id+".*")
	if err != nil {
		return nil, storeErr(ctx, err, "list spend of budget %s", id)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	if ctx.Err() != nil {
		return nil, storeErr(ctx, ctx.Err(), "list spend of budget %s", id)
	}
	return keys, nil
}

// purgeSpend removes every spend record of budget id.
func (l *Ledger) purgeSpend(ctx context.Context, id string) error {
	keys, err := l.spendKeys(ctx, id)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := l.kv.Purge(ctx, k); err != nil {
			return storeErr(ctx, err, "delete %s", k)
		}
	}
	return nil
}

// waitDefs waits, briefly, for this node's copy of the definitions to
// satisfy cond (which runs under the copy's read lock).
func (l *Ledger) waitDefs(ctx context.Context, cond func() bool) {
	ctx, cancel := context.WithTimeout(ctx, defWait)
	defer cancel()
	if !l.defs.wait(ctx, cond) {
		l.logger.Warn("budget definitions copy lags behind a write of this node")
	}
}

// List returns every budget, sorted by id; never nil.
func (l *Ledger) List(context.Context) ([]Budget, error) { return l.defs.list(nil), nil }

// budget returns the definition of id from this node's copy, or from the
// bucket when the copy has not seen it yet.
func (l *Ledger) budget(ctx context.Context, id string) (Budget, bool, error) {
	if b, ok := l.defs.get(id); ok {
		return b, true, nil
	}
	ent, err := l.kv.Get(ctx, defKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Budget{}, false, nil
	}
	if err != nil {
		return Budget{}, false, storeErr(ctx, err, "read budget %s", id)
	}
	var b Budget
	if err := json.Unmarshal(ent.Value(), &b); err != nil || !b.Period.Valid() {
		return Budget{}, false, wire.Errorf(wire.CodeInternal, "budget %q does not decode", id)
	}
	return b, true, nil
}

// selectBudgets returns the budgets sel names, sorted by id: one by id
// (not_found when missing), every matching one by scope, or all.
func (l *Ledger) selectBudgets(ctx context.Context, sel selector) ([]Budget, error) {
	switch {
	case sel.BudgetID != "":
		b, ok, err := l.budget(ctx, sel.BudgetID)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, wire.Errorf(wire.CodeNotFound, "budget %q does not exist", sel.BudgetID)
		}
		return []Budget{b}, nil
	case sel.empty():
		return l.defs.list(nil), nil
	}
	return l.defs.list(func(b Budget) bool { return b.Matches(sel.WorkspaceID, sel.AgentID) }), nil
}

// Check reports whether every selected budget would admit the estimate
// now, without holding anything.
func (l *Ledger) Check(ctx context.Context, req CheckRequest) (CheckResponse, error) {
	if err := req.Validate(); err != nil {
		return CheckResponse{}, err
	}
	budgets, err := l.selectBudgets(ctx, req.selector())
	if err != nil {
		return CheckResponse{}, err
	}
	now := l.o.now()
	resp := CheckResponse{Allowed: true, Budgets: make([]Status, 0, len(budgets))}
	for _, b := range budgets {
		start, _ := b.Period.Bounds(now)
		st, _, _, err := l.readState(ctx, spendKey(b.BudgetID, start))
		if err != nil {
			return CheckResponse{}, err
		}
		s := status(b, start, st, now.UnixMilli())
		if !admits(b.CeilingUSD, st.SpentUSD, s.ReservedUSD, req.EstimatedUSD) {
			resp.Allowed = false
		}
		resp.Budgets = append(resp.Budgets, s)
	}
	return resp, nil
}

// Usage returns the current status of the selected budgets (all of them
// when the selector is empty) whose id sorts after req.After, by id.
func (l *Ledger) Usage(ctx context.Context, req UsageRequest) (UsageResponse, error) {
	return l.usage(ctx, req, nil)
}

// usage is [Ledger.Usage] within p (nil: everything), reading the state
// of only the budgets that fit.
func (l *Ledger) usage(ctx context.Context, req UsageRequest, p *answer.Pager) (UsageResponse, error) {
	if err := req.Validate(); err != nil {
		return UsageResponse{}, err
	}
	budgets, err := l.selectBudgets(ctx, req.selector())
	if err != nil {
		return UsageResponse{}, err
	}
	budgets = after(budgets, req.After)
	now := l.o.now()
	refs := make([]holdRef, len(budgets))
	for i, b := range budgets {
		start, _ := b.Period.Bounds(now)
		refs[i] = holdRef{BudgetID: b.BudgetID, PeriodStart: start.UnixMilli()}
	}
	var resp UsageResponse
	resp.Budgets, resp.Truncated, err = l.statusesWithin(ctx, refs, now.UnixMilli(), p)
	return resp, err
}

// statuses reads the status of each ref; budgets that no longer exist are
// left out. Never nil.
func (l *Ledger) statuses(ctx context.Context, refs []holdRef, nowMs int64) ([]Status, error) {
	out, _, err := l.statusesWithin(ctx, refs, nowMs, nil)
	return out, err
}

// statusesWithin is statuses up to the first that does not fit p (nil:
// all); truncated says some were left out.
func (l *Ledger) statusesWithin(ctx context.Context, refs []holdRef, nowMs int64, p *answer.Pager) (out []Status, truncated bool, err error) {
	out = make([]Status, 0, len(refs))
	for _, ref := range refs {
		b, ok, err := l.budget(ctx, ref.BudgetID)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			continue
		}
		st, _, _, err := l.readState(ctx, ref.key())
		if err != nil {
			return nil, false, err
		}
		s := status(b, ref.start(), st, nowMs)
		if p != nil {
			if ok, err := p.Fits(s); err != nil || !ok {
				return out, err == nil, err
			}
		}
		out = append(out, s)
	}
	return out, false, nil
}

// Reserve holds req.EstimatedUSD in every selected budget, all or nothing,
// or answers budget_exceeded naming the budget that refused. It is
// idempotent by reservation id: a repeated reserve of a granted
// reservation answers as the first did (with current figures) and holds
// nothing more. No selected budget means nothing to hold: the answer lists
// no budget and nothing is written (there is nothing to settle).
func (l *Ledger) Reserve(ctx context.Context, req ReserveRequest) (ReserveResponse, error) {
	if err := req.Validate(); err != nil {
		return ReserveResponse{}, err
	}
	budgets, err := l.selectBudgets(ctx, req.selector())
	if err != nil {
		return ReserveResponse{}, err
	}
	rid, key := req.ReservationID, resKey(req.ReservationID)
	now := l.o.now()
	nowMs := now.UnixMilli()
	if len(budgets) == 0 {
		rec, _, err := l.readRecord(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return ReserveResponse{}, err
		case rec.granted():
			return l.answer(ctx, rec, nowMs)
		}
		return ReserveResponse{ReservationID: rid, Budgets: []Status{}}, nil
	}

	ttl := l.o.ttl
	if req.TTLMs > 0 {
		ttl = time.Duration(req.TTLMs) * time.Millisecond
	}
	est := round(req.EstimatedUSD)
	rec := reservation{
		ReservationID: rid, State: resPending, EstimatedUSD: est, Budgets: make([]holdRef, len(budgets)),
		CreatedAt: nowMs, UpdatedAt: nowMs, ExpiresAt: now.Add(ttl).UnixMilli(),
	}
	for i, b := range budgets {
		start, _ := b.Period.Bounds(now)
		rec.Budgets[i] = holdRef{BudgetID: b.BudgetID, PeriodStart: start.UnixMilli()}
	}
	recTTL := ttl + l.o.retention

	// The pending record is the reservation's lock: one reserve of an id
	// places holds at a time, so all-or-nothing holds across budgets.
	rev, err := l.putRecord(ctx, key, rec, 0, recTTL)
	if isConflict(err) {
		old, oldRev, rerr := l.readRecord(ctx, key)
		switch {
		case errors.Is(rerr, jetstream.ErrKeyNotFound):
			return ReserveResponse{}, wire.Errorf(wire.CodeConflict, "reservation %q changed concurrently; retry", rid)
		case rerr != nil:
			return ReserveResponse{}, rerr
		case old.granted():
			return l.answer(ctx, old, nowMs)
		case now.Sub(time.UnixMilli(old.UpdatedAt)) < pendingLease:
			return ReserveResponse{}, wire.Errorf(wire.CodeConflict, "reservation %q is being made by another call; retry", rid)
		}
		// Abandoned by a reserve that died: take its place, then undo its
		// holds. Only the winner of the compare-and-set releases, so two
		// takeovers never drop each other's holds.
		rev, err = l.putRecord(ctx, key, rec, oldRev, recTTL)
		if isConflict(err) {
			return ReserveResponse{}, wire.Errorf(wire.CodeConflict, "reservation %q is being made by another call; retry", rid)
		}
		if err == nil {
			l.release(ctx, old.Budgets, rid)
		}
	}
	if err != nil {
		return ReserveResponse{}, storeErr(ctx, err, "create reservation %s", rid)
	}

	exp := rec.ExpiresAt
	out := make([]Status, 0, len(budgets))
	for i, b := range budgets {
		s, refusal, err := l.hold(ctx, b, rec.Budgets[i], rid, est, nowMs, exp)
		if err == nil && refusal == nil {
			out = append(out, s)
			continue
		}
		l.abandon(ctx, key, rev, rec.Budgets[:i], rid)
		if err != nil {
			return ReserveResponse{}, err
		}
		return ReserveResponse{}, refusal
	}

	rec.State = resHeld
	if _, err := l.putRecord(ctx, key, rec, rev, recTTL); err != nil {
		// The holds stay either way: if the write happened, the record is
		// held; if not, the next reserve of the id takes the pending record
		// over after the lease, and the holds lapse at their expiry.
		if isConflict(err) {
			return ReserveResponse{}, wire.Errorf(wire.CodeConflict, "reservation %q was taken over by another call; retry", rid)
		}
		return ReserveResponse{}, storeErr(ctx, err, "record reservation %s", rid)
	}
	return ReserveResponse{ReservationID: rid, Budgets: out}, nil
}

// answer is the reserve answer of an existing, granted reservation.
func (l *Ledger) answer(ctx context.Context, rec reservation, nowMs int64) (ReserveResponse, error) {
	out, err := l.statuses(ctx, rec.Budgets, nowMs)
	if err != nil {
		return ReserveResponse{}, err
	}
	return ReserveResponse{ReservationID: rec.ReservationID, Budgets: out, Existing: true, EstimatedUSD: rec.EstimatedUSD, State: rec.State}, nil
}

// hold places reservation rid's hold of est (until exp) in budget b's
// period ref. It returns the budget's status and, when b cannot admit
// the estimate, the budget_exceeded refusal (nothing is held then). A hold
// of rid already there is replaced: the caller holds rid's pending record,
// so that hold is an abandoned attempt's, or a lapsed one of an earlier
// reservation of the id whose record is gone (kept as a settle marker
// until the skew margin passes); either way this reserve is admitted on
// its own.
func (l *Ledger) hold(ctx context.Context, b Budget, ref holdRef, rid string, est float64, nowMs, exp int64) (Status, *wire.Error, error) {
	cutoff := l.pruneCutoff(nowMs)
	var (
		refusal *wire.Error
		fire    []float64
	)
	st, err := l.casState(ctx, ref.key(), func(st *periodState, _ bool) bool {
		refusal, fire = nil, nil
		_, stale := st.Holds[rid]
		delete(st.Holds, rid)
		reserved := st.reserved(nowMs)
		if !admits(b.CeilingUSD, st.SpentUSD, reserved, est) {
			refusal = exceeded(b, ref.start(), st.SpentUSD, reserved, est)
			// A refusal is the budget at 100 %: say so once per period.
			if slices.Contains(b.AlertThresholds, 1) && !st.alerted(1) {
				st.markAlerted(1)
				fire = []float64{1}
			}
			if stale || fire != nil {
				st.prune(cutoff)
				return true
			}
			return false
		}
		st.prune(cutoff)
		if st.Holds == nil {
			st.Holds = map[string]hold{}
		}
		st.Holds[rid] = hold{USD: est, Exp: exp}
		return true
	})
	if err != nil {
		return Status{}, nil, err
	}
	l.publishAlerts(ctx, b, ref.start(), st.SpentUSD, fire)
	return status(b, ref.start(), st, nowMs), refusal, nil
}

// exceeded is the budget_exceeded error of budget b refusing est.
func exceeded(b Budget, start time.Time, spent, reserved, est float64) *wire.Error {
	remaining := max(0, round(b.CeilingUSD-spent-reserved))
	_, end := b.Period.Bounds(start)
	return wire.Errorf(wire.CodeBudgetExceeded, "budget %s (%s) cannot hold %s: ceiling %s per %s, %s remaining",
		b.BudgetID, scopeText(b), usd(est), usd(b.CeilingUSD), b.Period, usd(remaining)).
		WithDetails(map[string]any{
			"budget_id":     b.BudgetID,
			"ceiling_usd":   b.CeilingUSD,
			"remaining_usd": remaining,
			"estimated_usd": est,
			"period_end":    end.UnixMilli(),
		})
}

func scopeText(b Budget) string {
	switch {
	case b.WorkspaceID != "" && b.AgentID != "":
		return "workspace " + b.WorkspaceID + ", agent " + b.AgentID
	case b.WorkspaceID != "":
		return "workspace " + b.WorkspaceID
	}
	return "agent " + b.AgentID
}

// release drops reservation rid's holds from refs, best effort (a hold
// left behind lapses at its expiry). It runs even after ctx ended.
func (l *Ledger) release(ctx context.Context, refs []holdRef, rid string) {
	if len(refs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for _, ref := range refs {
		_, err := l.casState(ctx, ref.key(), func(st *periodState, _ bool) bool {
			if _, ok := st.Holds[rid]; !ok {
				return false
			}
			delete(st.Holds, rid)
			return true
		})
		if err != nil {
			l.logger.Warn("budget hold not released; it lapses at its expiry", "budget_id", ref.BudgetID, "reservation_id", rid, "error", err)
		}
	}
}

// abandon undoes a refused or failed reserve: it releases the holds placed
// and removes the pending record at revision rev, so a retry starts anew.
func (l *Ledger) abandon(ctx context.Context, key string, rev uint64, placed []holdRef, rid string) {
	l.release(ctx, placed, rid)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := l.kv.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(time.Minute)); err != nil {
		l.logger.Warn("pending reservation not removed; the next reserve of its id takes it over after the lease", "reservation_id", rid, "error", err)
	}
}

// Settle counts req.ActualUSD as spent in every budget of the reservation
// (in the period it was made in, even if its hold expired) and drops the
// holds. Settling twice counts once: the first actual cost stays, in
// every budget, even when the first settle died between budgets (the
// record turns "settling" with the actual cost before any is counted). An
// unknown reservation (never granted, or settled or expired longer than
// the retention ago) is not_found.
func (l *Ledger) Settle(ctx context.Context, req SettleRequest) (SettleResponse, error) {
	if err := req.Validate(); err != nil {
		return SettleResponse{}, err
	}
	rid, key := req.ReservationID, resKey(req.ReservationID)
	now := l.o.now()
	nowMs := now.UnixMilli()
	actual := round(req.ActualUSD)
	for range l.o.attempts {
		rec, rev, err := l.readRecord(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return SettleResponse{}, wire.Errorf(wire.CodeNotFound, "reservation %q does not exist (never granted, or settled or expired more than %v ago)", rid, l.o.retention)
		}
		if err != nil {
			return SettleResponse{}, err
		}
		switch rec.State {
		case resSettled:
			out, err := l.statuses(ctx, rec.Budgets, nowMs)
			return SettleResponse{Budgets: out}, err
		case resPending:
			if now.Sub(time.UnixMilli(rec.UpdatedAt)) < pendingLease {
				return SettleResponse{}, wire.Errorf(wire.CodeConflict, "reservation %q is still being made; retry", rid)
			}
			return SettleResponse{}, wire.Errorf(wire.CodeNotFound, "reservation %q was never granted", rid)
		case resHeld:
			// Record the actual cost before counting it anywhere: a settle
			// that dies between budgets is finished by a retry with this
			// figure, whatever the retry says, so every budget counts the
			// same one. The record keeps its lifetime (see settlingTTL).
			rec.State, rec.ActualUSD, rec.UpdatedAt = resSettling, actual, nowMs
			rev, err = l.putRecord(ctx, key, rec, rev, l.settlingTTL(rec, now))
			if isConflict(err) {
				continue
			}
			if err != nil {
				return SettleResponse{}, storeErr(ctx, err, "record settlement of %s", rid)
			}
		case resSettling:
		default:
			return SettleResponse{}, wire.Errorf(wire.CodeInternal, "reservation %q has unknown state %q", rid, rec.State)
		}
		out := make([]Status, 0, len(rec.Budgets))
		for _, ref := range rec.Budgets {
			s, ok, err := l.spend(ctx, ref, rid, rec.ActualUSD, nowMs)
			if err != nil {
				return SettleResponse{}, err
			}
			if ok {
				out = append(out, s)
			}
		}
		rec.State, rec.SettledAt, rec.UpdatedAt = resSettled, nowMs, nowMs
		_, err = l.putRecord(ctx, key, rec, rev, l.o.retention)
		if err == nil {
			return SettleResponse{Budgets: out}, nil
		}
		if !isConflict(err) {
			// The spend is counted; a retry finds the holds gone and only
			// marks the record.
			return SettleResponse{}, storeErr(ctx, err, "record settlement of %s", rid)
		}
		// A concurrent settle of the same reservation: read it again.
	}
	return SettleResponse{}, wire.Errorf(wire.CodeConflict, "reservation %q changed concurrently; retry", rid)
}

// settlingTTL is the TTL of rec's "settling" record: what is left of the
// held record's life (expiry + retention), so that the record never
// outlives the holds that mark the budgets still to count (they stay
// until expiry + retention + skewMargin). At least a minute, well inside
// that margin, since a TTL cannot be zero.
func (l *Ledger) settlingTTL(rec reservation, now time.Time) time.Duration {
	return max(time.UnixMilli(rec.ExpiresAt).Add(l.o.retention).Sub(now), time.Minute)
}

// spend counts actual in budget ref if reservation rid still holds there
// (the hold's absence means an earlier settle counted it), announcing the
// thresholds crossed. ok is false when the budget no longer exists.
func (l *Ledger) spend(ctx context.Context, ref holdRef, rid string, actual float64, nowMs int64) (Status, bool, error) {
	b, ok, err := l.budget(ctx, ref.BudgetID)
	if err != nil || !ok {
		return Status{}, false, err
	}
	cutoff := l.pruneCutoff(nowMs)
	var fire []float64
	st, err := l.casState(ctx, ref.key(), func(st *periodState, _ bool) bool {
		fire = nil
		if _, ok := st.Holds[rid]; !ok {
			return false
		}
		delete(st.Holds, rid)
		st.SpentUSD = round(st.SpentUSD + actual)
		st.prune(cutoff)
		for _, t := range b.AlertThresholds {
			if st.SpentUSD >= t*b.CeilingUSD-nano/2 && !st.alerted(t) {
				st.markAlerted(t)
				fire = append(fire, t)
			}
		}
		return true
	})
	if err != nil {
		return Status{}, false, err
	}
	l.publishAlerts(ctx, b, ref.start(), st.SpentUSD, fire)
	return status(b, ref.start(), st, nowMs), true, nil
}

// pruneCutoff is the expiry before which a hold is dropped from its
// period state: its reservation record is gone by then.
func (l *Ledger) pruneCutoff(nowMs int64) int64 {
	return nowMs - (l.o.retention + skewMargin).Milliseconds()
}

// readState reads the period state under key (zero when absent).
func (l *Ledger) readState(ctx context.Context, key string) (periodState, uint64, bool, error) {
	ent, err := l.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return periodState{}, 0, false, nil
	}
	if err != nil {
		return periodState{}, 0, false, storeErr(ctx, err, "read %s", key)
	}
	var st periodState
	if err := json.Unmarshal(ent.Value(), &st); err != nil {
		l.logger.Error("budget period state does not decode", "key", key, "error", err)
		return periodState{}, 0, false, wire.Wrap(wire.CodeInternal, err, "ledger value %s does not decode", key)
	}
	return st, ent.Revision(), true, nil
}

// casState changes the period state under key by compare-and-set: fn
// edits a fresh copy and says whether to write it; a lost race reads
// again, after a jittered pause, up to the attempt bound. It returns the
// state written (or read, when fn wrote nothing).
func (l *Ledger) casState(ctx context.Context, key string, fn func(st *periodState, exists bool) bool) (periodState, error) {
	for attempt := range l.o.attempts {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return periodState{}, storeErr(ctx, err, "write %s", key)
			}
		}
		st, rev, exists, err := l.readState(ctx, key)
		if err != nil {
			return periodState{}, err
		}
		if !fn(&st, exists) {
			return st, nil
		}
		data, err := wire.MarshalJSON(st)
		if err != nil {
			return periodState{}, wire.Wrap(wire.CodeInternal, err, "encode %s", key)
		}
		if exists {
			_, err = l.kv.Update(ctx, key, data, rev)
		} else {
			_, err = l.kv.Create(ctx, key, data)
		}
		if err == nil {
			return st, nil
		}
		if !isConflict(err) {
			return periodState{}, storeErr(ctx, err, "write %s", key)
		}
	}
	return periodState{}, wire.Errorf(wire.CodeConflict, "ledger key %s changed concurrently %d times; retry", key, l.o.attempts)
}

// backoff pauses for a random time that grows with attempt, or until ctx
// ends.
func backoff(ctx context.Context, attempt int) error {
	limit := min(backoffMax, backoffBase<<min(attempt, 10))
	t := time.NewTimer(rand.N(limit) + 1)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readRecord reads the reservation record under key; a missing one is
// jetstream.ErrKeyNotFound.
func (l *Ledger) readRecord(ctx context.Context, key string) (reservation, uint64, error) {
	ent, err := l.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return reservation{}, 0, err
	}
	if err != nil {
		return reservation{}, 0, storeErr(ctx, err, "read %s", key)
	}
	var rec reservation
	if err := json.Unmarshal(ent.Value(), &rec); err != nil {
		l.logger.Error("reservation record does not decode", "key", key, "error", err)
		return reservation{}, 0, wire.Wrap(wire.CodeInternal, err, "ledger value %s does not decode", key)
	}
	return rec, ent.Revision(), nil
}

// putRecord writes a reservation record with a TTL: created when rev is
// 0, else a compare-and-set on rev (a raw publish, since KeyValue.Update
// cannot carry a TTL).
func (l *Ledger) putRecord(ctx context.Context, key string, rec reservation, rev uint64, ttl time.Duration) (uint64, error) {
	data, err := wire.MarshalJSON(rec)
	if err != nil {
		return 0, wire.Wrap(wire.CodeInternal, err, "encode %s", key)
	}
	if rev == 0 {
		return l.kv.Create(ctx, key, data, jetstream.KeyTTL(ttl))
	}
	msg := &nats.Msg{Subject: kvSubject(key), Data: data, Header: nats.Header{}}
	ack, err := l.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}
