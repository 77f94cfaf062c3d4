package models

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// BucketConfig is the configuration of subjects.ModelsBucket: one key per
// reconciled model or availability mark, "<provider>.<KVKey(model id)>",
// the value a [Record] as JSON.
func BucketConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      subjects.ModelsBucket,
		Description: "iii model catalog overlay: <provider>.<model id> → {model, available, reconciled}",
		History:     1,
		Storage:     jetstream.FileStorage,
	}
}

// markerKeep is how long a delete marker of the models bucket stays
// before a reconcile of its provider purges it: long enough for a watch
// that resumes after an outage to see the delete.
const markerKeep = time.Hour

// Record is the value under a key of subjects.ModelsBucket. A record of a
// catalog model only carries its id, provider and availability (the
// catalog keeps the rest); a reconciled record carries the whole model as
// far as the provider described it.
type Record struct {
	agent.Model
	Available  bool `json:"available"`
	Reconciled bool `json:"reconciled,omitempty"`
	// MissingSince is when (Unix ms) a reconcile first found the provider
	// no longer listing the model; 0 while it is available. A reconciled
	// record missing for longer than the retention
	// ([WithMissingRetention]) is deleted.
	MissingSince int64 `json:"missing_since,omitempty"`
}

// Store is the live model catalog: the base catalog (embedded, or
// [WithCatalog], with [WithCatalogFile] overrides) merged with the records
// of subjects.ModelsBucket, which it follows with a KV watch. Reads
// ([Store.List], [Store.Get], [Store.Supports]) are served from memory;
// [Store.Reconcile] writes the bucket. Every error it returns is a
// *wire.Error. A Store is safe for concurrent use, and any number of
// replicas may share the bucket.
type Store struct {
	e         *engine.Engine
	kv        jetstream.KeyValue
	logger    *slog.Logger
	timeout   time.Duration
	retention time.Duration
	now       func() time.Time

	base    []Entry       // immutable
	baseIdx map[nameK]int // id or alias → index in base

	view atomic.Pointer[view]
	// dirty says the overlay changed since view was built: the next read
	// builds it again ([Store.current]), so a burst of writes (a
	// reconcile's, or the watch delivering them) costs one build, not
	// one per record.
	dirty atomic.Bool
	// builds counts the views built (tests check a burst costs one).
	builds atomic.Uint64

	mu      sync.Mutex
	overlay map[string]overlayEntry // by KV key; deletes stay as tombstones
	// racing holds the keys this store wrote while a watch snapshot
	// loaded (nil between loads): the only state newer than the snapshot
	// that [Store.replace] keeps.
	racing map[string]struct{}

	stop      context.CancelFunc
	watchDone chan struct{}
}

// overlayEntry is a key's latest known state; rec nil means deleted (or a
// value that does not decode).
type overlayEntry struct {
	rec *Record
	rev uint64
}

// view is an immutable snapshot of the merged catalog.
type view struct {
	models []Model       // sorted by provider, then id
	byName map[nameK]int // id or alias → index
}

// Open builds the catalog from opts, opens (creating when missing) the
// models bucket through e and loads its records; it returns once they are
// loaded, and follows the bucket until [Store.Close].
func Open(ctx context.Context, e *engine.Engine, opts ...Option) (*Store, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	entries, err := o.catalog()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrInvalidOption, err)
	}
	kv, err := e.EnsureKV(ctx, BucketConfig())
	if err != nil {
		return nil, err
	}
	logger := o.logger
	if logger == nil {
		logger = e.Logger().With("worker", WorkerName)
	}
	s := &Store{
		e: e, kv: kv, logger: logger, timeout: o.reconcileTimeout, retention: o.missingRetention, now: o.now,
		base: entries, baseIdx: make(map[nameK]int, len(entries)),
		overlay: map[string]overlayEntry{}, watchDone: make(chan struct{}),
	}
	for i, en := range entries {
		for _, name := range names(en) {
			s.baseIdx[nameKey(en.Provider, name)] = i
		}
	}
	s.rebuildLocked()
	wctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	w, err := engine.WatchKV(wctx, e.Conn(), kv, engine.KVWatchConfig{})
	if err != nil {
		stop()
		return nil, storeErr(ctx, err, "watch %s", subjects.ModelsBucket)
	}
	ready := make(chan struct{})
	loadErr := make(chan error, 1)
	go s.follow(wctx, w, o.bucketCheck, ready, loadErr)
	select {
	case <-ready:
		return s, nil
	case <-s.watchDone:
		stop()
		return nil, storeErr(ctx, <-loadErr, "load %s", subjects.ModelsBucket)
	case <-ctx.Done():
		_ = s.Close(context.Background())
		return nil, storeErr(ctx, ctx.Err(), "load %s", subjects.ModelsBucket)
	}
}

