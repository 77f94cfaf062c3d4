package approval

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// DecisionsBucket holds one receipt per decided call, under the call's
// approval key (subjects.ApprovalKey), for the decision TTL
// ([WithDecisionTTL]). Only this worker reads and writes it; the
// orchestrator never looks at it, so nothing in it can run a call. It is a
// per-session bucket like the approvals one: a region's copy is
// "iii-approval-decisions-at-<region>".
const DecisionsBucket = "iii-approval-decisions"

// receiptAttempts bounds the compare-and-sets of one receipt write before
// approval::resolve answers conflict.
const receiptAttempts = 4

// DecisionsBucketConfig is the configuration this worker passes to
// EnsureSessionKV for [DecisionsBucket]: History 1, file storage, and ttl
// as the max age of every receipt.
func DecisionsBucketConfig(ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: DecisionsBucket, History: 1, Storage: jetstream.FileStorage, TTL: ttl}
}

// verdict is a decision as recorded: what an approval record is decided
// to.
type verdict struct {
	Decision     string            `json:"decision"`
	Reason       string            `json:"reason,omitempty"`
	DecidedAt    int64             `json:"decided_at"`
	DecidedTrace map[string]string `json:"decided_trace,omitempty"`
}

// same says whether v and o are one decision (the trace aside).
func (v verdict) same(o verdict) bool {
	return v.Decision == o.Decision && v.Reason == o.Reason && v.DecidedAt == o.DecidedAt
}

// repeats says whether req asks for the decision v, recorded for a call of
// argsHash: same decision and reason, and args_hash, when given, the
// call's. Such a request is a retry, answered with v.
func repeats(req ResolveRequest, v verdict, argsHash string) bool {
	return req.Decision == v.Decision && req.Reason == v.Reason &&
		(req.ArgsHash == "" || strings.EqualFold(req.ArgsHash, argsHash))
}

// recordVerdict is the verdict of a decided record.
func recordVerdict(rec agent.ApprovalRecord) verdict {
	return verdict{Decision: rec.Decision, Reason: rec.Reason, DecidedAt: rec.DecidedAt, DecidedTrace: rec.DecidedTrace}
}

// receipt is the value under an approval key in [DecisionsBucket]. It
// names the pending record it decides (its run, function, args hash and
// time of request) and is written, first writer wins, before that record
// is: the decision is taken when its receipt is written, and any later
// approval::resolve of the call writes it into the record if the writer
// stopped in between. It outlives the orchestrator's delete of the
// record, so a repeated approval::resolve is still answered.
type receipt struct {
	SessionID      string `json:"session_id"`
	FunctionCallID string `json:"function_call_id"`
	RunID          string `json:"run_id"`
	FunctionID     string `json:"function_id"`
	ArgsHash       string `json:"args_hash"`
	RequestedAt    int64  `json:"requested_at"`
	verdict
}

func newReceipt(req ResolveRequest, rec agent.ApprovalRecord, v verdict) receipt {
	return receipt{
		SessionID: req.SessionID, FunctionCallID: req.FunctionCallID,
		RunID: rec.RunID, FunctionID: rec.FunctionID, ArgsHash: rec.ArgsHash, RequestedAt: rec.RequestedAt,
		verdict: v,
	}
}

// binds says whether r decides the pending record rec of req's call: a
// receipt of another run's call with the same id (or of the same call
// parked again) never decides it.
func (r receipt) binds(req ResolveRequest, rec agent.ApprovalRecord) bool {
	return r.SessionID == req.SessionID && r.FunctionCallID == req.FunctionCallID &&
		r.RunID == rec.RunID && r.FunctionID == rec.FunctionID && r.ArgsHash == rec.ArgsHash && r.RequestedAt == rec.RequestedAt
}

