package approval

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// settingsAttempts bounds the compare-and-set attempts of one settings
// write before it answers conflict.
const settingsAttempts = 8

// ApprovalsBucketConfig is the configuration both the orchestrator and this
// worker pass to EnsureKV (EnsureSessionKV) for subjects.ApprovalsBucket,
// so either may create it: the primary copy's; a region's copy is the same
// with its own name and placement.
func ApprovalsBucketConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: subjects.ApprovalsBucket, History: 1, Storage: jetstream.FileStorage}
}

// SettingsBucketConfig is the same for subjects.ApprovalSettingsBucket.
func SettingsBucketConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: subjects.ApprovalSettingsBucket, History: 1, Storage: jetstream.FileStorage}
}

// Store is the approval gate over its per-session KV buckets (approvals,
// settings, and the decision receipts): the logic behind the four
// functions, callable in process. Every error it
// returns is a *wire.Error. A Store is safe for concurrent use; every write
// is a compare-and-set, so any number of replicas may share the buckets.
type Store struct {
	// kv is the copy of per-session bucket that holds session sid's keys
	// (engine.SessionKV: the primary copy, or that of sid's home region).
	kv func(ctx context.Context, bucket, sid string) (jetstream.KeyValue, error)
	// regions lists the regions having a copy of a bucket's stream, ""
	// (the primary copy) first (engine.SessionRegions).
	regions func(ctx context.Context, stream string) ([]string, error)
	// regionKV is region's copy of a bucket (engine.RegionKV).
	regionKV func(ctx context.Context, bucket, region string) (jetstream.KeyValue, error)
	// maxPayload is the server's max payload, which an answer must fit.
	maxPayload func() int64
	now        func() time.Time
	logger     *slog.Logger
	// decisionTTL is how long a receipt answers a repeated resolve.
	decisionTTL time.Duration
	// settleDelay is how long the worker's sweep waits before it checks a
	// receipt (0: no sweep).
	settleDelay time.Duration
	// nc is the connection the buckets are used over (engine.MirrorKV).
	nc *nats.Conn
	// warned is shared by the copies of a Store the tests make.
	warned *warnedSettings
}

// warnedSettings holds the stored settings (session id → revision) whose
// dropped patterns were logged, so that each value is logged once.
type warnedSettings struct {
	mu   sync.Mutex
	revs map[string]uint64
}

// maxWarned bounds the settings a [warnedSettings] remembers; past it the
// memory starts over (a value may then be logged again).
const maxWarned = 1024

// Open opens (creating when missing) the approvals, settings and
// decisions buckets through e: their primary copies and, when e has a
// region, that region's copies (engine.EnsureSessionKV). Each session's
// keys are then read and written in the copy of its home region.
func Open(ctx context.Context, e *engine.Engine, opts ...Option) (*Store, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if _, err := e.EnsureSessionKV(ctx, ApprovalsBucketConfig()); err != nil {
		return nil, err
	}
	if _, err := e.EnsureSessionKV(ctx, SettingsBucketConfig()); err != nil {
		return nil, err
	}
	logger := o.logger
	if logger == nil {
		logger = e.Logger().With("worker", WorkerName)
	}
	decisions, err := e.EnsureSessionKV(ctx, DecisionsBucketConfig(o.decisionTTL))
	if err != nil {
		return nil, err
	}
	// The bucket keeps the max age of whoever created it.
	if st, err := decisions.Status(ctx); err == nil && st.TTL() > 0 && st.TTL() < o.decisionTTL {
		logger.Warn("the decisions bucket drops receipts before the decision TTL", "bucket", DecisionsBucket, "max_age", st.TTL(), "decision_ttl", o.decisionTTL)
	}
	return &Store{kv: e.SessionKV, regions: e.SessionRegions, regionKV: e.RegionKV, maxPayload: e.Conn().MaxPayload, nc: e.Conn(), now: o.now, logger: logger, decisionTTL: o.decisionTTL, settleDelay: o.settleDelay, warned: &warnedSettings{}}, nil
}