// Close stops following the bucket and waits, until ctx ends, for the
// watch to stop. It is idempotent.
func (s *Store) Close(ctx context.Context) error {
	s.stop()
	select {
	case <-s.watchDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// follow keeps the overlay equal to the bucket w watches until ctx ends
// (engine.FollowBucket, checking every check): a bucket deleted and
// created again is followed again, and each watch's snapshot replaces the
// overlay; while the bucket is gone the overlay stays. The first load
// closes ready; a first watch that ends before it loads sends why on
// loadErr (then watchDone closes).
func (s *Store) follow(ctx context.Context, w *engine.KVWatch, check time.Duration, ready chan struct{}, loadErr chan<- error) {
	defer close(s.watchDone)
	var fresh map[string]overlayEntry
	err := engine.FollowBucket(ctx, s.e, w, engine.BucketFollower{
		Name:  "models catalog",
		Check: check,
		KVMirror: engine.KVMirror{
			Begin: func() {
				fresh = map[string]overlayEntry{}
				s.mu.Lock()
				s.racing = map[string]struct{}{}
				s.mu.Unlock()
			},
			Entry: func(ent jetstream.KeyValueEntry, live bool) {
				rec := s.decode(ent)
				if !live {
					fresh[ent.Key()] = overlayEntry{rec: rec, rev: ent.Revision()}
					return
				}
				s.apply(ent.Key(), rec, ent.Revision(), false)
			},
			Loaded: func(first bool) {
				s.replace(fresh)
				fresh = nil
				if first {
					close(ready)
				}
			},
		},
	})
	if err != nil {
		s.logger.Error("models catalog watch ended before the records loaded", "bucket", subjects.ModelsBucket, "error", err)
	}
	loadErr <- err // nil once ctx ended: nobody reads it then
}

// decode reads a bucket entry; a delete, a purge or a value that does not
// decode (logged) is nil.
func (s *Store) decode(ent jetstream.KeyValueEntry) *Record {
	if ent.Operation() != jetstream.KeyValuePut {
		return nil
	}
	rec, err := decodeRecord(ent.Key(), ent.Value())
	if err != nil {
		s.logger.Warn("models record ignored: bad value", "key", ent.Key(), "error", err)
		return nil
	}
	return rec
}

// decodeRecord parses a record and checks it sits under its own key.
func decodeRecord(key string, value []byte) (*Record, error) {
	var rec Record
	if err := json.Unmarshal(value, &rec); err != nil {
		return nil, err
	}
	want, err := recordKey(rec.Provider, rec.ID)
	if err != nil {
		return nil, err
	}
	if want != key {
		return nil, fmt.Errorf("record of %s %q belongs under key %q", rec.Provider, rec.ID, want)
	}
	if err := validDisplayName(rec.DisplayName); err != nil {
		return nil, err
	}
	if err := validPricing(rec.Pricing); err != nil {
		return nil, err
	}
	if rec.ContextWindow < 0 || rec.MaxOutputTokens < 0 {
		return nil, errors.New("negative token limit")
	}
	return &rec, nil
}

// apply records key's state at rev unless a newer revision is known; the
// next read builds the view anew. own is a write of this store (not seen
// through the watch).
func (s *Store) apply(key string, rec *Record, rev uint64, own bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.overlay[key]; ok && cur.rev >= rev {
		return
	}
	s.overlay[key] = overlayEntry{rec: rec, rev: rev}
	if own && s.racing != nil {
		s.racing[key] = struct{}{}
	}
	s.dirty.Store(true)
}

// replace installs a watch snapshot in place of the overlay. A key this
// store wrote while the snapshot loaded, at a revision newer than the
// snapshot saw (a reconcile that raced the watch), keeps its state until
// the live watch delivers it. Nothing else is kept: the revisions of a
// bucket deleted and created again start over, so the old overlay's are
// not compared with the snapshot's.
func (s *Store) replace(fresh map[string]overlayEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var maxRev uint64
	for _, f := range fresh {
		maxRev = max(maxRev, f.rev)
	}
	for k := range s.racing {
		cur, had := s.overlay[k]
		if f, ok := fresh[k]; had && ((ok && f.rev < cur.rev) || (!ok && cur.rev > maxRev)) {
			fresh[k] = cur
		}
	}
	s.racing = nil
	s.overlay = fresh
	s.rebuildLocked()
}

// current is the view of the overlay as it stands, built again when a
// write changed it since the last build.
func (s *Store) current() *view {
	if s.dirty.Load() {
		s.mu.Lock()
		if s.dirty.Load() {
			s.rebuildLocked()
		}
		s.mu.Unlock()
	}
	return s.view.Load()
}

// rebuildLocked merges base and overlay into a new view. Callers hold
// s.mu (or own s exclusively).
func (s *Store) rebuildLocked() {
	models := make([]Model, len(s.base), len(s.base)+len(s.overlay))
	for i, en := range s.base {
		models[i] = Model{Entry: en, Available: true}
	}
	for _, oe := range s.overlay {
		r := oe.rec
		if r == nil {
			continue
		}
		if i, ok := s.baseIdx[nameKey(r.Provider, r.ID)]; ok {
			// Only the mark under the entry's own id counts: reconcile
			// writes no other. A record under one of its aliases was
			// reconciled before the catalog knew the name; nothing
			// rewrites it, and it would mask (or fight over) the entry's
			// availability.
			if s.base[i].ID == r.ID {
				models[i].Available = r.Available
			}
			continue
		}
		if !r.Reconciled {
			continue // a mark for a model the catalog no longer has
		}
		models = append(models, Model{Entry: Entry{Model: r.Model}, Available: r.Available, Reconciled: true})
	}
	slices.SortFunc(models, func(a, b Model) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.ID, b.ID))
	})
	v := &view{models: models, byName: make(map[nameK]int, len(models)+8)}
	for i, m := range models {
		v.byName[nameKey(m.Provider, m.ID)] = i
	}
	for i, m := range models {
		for _, a := range m.Aliases {
			if _, taken := v.byName[nameKey(m.Provider, a)]; !taken {
				v.byName[nameKey(m.Provider, a)] = i
			}
		}
	}
	s.view.Store(v)
	s.dirty.Store(false)
	s.builds.Add(1)
}

