package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// approvalBucketConfigs are the approval gate's buckets; the approval
// worker ensures the same ones, so either may create them.
func approvalBucketConfigs() []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: subjects.ApprovalsBucket, History: 1, Storage: jetstream.FileStorage},
		{Bucket: subjects.ApprovalSettingsBucket, History: 1, Storage: jetstream.FileStorage},
	}
}

// approvals keeps parked calls in the approvals bucket (the grain's
// Approvals port): a pending record per parked call, turned decided by
// approval::resolve, deleted once the turn consumed the decision or the
// run ended.
type approvals struct {
	kvs sessionKV
	now func() time.Time
	// tracer records, for each decision applied, a span in the run's trace
	// linked to the approval::resolve call that decided it.
	tracer trace.Tracer
	logger *slog.Logger // nil: discard
}

// errUndecodable marks an approval record that does not decode.
var errUndecodable = errors.New("does not decode")

func (a approvals) get(ctx context.Context, sid, key string) (agent.ApprovalRecord, uint64, error) {
	kv, err := a.kvs.of(ctx, sid)
	if err != nil {
		return agent.ApprovalRecord{}, 0, err
	}
	ent, err := kv.Get(ctx, key)
	if err != nil {
		return agent.ApprovalRecord{}, 0, err
	}
	var rec agent.ApprovalRecord
	if err := json.Unmarshal(ent.Value(), &rec); err != nil {
		return agent.ApprovalRecord{}, ent.Revision(), fmt.Errorf("approval %s %w: %w", key, errUndecodable, err)
	}
	return rec, ent.Revision(), nil
}

// Request creates the pending record of p; a record of the same run (maybe
// decided already) is kept, one left by another run is replaced.
func (a approvals) Request(ctx context.Context, sid, runID string, p agent.PendingApproval) error {
	key, err := subjects.ApprovalKey(sid, p.FunctionCallID)
	if err != nil {
		return err
	}
	data, err := wire.MarshalJSON(agent.ApprovalRecord{
		SessionID: sid, RunID: runID, FunctionCallID: p.FunctionCallID, FunctionID: p.FunctionID,
		Args: args(p.Args), ArgsHash: p.ArgsHash, RequestedAt: p.RequestedAt, Status: agent.ApprovalPending,
	})
	if err != nil {
		return err
	}
	kv, err := a.kvs.of(ctx, sid)
	if err != nil {
		return err
	}
	for attempt := 0; attempt < 4; attempt++ {
		_, err = kv.Create(ctx, key, data)
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		cur, rev, gerr := a.get(ctx, sid, key)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			continue
		case gerr == nil && cur.RunID == runID && cur.ArgsHash == p.ArgsHash:
			return nil
		case rev == 0:
			return gerr
		}
		if _, err = kv.Update(ctx, key, data, rev); err == nil {
			return nil
		}
	}
	return fmt.Errorf("pending approval %s: %w", key, err)
}