// bucket is the copy of per-session bucket holding session sid's keys. A
// session homed in a region with no copy is the engine's not_found error
// (wrapping engine.ErrUnknownRegion), passed through.
func (s *Store) bucket(ctx context.Context, bucket, sid string) (jetstream.KeyValue, error) {
	kv, err := s.kv(ctx, bucket, sid)
	if err == nil {
		return kv, nil
	}
	if errors.Is(err, engine.ErrUnknownRegion) {
		return nil, err
	}
	return nil, storeErr(ctx, err, "open bucket %s", subjects.SessionBucket(bucket, sid))
}

// Resolve decides a pending call: the record under subjects.ApprovalKey
// turns from pending to decided (decision, reason, decided_at) by a
// compare-and-set on its revision, so a call is decided at most once.
//
// The decision is taken when its receipt is written to [DecisionsBucket]
// (create, first writer wins), just before the record: a call that finds a
// receipt bound to the pending record writes that receipt's decision into
// it, so a resolver stopped between the two writes loses nothing, and a
// decision once taken is the only one. Asked again with the same decision
// and reason (args_hash, when given, the call's) — a retry after a lost
// reply — it answers success with already_decided, from the decided
// record, or from the receipt once the orchestrator deleted the record,
// for the decision TTL. Any other request for a call that is not waiting
// — no record and no such receipt, decided otherwise, a record that does
// not decode, or args_hash given and different from the record's — is
// not_pending. Losing the compare-and-set re-reads the record once.
func (s *Store) Resolve(ctx context.Context, req ResolveRequest) (ResolveResponse, error) {
	if err := req.Validate(); err != nil {
		return ResolveResponse{}, err
	}
	key, err := subjects.ApprovalKey(req.SessionID, req.FunctionCallID)
	if err != nil {
		return ResolveResponse{}, invalidWrap(err)
	}
	approvals, err := s.bucket(ctx, subjects.ApprovalsBucket, req.SessionID)
	if err != nil {
		return ResolveResponse{}, err
	}
	receipts, err := s.receipts(ctx, req.SessionID)
	if err != nil {
		return ResolveResponse{}, err
	}
	ours := verdict{Decision: req.Decision, Reason: req.Reason, DecidedAt: s.now().UnixMilli(), DecidedTrace: traceCarrier(ctx)}
	var mine uint64 // the revision of the receipt this call wrote
	for attempt := 0; ; attempt++ {
		ent, err := approvals.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return s.answerGone(ctx, receipts, key, req, mine)
		}
		if err != nil {
			return ResolveResponse{}, storeErr(ctx, err, "read approval %s", key)
		}
		rec, raw, werr := readRecord(ent.Value(), req)
		if werr != nil {
			s.logger.Warn("approval record does not decode", "key", key, "error", werr)
			return ResolveResponse{}, werr
		}
		if rec.Status == agent.ApprovalDecided {
			v := recordVerdict(rec)
			return answer(req, v, rec.ArgsHash, mine != 0 && v.same(ours))
		}
		data, werr := decide(rec, raw, req, ours)
		if werr != nil {
			return ResolveResponse{}, werr
		}
		// Refused before the receipt is written: a decision taken must fit.
		if limit := s.maxPayload() - writeRoom; int64(len(data)) > limit {
			return ResolveResponse{}, tooLarge(req, len(data))
		}
		v, ownV := ours, true
		if receipts != nil {
			var rev uint64
			var wrote bool
			if v, rev, wrote, err = s.claim(ctx, receipts, key, req, rec, ours); err != nil {
				return ResolveResponse{}, err
			}
			if wrote {
				mine = rev
			}
			if ownV = rev == mine; !ownV {
				// An earlier call's decision, not yet in the record.
				if data, werr = decided(raw, v); werr != nil {
					return ResolveResponse{}, werr
				}
			}
		}
		_, err = approvals.Update(ctx, key, data, ent.Revision())
		if err == nil {
			return answer(req, v, rec.ArgsHash, ownV)
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			return ResolveResponse{}, tooLarge(req, len(data))
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return ResolveResponse{}, storeErr(ctx, err, "write approval %s", key)
		}
		if attempt > 0 {
			return ResolveResponse{}, wire.Errorf(wire.CodeConflict, "call %q of session %q changed concurrently; retry", req.FunctionCallID, req.SessionID)
		}
	}
}

// writeRoom is what a KV write leaves of the server's max payload for its
// headers (the expected revision: under 100 bytes).
const writeRoom = 256