// liveReceipt decodes a stored receipt of req's call; false when it does
// not decode, is not a decision, is of another call, or is older than the
// decision TTL.
func (s *Store) liveReceipt(value []byte, req ResolveRequest) (receipt, bool) {
	var r receipt
	if err := json.Unmarshal(value, &r); err != nil {
		return receipt{}, false
	}
	switch r.Decision {
	case agent.DecisionAllow, agent.DecisionDeny, agent.DecisionAborted:
	default:
		return receipt{}, false
	}
	if r.SessionID != req.SessionID || r.FunctionCallID != req.FunctionCallID {
		return receipt{}, false
	}
	if s.now().Sub(time.UnixMilli(r.DecidedAt)) >= s.decisionTTL {
		return receipt{}, false
	}
	return r, true
}

// claim returns the verdict the pending record rec, under key, is decided
// to, the revision of its receipt, and whether this call wrote it: the
// verdict of a live receipt bound
// to rec when there is one (a decision taken by an earlier call that may
// not have reached the record), else v, whose receipt it writes first. A
// receipt that is stale (another run's call, too old, not a receipt) is
// replaced.
func (s *Store) claim(ctx context.Context, receipts jetstream.KeyValue, key string, req ResolveRequest, rec agent.ApprovalRecord, v verdict) (verdict, uint64, bool, error) {
	mine, err := json.Marshal(newReceipt(req, rec, v))
	if err != nil {
		return verdict{}, 0, false, wire.Wrap(wire.CodeInternal, err, "encode decision receipt")
	}
	for range receiptAttempts {
		ent, err := receipts.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			rev, err := receipts.Create(ctx, key, mine)
			if err == nil {
				return v, rev, true, nil
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return verdict{}, 0, false, storeErr(ctx, err, "write decision receipt %s", key)
			}
			continue // another call's receipt came first: read it
		}
		if err != nil {
			return verdict{}, 0, false, storeErr(ctx, err, "read decision receipt %s", key)
		}
		if r, ok := s.liveReceipt(ent.Value(), req); ok && r.binds(req, rec) {
			return r.verdict, ent.Revision(), false, nil
		}
		rev, err := receipts.Update(ctx, key, mine, ent.Revision())
		if err == nil {
			return v, rev, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return verdict{}, 0, false, storeErr(ctx, err, "write decision receipt %s", key)
		}
	}
	return verdict{}, 0, false, wire.Errorf(wire.CodeConflict, "the decision receipt of call %q of session %q changed concurrently %d times; retry", req.FunctionCallID, req.SessionID, receiptAttempts)
}

// answerGone answers req for a call whose approval record is gone (the
// orchestrator consumed the decision, or the run ended): a live receipt
// of the same decision answers it (mine: the revision of the receipt this
// call wrote, 0 when none), anything else is not_pending. A receipt only ever answers: no record is written
// from it here.
func (s *Store) answerGone(ctx context.Context, receipts jetstream.KeyValue, key string, req ResolveRequest, mine uint64) (ResolveResponse, error) {
	gone := notPending("call %q of session %q is not waiting for approval", req.FunctionCallID, req.SessionID)
	if receipts == nil {
		return ResolveResponse{}, gone
	}
	ent, err := receipts.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ResolveResponse{}, gone
	}
	if err != nil {
		return ResolveResponse{}, storeErr(ctx, err, "read decision receipt %s", key)
	}
	r, ok := s.liveReceipt(ent.Value(), req)
	if !ok {
		return ResolveResponse{}, gone
	}
	return answer(req, r.verdict, r.ArgsHash, mine != 0 && ent.Revision() == mine)
}

// answer is the reply to req for a call decided to v (of a call with
// argsHash): success when req repeats v — already_decided unless this
// call decided it (mine) —, else not_pending.
func answer(req ResolveRequest, v verdict, argsHash string, mine bool) (ResolveResponse, error) {
	if !repeats(req, v, argsHash) {
		return ResolveResponse{}, notPending("call %q of session %q was already decided (%s)", req.FunctionCallID, req.SessionID, v.Decision)
	}
	return ResolveResponse{OK: true, AlreadyDecided: !mine, Decision: v.Decision, DecidedAt: v.DecidedAt}, nil
}