// Decisions reads the records of the parked calls and returns the decided
// ones that belong to run runID and carry the parked call's args hash.
func (a approvals) Decisions(ctx context.Context, sid, runID string, parked []agent.PendingApproval) ([]turn.ApprovalResolved, error) {
	var out []turn.ApprovalResolved
	for _, p := range parked {
		key, err := subjects.ApprovalKey(sid, p.FunctionCallID)
		if err != nil {
			continue // cannot have been resolved
		}
		rec, _, err := a.get(ctx, sid, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if errors.Is(err, errUndecodable) {
			// Another client wrote it: no decision. Failing here would
			// halt the grain at every wake; the call stays parked until a
			// decision that decodes (or run::abort) replaces it.
			if a.logger != nil {
				a.logger.WarnContext(ctx, "an approval record that does not decode is no decision", "session_id", sid, "function_call_id", p.FunctionCallID, "error", err)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if rec.Status != agent.ApprovalDecided || rec.RunID != runID || rec.ArgsHash != p.ArgsHash {
			continue
		}
		out = append(out, turn.ApprovalResolved{ID: p.FunctionCallID, Decision: turn.Decision(rec.Decision), Reason: rec.Reason})
		a.traceDecision(ctx, sid, rec)
	}
	return out, nil
}

// Withdraw deletes the records of callIDs.
func (a approvals) Withdraw(ctx context.Context, sid string, callIDs []string) error {
	kv, err := a.kvs.of(ctx, sid)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range callIDs {
		key, err := subjects.ApprovalKey(sid, id)
		if err != nil {
			continue
		}
		if err := kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// watchApprovals is the orchestrators' one durable watcher of decisions: a
// shared durable consumer on the approvals bucket's stream. A decision for
// a call still parked wakes its session through the step queue; a decision
// nobody waits for any more is deleted. A decision written while every
// orchestrator was down is delivered when one comes back.
//
// Each copy of the bucket (the primary one, a region's) has its consumer.
func (o *Orchestrator) watchApprovals(ctx context.Context) error {
	return o.approvalsCC.refresh(ctx, o.e)
}

// watchApprovalsOf consumes the decisions of one copy of the bucket.
func (o *Orchestrator) watchApprovalsOf(ctx context.Context, stream string) (jetstream.ConsumeContext, error) {
	bucket := strings.TrimPrefix(stream, "KV_")
	cons, err := o.e.EnsureConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       subjects.ApprovalsConsumer,
		FilterSubject: "$KV." + bucket + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
	})
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "approvals consumer on %s", stream)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := o.onApproval(ctx, m); err != nil {
			o.logger.Warn("approval decision not handled; retrying", "subject", m.Subject(), "error", err)
			_ = m.NakWithDelay(time.Second)
			return
		}
		_ = m.Ack()
	})
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "consume approvals of %s", stream)
	}
	return cc, nil
}

// onApproval handles one change of the approvals bucket.
func (o *Orchestrator) onApproval(ctx context.Context, m jetstream.Msg) error {
	if op := m.Headers().Get("KV-Operation"); op != "" {
		return nil // a delete or purge marker
	}
	var ar agent.ApprovalRecord
	if err := json.Unmarshal(m.Data(), &ar); err != nil {
		return o.repairApproval(ctx, m.Subject(), err)
	}
	if ar.Status != agent.ApprovalDecided || agent.ValidateSessionID(ar.SessionID) != nil {
		return nil
	}
	rec, _, err := o.store().Load(ctx, ar.SessionID)
	if unreadableTurn(err) {
		// No run can take the decision until the record is reset (the
		// error says how) or while the session's region has no stores
		// here; asking again every second would not help.
		o.logger.Warn("approval decision not applied: the session's turn record cannot be read", "session_id", ar.SessionID, "error", err)
		return nil
	}
	if err != nil && !errors.Is(err, session.ErrNoRecord) {
		return err
	}
	if ferr := foreignRecord(ar.SessionID, rec); err == nil && ferr != nil {
		o.logger.Warn("approval decision not applied: the session's turn record is another client's", "session_id", ar.SessionID, "error", ferr)
		return nil
	}
	waiting := err == nil && rec.RunID == ar.RunID && isParked(rec, ar.FunctionCallID, ar.ArgsHash)
	if !waiting && err == nil && rec.RunID == ar.RunID && mayPark(rec, ar.FunctionCallID) {
		// The grain records a call before it writes it parked: the
		// decision is read from the record when the call parks.
		return nil
	}
	if !waiting {
		// Nobody waits for it: the run ended or the decision was applied.
		// Delete it unless it changed since.
		key, kerr := subjects.ApprovalKey(ar.SessionID, ar.FunctionCallID)
		meta, merr := m.Metadata()
		kv, verr := o.approvals.kvs.of(ctx, ar.SessionID)
		if kerr == nil && merr == nil && verr == nil {
			err := kv.Delete(ctx, key, jetstream.LastRevision(meta.Sequence.Stream))
			if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !isWrongSeq(err) && !errors.Is(err, jetstream.ErrKeyExists) {
				return err
			}
		}
		return nil
	}
	return o.enqueueWake(ctx, rec, fmt.Sprintf("approval:%s:%d", ar.FunctionCallID, ar.DecidedAt))
}