// tooLarge is the invalid_payload error of a decided record of size bytes
// that would not fit the server's max payload. Only a record another
// client wrote comes this close to the limit; a shorter reason may fit.
func tooLarge(req ResolveRequest, size int) *wire.Error {
	return wire.Wrap(wire.CodeInvalidPayload, nats.ErrMaxPayload, "call %q of session %q: its decided record of %d bytes would not fit the server's max payload (a shorter reason may)", req.FunctionCallID, req.SessionID, size)
}

// receipts is the copy of [DecisionsBucket] holding session sid's
// receipts; nil (and a warning) when the session's region has a copy of
// the approvals bucket but none of this one (its nodes predate it): the
// call is then decided without a receipt, and a repeat after the
// orchestrator's delete is not_pending.
func (s *Store) receipts(ctx context.Context, sid string) (jetstream.KeyValue, error) {
	kv, err := s.kv(ctx, DecisionsBucket, sid)
	if err == nil {
		return kv, nil
	}
	if errors.Is(err, engine.ErrUnknownRegion) {
		s.logger.Warn("no decisions bucket in the session's region; deciding without a receipt", "session_id", sid, "bucket", subjects.SessionBucket(DecisionsBucket, sid))
		return nil, nil
	}
	return nil, storeErr(ctx, err, "open bucket %s", subjects.SessionBucket(DecisionsBucket, sid))
}

// errUndecodable marks a record that is not an approval record.
var errUndecodable = errors.New("approval record does not decode")

// readRecord decodes a stored approval record, keeping its raw fields. A
// value that does not decode is not_pending wrapping errUndecodable.
func readRecord(value []byte, req ResolveRequest) (agent.ApprovalRecord, map[string]json.RawMessage, *wire.Error) {
	var rec agent.ApprovalRecord
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(value, &rec); err != nil {
		return rec, nil, wire.Wrap(wire.CodeNotPending, fmt.Errorf("%w: %v", errUndecodable, err), "call %q of session %q has a record that cannot be decided", req.FunctionCallID, req.SessionID)
	}
	if err := json.Unmarshal(value, &raw); err != nil || raw == nil {
		return rec, nil, wire.Wrap(wire.CodeNotPending, errUndecodable, "call %q of session %q has a record that cannot be decided", req.FunctionCallID, req.SessionID)
	}
	return rec, raw, nil
}

// decide checks that the record rec (raw, as stored) is pending, and binds
// to req.ArgsHash when given, and returns it decided to v.
func decide(rec agent.ApprovalRecord, raw map[string]json.RawMessage, req ResolveRequest, v verdict) ([]byte, *wire.Error) {
	switch rec.Status {
	case agent.ApprovalPending:
	case agent.ApprovalDecided:
		return nil, notPending("call %q of session %q was already decided (%s)", req.FunctionCallID, req.SessionID, rec.Decision)
	default:
		return nil, notPending("call %q of session %q is not waiting for approval (status %.32q)", req.FunctionCallID, req.SessionID, string(rec.Status))
	}
	if req.ArgsHash != "" && !strings.EqualFold(req.ArgsHash, rec.ArgsHash) {
		return nil, notPending("the call changed since it was shown: call %q of session %q now has args_hash %.80q, not %s", req.FunctionCallID, req.SessionID, rec.ArgsHash, req.ArgsHash)
	}
	return decided(raw, v)
}

// decided is the record raw decided to v. Every other field — those this
// package does not know included, so the orchestrator may add some —
// keeps its JSON value. raw is changed.
func decided(raw map[string]json.RawMessage, v verdict) ([]byte, *wire.Error) {
	set := func(k string, x any) {
		b, _ := json.Marshal(x) // strings, ints and string maps always encode
		raw[k] = b
	}
	set("status", agent.ApprovalDecided)
	set("decision", v.Decision)
	set("decided_at", v.DecidedAt)
	if v.Reason != "" {
		set("reason", v.Reason)
	} else {
		delete(raw, "reason")
	}
	if len(v.DecidedTrace) > 0 {
		set("decided_trace", v.DecidedTrace) // the resumed run links to the decision
	} else {
		delete(raw, "decided_trace")
	}
	// No HTML escaping: the kept fields stay as written, only compacted.
	data, err := wire.MarshalJSON(raw)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode decided record")
	}
	return data, nil
}