// Catalog is the base catalog the store merges the bucket onto (a copy).
func (s *Store) Catalog() []Entry { return cloneEntries(s.base) }

// List returns the models of provider (all when "") that have capability
// (any when ""), sorted by provider then id. Unavailable and reconciled
// models are included.
func (s *Store) List(provider, capability string) ([]Model, error) {
	if err := (ListRequest{Provider: provider, Capability: capability}).Validate(); err != nil {
		return nil, err
	}
	v := s.current()
	out := []Model{}
	for _, m := range v.models {
		if provider != "" && m.Provider != provider {
			continue
		}
		if capability != "" && !m.Supports(capability) {
			continue
		}
		out = append(out, m.Clone())
	}
	return out, nil
}

// Get returns the model of provider named modelID (its id or an alias), or
// nil when the catalog has no such model.
func (s *Store) Get(provider, modelID string) (*Model, error) {
	if err := (GetRequest{Provider: provider, ModelID: modelID}).Validate(); err != nil {
		return nil, err
	}
	v := s.current()
	i, ok := v.byName[nameKey(provider, modelID)]
	if !ok {
		return nil, nil
	}
	m := v.models[i].Clone()
	return &m, nil
}

// Supports reports whether the model has capability; an unknown model
// supports nothing. Availability does not change the answer.
func (s *Store) Supports(provider, modelID, capability string) (bool, error) {
	if err := (SupportsRequest{Provider: provider, ModelID: modelID, Capability: capability}).Validate(); err != nil {
		return false, err
	}
	v := s.current()
	i, ok := v.byName[nameKey(provider, modelID)]
	return ok && v.models[i].Supports(capability), nil
}

