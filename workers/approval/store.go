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

// Store is the approval gate over its two per-session KV buckets: the
// logic behind the four functions, callable in process. Every error it
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
}

// Open opens (creating when missing) the approvals and settings buckets
// through e: their primary copies and, when e has a region, that region's
// copies (engine.EnsureSessionKV). Each session's keys are then read and
// written in the copy of its home region.
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
	return &Store{kv: e.SessionKV, regions: e.SessionRegions, regionKV: e.RegionKV, maxPayload: e.Conn().MaxPayload, now: o.now, logger: logger}, nil
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
// compare-and-set on its revision, so a call is decided at most once. A
// call that is not waiting — no record, already decided, a record that does
// not decode, or args_hash given and different from the record's — is
// not_pending. Losing the compare-and-set re-reads the record once.
func (s *Store) Resolve(ctx context.Context, req ResolveRequest) error {
	if err := req.Validate(); err != nil {
		return err
	}
	key, err := subjects.ApprovalKey(req.SessionID, req.FunctionCallID)
	if err != nil {
		return invalidWrap(err)
	}
	approvals, err := s.bucket(ctx, subjects.ApprovalsBucket, req.SessionID)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		ent, err := approvals.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return notPending("call %q of session %q is not waiting for approval", req.FunctionCallID, req.SessionID)
		}
		if err != nil {
			return storeErr(ctx, err, "read approval %s", key)
		}
		data, werr := decide(ent.Value(), req, s.now().UnixMilli(), traceCarrier(ctx))
		if werr != nil {
			if errors.Is(werr, errUndecodable) {
				s.logger.Warn("approval record does not decode", "key", key, "error", werr)
			}
			return werr
		}
		_, err = approvals.Update(ctx, key, data, ent.Revision())
		if err == nil {
			return nil
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			// Only a record another client wrote comes this close to the
			// limit; a shorter reason may still fit.
			return storeErr(ctx, err, "call %q of session %q: its decided record of %d bytes would not fit the server's max payload (a shorter reason may)", req.FunctionCallID, req.SessionID, len(data))
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return storeErr(ctx, err, "write approval %s", key)
		}
		if attempt > 0 {
			return wire.Errorf(wire.CodeConflict, "call %q of session %q changed concurrently; retry", req.FunctionCallID, req.SessionID)
		}
	}
}

// errUndecodable marks a record that is not an approval record.
var errUndecodable = errors.New("approval record does not decode")

// decide checks that the stored record value is pending (and binds to
// req.ArgsHash when given), and returns it decided. Every other field —
// those it does not know included, so the orchestrator may add some — keeps
// its JSON value.
func decide(value []byte, req ResolveRequest, nowMs int64, trace map[string]string) ([]byte, *wire.Error) {
	var rec agent.ApprovalRecord
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(value, &rec); err != nil {
		return nil, wire.Wrap(wire.CodeNotPending, fmt.Errorf("%w: %v", errUndecodable, err), "call %q of session %q has a record that cannot be decided", req.FunctionCallID, req.SessionID)
	}
	if err := json.Unmarshal(value, &raw); err != nil || raw == nil {
		return nil, wire.Wrap(wire.CodeNotPending, errUndecodable, "call %q of session %q has a record that cannot be decided", req.FunctionCallID, req.SessionID)
	}
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
	set := func(k string, v any) {
		b, _ := json.Marshal(v) // strings and ints always encode
		raw[k] = b
	}
	set("status", agent.ApprovalDecided)
	set("decision", req.Decision)
	set("decided_at", nowMs)
	if req.Reason != "" {
		set("reason", req.Reason)
	} else {
		delete(raw, "reason")
	}
	if len(trace) > 0 {
		set("decided_trace", trace) // the resumed run links to the decision
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
// is not their session's are left out. The list is never nil.
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

// pendingItem is a listed call and its key.
type pendingItem struct {
	key string
	p   Pending
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
			items = append(items, pendingItem{ent.Key(), *p})
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
	return items, nil
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
// (or holds an unknown mode or a bad pattern) is an internal error rather
// than a silent default.
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
	st, err := decodeSettings(sid, ent.Value())
	if err != nil {
		return agent.ApprovalSettings{}, wire.Wrap(wire.CodeInternal, err, "approval settings of session %q", sid)
	}
	return st, nil
}

// decodeSettings reads a stored settings value: an absent mode is manual,
// a nil list is empty, and the session id is sid's.
func decodeSettings(sid string, value []byte) (agent.ApprovalSettings, error) {
	var st agent.ApprovalSettings
	if err := json.Unmarshal(value, &st); err != nil {
		return agent.ApprovalSettings{}, fmt.Errorf("stored value does not decode: %w", err)
	}
	if st.Mode == "" {
		st.Mode = agent.ApprovalManual
	}
	if !st.Mode.Valid() {
		return agent.ApprovalSettings{}, fmt.Errorf("stored mode %.32q is unknown", string(st.Mode))
	}
	for _, p := range st.AlwaysAllow {
		if err := agent.ValidatePattern(p); err != nil {
			return agent.ApprovalSettings{}, fmt.Errorf("stored pattern: %w", err)
		}
	}
	if st.AlwaysAllow == nil {
		st.AlwaysAllow = []string{}
	}
	st.SessionID = sid
	return st, nil
}

// SetSettings changes the settings of session req.SessionID: the fields
// given replace the current ones (always_allow without duplicates, in
// order), the others stay, and updated_at is stamped. The write is a
// compare-and-set (create when absent), retried on conflict; a stored value
// that does not decode is replaced, the missing fields taken from
// [DefaultSettings].
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
			if st, derr := decodeSettings(sid, ent.Value()); derr != nil {
				s.logger.Warn("approval settings do not decode; replacing them", "session_id", sid, "error", derr)
			} else {
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