// ListPending lists the calls waiting for a decision, oldest first
// (requested_at, then key), of session sid — in the approvals copy of its
// home region — or, when sid is "", of every session in every copy.
// Records that do not decode, are already decided, or sit in a copy that
// is not their session's are left out, and so are the pending records
// whose decision is taken (a live receipt is bound to them: their
// resolver stopped between its two writes): ListPending writes that
// decision into them, as a resolve of the call would. The list is never
// nil.
func (s *Store) ListPending(ctx context.Context, sid string) ([]Pending, error) {
	if err := (ListPendingRequest{SessionID: sid}).Validate(); err != nil {
		return nil, err
	}
	items := []pendingItem{}
	if sid != "" {
		filter, err := subjects.ApprovalSessionFilter(sid)
		if err != nil {
			return nil, invalidWrap(err)
		}
		kv, err := s.bucket(ctx, subjects.ApprovalsBucket, sid)
		if err != nil {
			return nil, err
		}
		if items, err = s.snapshot(ctx, kv, subjects.SessionRegion(sid), filter); err != nil {
			return nil, err
		}
	} else {
		regions, err := s.regions(ctx, subjects.ApprovalsKVStream)
		if err != nil {
			return nil, storeErr(ctx, err, "list the copies of bucket %s", subjects.ApprovalsBucket)
		}
		for _, r := range regions {
			kv, err := s.regionKV(ctx, subjects.ApprovalsBucket, r)
			if errors.Is(err, engine.ErrUnknownRegion) {
				continue // the copy was deleted since it was listed
			}
			if err != nil {
				return nil, storeErr(ctx, err, "open bucket %s", subjects.RegionalBucket(subjects.ApprovalsBucket, r))
			}
			got, err := s.snapshot(ctx, kv, r, "")
			if err != nil {
				return nil, err
			}
			items = append(items, got...)
		}
	}
	slices.SortFunc(items, func(a, b pendingItem) int {
		return cmp.Or(cmp.Compare(a.p.RequestedAt, b.p.RequestedAt), strings.Compare(a.key, b.key))
	})
	out := make([]Pending, len(items))
	for i, it := range items {
		out[i] = it.p
	}
	return out, nil
}

// pendingItem is a listed call, its key and its record.
type pendingItem struct {
	key string
	p   Pending
	ent jetstream.KeyValueEntry
}

// snapshot reads the pending calls of kv, the approvals copy of region
// ("" the primary), as they are now: every key, or those matching filter
// when it is not "".
func (s *Store) snapshot(ctx context.Context, kv jetstream.KeyValue, region, filter string) ([]pendingItem, error) {
	var (
		w   jetstream.KeyWatcher
		err error
	)
	if filter == "" {
		w, err = kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	} else {
		w, err = kv.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
	}
	if err != nil {
		return nil, storeErr(ctx, err, "watch approvals in %s", kv.Bucket())
	}
	items := []pendingItem{}
	loaded := false
	snap, stop := context.WithCancel(ctx)
	defer stop()
	ferr := engine.FollowKV(snap, w, func(ent jetstream.KeyValueEntry) {
		if loaded {
			return // a live update after the snapshot
		}
		p, err := pendingFrom(region, ent.Key(), ent.Value())
		if err != nil {
			s.logger.Warn("approval record does not decode", "bucket", kv.Bucket(), "key", ent.Key(), "error", err)
			return
		}
		if p != nil {
			items = append(items, pendingItem{ent.Key(), *p, ent})
		}
	}, func() {
		loaded = true
		stop()
	})
	if !loaded {
		if ferr == nil {
			ferr = ctx.Err()
		}
		return nil, storeErr(ctx, ferr, "list approvals in %s", kv.Bucket())
	}
	return s.untaken(ctx, kv, region, items), nil
}