// Reconcile asks provider::<provider>::models for the models the provider
// serves and brings the bucket in line: a listed model the catalog lacks
// is stored as a reconciled record (capabilities false, prices zero); a
// catalog model (or an earlier reconciled one) the provider does not list
// is marked available false, stamped with when it was first found
// missing; a listed model marked unavailable before is marked available
// again. A reconciled record missing for longer than the retention
// ([WithMissingRetention]) is deleted instead (counted in Dropped, not
// listed in Missing), unless another replica rewrote it meanwhile; the
// delete marker that leaves in the bucket is purged by a run an hour
// later (any deleted key of the provider's, likewise). Only
// records that change are written (last writer wins; every replica
// computes the same records), so a second run with the same answer
// writes nothing and returns the same lists. A provider that does not
// answer — nobody serves the function, it times out
// ([WithReconcileTimeout]) or fails — is unavailable.
func (s *Store) Reconcile(ctx context.Context, provider string) (ReconcileResponse, error) {
	if err := (ReconcileRequest{Provider: provider}).Validate(); err != nil {
		return ReconcileResponse{}, err
	}
	reported, skipped, err := s.askProvider(ctx, provider)
	if err != nil {
		return ReconcileResponse{}, err
	}
	current, markers, err := s.records(ctx, provider)
	if err != nil {
		return ReconcileResponse{}, err
	}
	resp := ReconcileResponse{Provider: provider, Known: []string{}, Added: []string{}, Missing: []string{}, Skipped: skipped}
	now := s.now().UnixMilli()
	// missingSince keeps the stamp of a record already unavailable (one
	// written before stamps existed gets one now).
	missingSince := func(cur overlayEntry) int64 {
		if cur.rec != nil && !cur.rec.Available && cur.rec.MissingSince > 0 {
			return cur.rec.MissingSince
		}
		return now
	}
	desired := map[string]Record{}
	var drop []string           // reconciled records missing past the retention
	listed := map[string]bool{} // catalog ids the provider listed (by id or alias)
	for _, pm := range reported {
		key, _ := recordKey(provider, pm.ID) // askProvider kept only ids with a key
		if i, ok := s.baseIdx[nameKey(provider, pm.ID)]; ok {
			resp.Known = append(resp.Known, pm.ID)
			listed[s.base[i].ID] = true
			continue
		}
		resp.Added = append(resp.Added, pm.ID)
		desired[key] = Record{Model: agent.Model{ID: pm.ID, Provider: provider, DisplayName: pm.DisplayName}, Available: true, Reconciled: true}
	}
	for _, en := range s.base {
		if en.Provider != provider {
			continue
		}
		key, _ := recordKey(provider, en.ID) // catalog ids were validated
		if listed[en.ID] {
			if cur := current[key]; cur.rec != nil && !cur.rec.Available {
				desired[key] = Record{Model: agent.Model{ID: en.ID, Provider: provider}, Available: true}
			}
			continue
		}
		resp.Missing = append(resp.Missing, en.ID)
		desired[key] = Record{Model: agent.Model{ID: en.ID, Provider: provider}, Available: false, MissingSince: missingSince(current[key])}
	}
	for key, cur := range current {
		if cur.rec == nil || !cur.rec.Reconciled {
			continue
		}
		if _, ok := desired[key]; ok {
			continue // listed again
		}
		if _, ok := s.baseIdx[nameKey(provider, cur.rec.ID)]; ok {
			continue // the catalog describes it now
		}
		gone := *cur.rec
		gone.Available = false
		gone.MissingSince = missingSince(cur)
		if now-gone.MissingSince > s.retention.Milliseconds() {
			drop = append(drop, key)
			continue
		}
		resp.Missing = append(resp.Missing, cur.rec.ID)
		desired[key] = gone
	}
	keys := make([]string, 0, len(desired))
	for k := range desired {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		want := desired[key]
		if cur := current[key]; cur.rec != nil && *cur.rec == want {
			continue
		}
		data, err := json.Marshal(want)
		if err != nil {
			return ReconcileResponse{}, wire.Wrap(wire.CodeInternal, err, "encode record %s", key)
		}
		rev, err := s.kv.Put(ctx, key, data)
		if err != nil {
			return ReconcileResponse{}, storeErr(ctx, err, "write %s %s", subjects.ModelsBucket, key)
		}
		s.apply(key, &want, rev, true)
	}
	slices.Sort(drop)
	for _, key := range drop {
		cur := current[key]
		err := s.kv.Delete(ctx, key, jetstream.LastRevision(cur.rev))
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // another replica wrote it meanwhile: its run decides
		}
		if err != nil {
			return ReconcileResponse{}, storeErr(ctx, err, "delete %s %s", subjects.ModelsBucket, key)
		}
		// The delete marker's revision is above cur.rev and below any
		// later write of the key (the delete expected cur.rev): cur.rev+1
		// orders it until the watch brings the exact one.
		s.apply(key, nil, cur.rev+1, true)
		resp.Dropped++
	}
	if resp.Dropped > 0 {
		s.logger.Info("reconciled models dropped: missing past the retention", "provider", provider, "dropped", resp.Dropped, "retention", s.retention)
	}
	// The marker a delete leaves is the key's one message in the stream
	// (History 1): purged once every watch had time to see it, or the
	// bucket would keep one per model the provider ever listed.
	old := make([]string, 0, len(markers))
	for key, m := range markers {
		if _, written := desired[key]; !written && now-m.created.UnixMilli() > markerKeep.Milliseconds() {
			old = append(old, key)
		}
	}
	slices.Sort(old)
	if err := s.purgeMarkers(ctx, old, markers); err != nil {
		// Housekeeping: the records are right; the next run tries again.
		s.logger.Warn("models delete markers not purged", "provider", provider, "markers", len(old), "error", err)
	}
	slices.Sort(resp.Known)
	slices.Sort(resp.Added)
	slices.Sort(resp.Missing)
	return resp, nil
}