// repairApproval handles a write of the approvals bucket that does not
// decode (another client's): when it hides the pending record of a call
// still parked, the pending record is written again from the turn record,
// so that approval::resolve and the lists of pending calls find the call
// again; anything else is ignored. Either way it is logged.
func (o *Orchestrator) repairApproval(ctx context.Context, subject string, cause error) error {
	_, key, _ := strings.Cut(strings.TrimPrefix(subject, "$KV."), ".")
	sid, callID, err := subjects.SplitApprovalKey(key)
	if err != nil {
		o.logger.Warn("approval record does not decode; ignored", "subject", subject, "error", cause)
		return nil
	}
	rec, _, err := o.store().Load(ctx, sid)
	if errors.Is(err, session.ErrNoRecord) {
		err, rec = nil, turn.Record{}
	}
	if unreadableTurn(err) {
		// No call of the session can be parked where a run would take
		// it until the turn record is reset or its region has stores.
		o.logger.Warn("approval record does not decode; ignored (the session's turn record cannot be read)",
			"session_id", sid, "function_call_id", callID, "error", cause, "turn_error", err)
		return nil
	}
	if err != nil {
		return err
	}
	for _, p := range rec.AwaitingApproval {
		if p.FunctionCallID != callID {
			continue
		}
		if err := o.approvals.Request(ctx, sid, rec.RunID, p); err != nil {
			return err
		}
		o.logger.Warn("approval record does not decode; the parked call's pending record is written again",
			"session_id", sid, "function_call_id", callID, "error", cause)
		return nil
	}
	o.logger.Warn("approval record does not decode; ignored (no call waits on it)", "session_id", sid, "function_call_id", callID, "error", cause)
	return nil
}

// unreadableTurn says whether err, loading the turn record of the session
// an approvals value names, stays the same however often it is asked: the
// record does not decode (another client wrote it; only a reset changes
// that), or the session is homed in a region with no stores here (another
// client wrote the value: a session of that region keeps its approvals in
// its region's copy of the bucket). A watcher that retried on it would
// redeliver the value every second forever.
func unreadableTurn(err error) bool {
	return errors.Is(err, session.ErrCorruptRecord) || errors.Is(err, engine.ErrUnknownRegion)
}

// mayPark says whether the call is of the current batch and has neither
// started, finished, been approved nor been parked: its gate may still park
// it.
func mayPark(rec turn.Record, callID string) bool {
	if rec.State != agent.StateFunctionExecute || rec.Work == nil {
		return false
	}
	if _, ok := rec.Work.Effects[callID]; ok {
		return false
	}
	for _, c := range rec.Work.Prepared {
		if c.ID == callID {
			return !c.Approved && !isParked(rec, callID, "")
		}
	}
	return false
}

func isParked(rec turn.Record, callID, hash string) bool {
	for _, p := range rec.AwaitingApproval {
		if p.FunctionCallID == callID && (hash == "" || p.ArgsHash == hash) {
			return true
		}
	}
	return false
}

// traceDecision records that the run resumes on a human's decision: a
// span in the run's trace (ctx) linked to the trace of the
// approval::resolve call, so the wait — minutes or days — reads as one
// story with its cause attached.
func (a approvals) traceDecision(ctx context.Context, sid string, rec agent.ApprovalRecord) {
	if a.tracer == nil {
		return
	}
	var opts []trace.SpanStartOption
	if len(rec.DecidedTrace) > 0 {
		decided := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(rec.DecidedTrace))
		if sc := trace.SpanContextFromContext(decided); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("iii.link", "approval::resolve")}}))
		}
	}
	opts = append(opts, trace.WithAttributes(
		attribute.String(engine.AttrSessionID, sid),
		attribute.String("iii.function_call_id", rec.FunctionCallID),
		attribute.String("iii.approval.decision", rec.Decision),
		attribute.Int64("iii.approval.wait_ms", rec.DecidedAt-rec.RequestedAt),
	))
	if _, mid := engine.SessionFromContext(ctx); mid != "" {
		opts = append(opts, trace.WithAttributes(attribute.String(engine.AttrMessageID, mid)))
	}
	_, span := a.tracer.Start(ctx, "approval resumed "+rec.FunctionID, opts...)
	span.End()
}