// untaken is items, the pending calls of kv, the approvals copy of region,
// less those whose decision is taken: a live receipt is bound to the
// record, its resolver stopped before it wrote the record. Their records
// are settled here, as a resolve of the call would; a call whose receipt
// cannot be read is listed (a resolve of it finds the decision).
func (s *Store) untaken(ctx context.Context, kv jetstream.KeyValue, region string, items []pendingItem) []pendingItem {
	if len(items) == 0 {
		return items
	}
	receipts, err := s.regionKV(ctx, DecisionsBucket, region)
	if errors.Is(err, engine.ErrUnknownRegion) {
		return items // the region's nodes predate receipts
	}
	if err != nil {
		s.logger.Warn("decision receipts not read; calls listed as pending", "bucket", subjects.RegionalBucket(DecisionsBucket, region), "error", err)
		return items
	}
	out := items[:0]
	for _, it := range items {
		req := ResolveRequest{SessionID: it.p.SessionID, FunctionCallID: it.p.FunctionCallID}
		taken, err := s.settle(ctx, kv, receipts, it.key, it.ent, req)
		if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) { // else another writer came first
			s.logger.Warn("decision receipt of a pending call not settled", "session_id", req.SessionID, "function_call_id", req.FunctionCallID, "taken", taken, "error", err)
		}
		if !taken {
			out = append(out, it)
		}
	}
	return out
}

// splitKey is the inverse of subjects.ApprovalKey for a key of the
// approvals copy of region: "<sid>.<call>" in the primary copy (sid without
// a dot), "<region>.<name>.<call>" in region's (sid "<region>.<name>"; the
// escaped call id is one token). A key of another shape, or of a session
// homed elsewhere, is an error: no ApprovalKey of that copy makes it, so
// approval::resolve could not find it either.
func splitKey(region, key string) (sid, callID string, err error) {
	sid, callID, err = subjects.SplitApprovalKey(key)
	if err != nil {
		return "", "", err
	}
	if r := subjects.SessionRegion(sid); r != region {
		return "", "", fmt.Errorf("%w: %q is not the key of a session of region %q", subjects.ErrInvalidKey, key, region)
	}
	if err := agent.ValidateCallID(callID); err != nil {
		return "", "", err
	}
	return sid, callID, nil
}

// pendingFrom reads one entry of the approvals copy of region: nil when
// the call is not pending, an error when the key or value is not an
// approval record of that copy.
func pendingFrom(region, key string, value []byte) (*Pending, error) {
	sid, callID, err := splitKey(region, key)
	if err != nil {
		return nil, err
	}
	var rec agent.ApprovalRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		return nil, err
	}
	if rec.Status != agent.ApprovalPending {
		return nil, nil
	}
	args := rec.Args
	if args == nil {
		args = map[string]any{}
	}
	return &Pending{
		SessionID:      sid,
		FunctionCallID: callID,
		FunctionID:     rec.FunctionID,
		Args:           args,
		ArgsHash:       rec.ArgsHash,
		RequestedAt:    rec.RequestedAt,
	}, nil
}

// DefaultSettings are the settings of a session nobody has set:
// mode manual, nothing always allowed.
func DefaultSettings(sid string) agent.ApprovalSettings {
	return agent.ApprovalSettings{SessionID: sid, Mode: agent.ApprovalManual, AlwaysAllow: []string{}}
}

// Settings returns the approval settings of session sid, or
// [DefaultSettings] when none were set. A stored value that does not decode
// (or holds an unknown mode) is an internal error rather than a silent
// default. A stored pattern that is not valid (now) — "**", refused since
// it was stored, or a value written by hand — is left out of the list,
// logged once per stored value: leaving it out approves less, never more.
func (s *Store) Settings(ctx context.Context, sid string) (agent.ApprovalSettings, error) {
	if err := (SettingsGetRequest{SessionID: sid}).Validate(); err != nil {
		return agent.ApprovalSettings{}, err
	}
	settings, err := s.bucket(ctx, subjects.ApprovalSettingsBucket, sid)
	if err != nil {
		return agent.ApprovalSettings{}, err
	}
	ent, err := settings.Get(ctx, sid)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return DefaultSettings(sid), nil
	}
	if err != nil {
		return agent.ApprovalSettings{}, storeErr(ctx, err, "read approval settings of %s", sid)
	}
	st, dropped, err := decodeSettings(sid, ent.Value())
	if err != nil {
		return agent.ApprovalSettings{}, wire.Wrap(wire.CodeInternal, err, "approval settings of session %q", sid)
	}
	s.warnDropped(sid, ent.Revision(), dropped)
	return st, nil
}