// askProvider calls provider::<provider>::models and returns its models
// with valid, distinct ids (display names that are not printable are
// dropped), and how many it skipped.
func (s *Store) askProvider(ctx context.Context, provider string) ([]ProviderModel, int, error) {
	fn := ProviderModelsFunction(provider)
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var resp ProviderModelsResponse
	if err := s.e.Trigger(cctx, fn, struct{}{}, &resp); err != nil {
		if we := ctxErr(ctx, "reconcile "+provider); we != nil {
			return nil, 0, we
		}
		switch {
		case errors.Is(err, wire.ErrFunctionNotFound):
			return nil, 0, wire.Wrap(wire.CodeUnavailable, err, "provider %s does not answer: nobody serves %s", provider, fn)
		case errors.Is(err, wire.ErrTimeout) || errors.Is(cctx.Err(), context.DeadlineExceeded):
			return nil, 0, wire.Wrap(wire.CodeUnavailable, err, "provider %s does not answer: %s took longer than %v", provider, fn, s.timeout)
		}
		return nil, 0, wire.Wrap(wire.CodeUnavailable, err, "provider %s does not answer: %s failed", provider, fn)
	}
	if len(resp.Models) > MaxProviderModels {
		return nil, 0, wire.Errorf(wire.CodeUnavailable, "provider %s listed %d models, more than %d", provider, len(resp.Models), MaxProviderModels)
	}
	out := make([]ProviderModel, 0, len(resp.Models))
	seen := make(map[string]bool, len(resp.Models))
	skipped, firstSkipped := 0, ""
	for _, pm := range resp.Models {
		if _, err := recordKey(provider, pm.ID); err != nil || seen[pm.ID] {
			if skipped == 0 {
				firstSkipped = pm.ID
			}
			skipped++
			continue
		}
		seen[pm.ID] = true
		if validDisplayName(pm.DisplayName) != nil {
			pm.DisplayName = ""
		}
		out = append(out, ProviderModel{ID: pm.ID, DisplayName: pm.DisplayName})
	}
	if skipped > 0 {
		s.logger.Warn("provider models skipped: invalid or repeated ids", "provider", provider, "skipped", skipped, "first", fmt.Sprintf("%.80q", firstSkipped))
	}
	return out, skipped, nil
}