// decodeSettings reads a stored settings value: an absent mode is manual,
// a nil list is empty, and the session id is sid's. The patterns that do
// not validate (agent.ValidatePattern changed since they were stored, or
// they were written by hand) are left out, and returned as dropped.
func decodeSettings(sid string, value []byte) (st agent.ApprovalSettings, dropped []string, err error) {
	if err := json.Unmarshal(value, &st); err != nil {
		return agent.ApprovalSettings{}, nil, fmt.Errorf("stored value does not decode: %w", err)
	}
	if st.Mode == "" {
		st.Mode = agent.ApprovalManual
	}
	if !st.Mode.Valid() {
		return agent.ApprovalSettings{}, nil, fmt.Errorf("stored mode %.32q is unknown", string(st.Mode))
	}
	kept := make([]string, 0, len(st.AlwaysAllow))
	for _, p := range st.AlwaysAllow {
		if agent.ValidatePattern(p) != nil {
			dropped = append(dropped, p)
			continue
		}
		kept = append(kept, p)
	}
	st.AlwaysAllow = kept
	st.SessionID = sid
	return st, dropped, nil
}

// warnDropped logs, once per stored value (session sid at revision rev),
// the patterns left out of it.
func (s *Store) warnDropped(sid string, rev uint64, dropped []string) {
	if len(dropped) == 0 {
		return
	}
	w := s.warned
	w.mu.Lock()
	if w.revs == nil || len(w.revs) >= maxWarned {
		w.revs = map[string]uint64{}
	}
	seen := w.revs[sid] == rev
	w.revs[sid] = rev
	w.mu.Unlock()
	if !seen {
		s.logger.Warn("approval settings: stored always_allow patterns no longer valid, left out; settings::set rewrites the list",
			"session_id", sid, "revision", rev, "dropped", len(dropped), "first", fmt.Sprintf("%.80q", dropped[0]))
	}
}

// SetSettings changes the settings of session req.SessionID: the fields
// given replace the current ones (always_allow without duplicates, in
// order), the others stay, and updated_at is stamped. The write is a
// compare-and-set (create when absent), retried on conflict; a stored value
// that does not decode is replaced, the missing fields taken from
// [DefaultSettings], and a stored list kept loses the patterns that no
// longer validate (as [Store.Settings] reads it).
func (s *Store) SetSettings(ctx context.Context, req SettingsSetRequest) (agent.ApprovalSettings, error) {
	if err := req.Validate(); err != nil {
		return agent.ApprovalSettings{}, err
	}
	sid := req.SessionID
	settings, err := s.bucket(ctx, subjects.ApprovalSettingsBucket, sid)
	if err != nil {
		return agent.ApprovalSettings{}, err
	}
	for range settingsAttempts {
		cur, rev := DefaultSettings(sid), uint64(0)
		ent, err := settings.Get(ctx, sid)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return agent.ApprovalSettings{}, storeErr(ctx, err, "read approval settings of %s", sid)
		default:
			rev = ent.Revision()
			if st, dropped, derr := decodeSettings(sid, ent.Value()); derr != nil {
				s.logger.Warn("approval settings do not decode; replacing them", "session_id", sid, "error", derr)
			} else {
				s.warnDropped(sid, rev, dropped)
				cur = st
			}
		}
		next := cur
		if req.Mode != nil {
			next.Mode = *req.Mode
		}
		if req.AlwaysAllow != nil {
			next.AlwaysAllow = dedupe(*req.AlwaysAllow)
		}
		next.UpdatedAt = s.now().UnixMilli()
		data, err := json.Marshal(next)
		if err != nil {
			return agent.ApprovalSettings{}, wire.Wrap(wire.CodeInternal, err, "encode approval settings")
		}
		if rev == 0 {
			_, err = settings.Create(ctx, sid, data)
		} else {
			_, err = settings.Update(ctx, sid, data, rev)
		}
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return agent.ApprovalSettings{}, storeErr(ctx, err, "write approval settings of %s", sid)
		}
	}
	return agent.ApprovalSettings{}, wire.Errorf(wire.CodeConflict, "approval settings of session %q changed concurrently %d times; retry", sid, settingsAttempts)
}

// traceCarrier is ctx's W3C trace context (the approval::resolve call's
// span), empty when ctx carries none.
func traceCarrier(ctx context.Context) map[string]string {
	m := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, m)
	return m
}