// marker is a delete or purge marker of the models bucket: what the
// stream keeps of a deleted key.
type marker struct {
	rev     uint64
	created time.Time
}

// records reads the bucket's records of provider, and the markers of its
// deleted keys (a snapshot, not the watched overlay, so replicas decide
// on the stored state).
func (s *Store) records(ctx context.Context, provider string) (map[string]overlayEntry, map[string]marker, error) {
	w, err := s.kv.WatchFiltered(ctx, []string{provider + ".>"})
	if err != nil {
		return nil, nil, storeErr(ctx, err, "watch %s", subjects.ModelsBucket)
	}
	out, markers := map[string]overlayEntry{}, map[string]marker{}
	snap, stop := context.WithCancel(ctx)
	defer stop()
	loaded := false
	ferr := engine.FollowKV(snap, w, func(ent jetstream.KeyValueEntry) {
		if loaded {
			return
		}
		if ent.Operation() != jetstream.KeyValuePut {
			markers[ent.Key()] = marker{rev: ent.Revision(), created: ent.Created()}
			return
		}
		out[ent.Key()] = overlayEntry{rec: s.decode(ent), rev: ent.Revision()}
	}, func() {
		loaded = true
		stop()
	})
	if !loaded {
		if ferr == nil {
			ferr = ctx.Err()
		}
		return nil, nil, storeErr(ctx, ferr, "read %s", subjects.ModelsBucket)
	}
	return out, markers, nil
}

// purgeMarkers removes from the bucket's stream the markers of keys (and
// nothing written after them: each purge stops at the marker's revision),
// and forgets those the store still holds.
func (s *Store) purgeMarkers(ctx context.Context, keys []string, markers map[string]marker) error {
	if len(keys) == 0 {
		return nil
	}
	st, err := s.e.JetStream().Stream(ctx, "KV_"+subjects.ModelsBucket)
	if err != nil {
		return storeErr(ctx, err, "purge %s", subjects.ModelsBucket)
	}
	for _, key := range keys {
		if err := s.purgeMarker(ctx, st, key, markers[key].rev); err != nil {
			return err
		}
	}
	return nil
}

// purgeMarker removes the marker of key at rev from st.
func (s *Store) purgeMarker(ctx context.Context, st jetstream.Stream, key string, rev uint64) error {
	err := st.Purge(ctx, jetstream.WithPurgeSubject("$KV."+subjects.ModelsBucket+"."+key), jetstream.WithPurgeSequence(rev+1))
	if err != nil {
		return storeErr(ctx, err, "purge %s %s", subjects.ModelsBucket, key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.overlay[key]; ok && cur.rec == nil && cur.rev <= rev {
		delete(s.overlay, key)
	}
	return nil
}
