package session

import (
	"context"
	"errors"
	"reflect"
	"slices"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
)

// ErrFenced is returned by [Store.Write] when the record's revision moved:
// another activation wrote it, so this one must stop.
var ErrFenced = errors.New("session: record written by another activation")

// ErrUnstorable says the store refused something for good: a turn record
// too large for one message ([Store.Write]), a transcript append the
// session tree refuses (an entry over its size limit; [History.Flush],
// [SettledHistory.Settled]), or a transcript it cannot read
// ([History.Load]; a meta that does not decode). Trying again cannot help, so the grain fails
// the run with [turn.Fail] instead of halting, which would try the same
// checkpoint at every redelivery.
var ErrUnstorable = errors.New("session: the store refuses it for good")

// ErrNoRecord is returned by [Store.Load] when the session has no record.
var ErrNoRecord = errors.New("session: no turn record")

// ErrCorruptRecord marks a [Store.Load] error for a record that does not
// decode (another client wrote it): trying again cannot help. It keeps its
// identity across the members of a grain cluster, so a caller can answer
// such an error as internal wherever the grain ran.
var ErrCorruptRecord = errors.New("session: corrupt turn record")

// Store keeps the turn record in KV.
type Store interface {
	// Load returns the record and its revision, ErrNoRecord, or an error
	// wrapping ErrCorruptRecord for a record that does not decode.
	Load(ctx context.Context, sid string) (turn.Record, uint64, error)
	// Write replaces the record if its revision is still rev, returning the
	// new revision, or ErrFenced, or ErrUnstorable (nothing written).
	Write(ctx context.Context, rec turn.Record, rev uint64) (uint64, error)
}

// History is the session's transcript.
type History interface {
	// Load returns the whole transcript, oldest first.
	Load(ctx context.Context, sid string) ([]agent.Message, error)
	// Append publishes msgs asynchronously; id makes a repeated append a
	// no-op. The acks are awaited by Flush.
	Append(ctx context.Context, sid, id string, msgs []agent.Message) error
	// Flush waits for every append and event of sid published so far. An
	// append refused for good is reported once, wrapping ErrUnstorable.
	Flush(ctx context.Context, sid string) error
}

// SettledHistory is a History that can tell, without waiting, whether
// everything of sid published so far (appends and events) is stored. The
// grain then writes a mid-run checkpoint without waiting for the effects
// it delivered last: while some are unconfirmed, the record it writes
// carries them at the head of its outbox, so an activation that takes
// over after a crash delivers them again (their ids make a repeat
// harmless). Without it every checkpoint waits for Flush.
type SettledHistory interface {
	// Settled reports whether every append and event of sid is stored.
	// [ErrUndelivered] says a delivery failed: the grain flushes before
	// it writes (Flush delivers it again) instead of carrying it. Any
	// other error is an append that failed for good, as Flush returns it.
	Settled(sid string) (bool, error)
}

// ErrUndelivered, from [SettledHistory.Settled], says a delivery of sid's
// failed and waits for Flush to make it again. A record carries only
// effects whose delivery is still under way, so what it carries went out
// moments before it was written, and a replay that looks for it near the
// record's write time (StoredEvents, ReplayedHistory) finds it.
var ErrUndelivered = errors.New("session: an effect's delivery failed; flush before the next write")

// IdentifiedHistory is a History that names the transcripts it loads: a
// load that answers the same non-empty id as an earlier one promises the
// transcript only grew since, by appends through this port. The grain
// passes the id on as [ModelRequest.HistoryID], so a call can send the
// provider only what is new, across runs too; without it every load gets
// a new id. The slice answered may share its array with the port's own
// copy (it is clipped: an append copies it); the grain never writes its
// elements.
type IdentifiedHistory interface {
	LoadIdentified(ctx context.Context, sid string) (msgs []agent.Message, id string, err error)
}

// ReplayedHistory is a History that can make an append exact however late
// it is repeated: Append's id may drop a repeat only for a while (the
// session tree's duplicate window is ten minutes). The grain delivers
// through it the transcript appends of a loaded outbox that the loaded
// transcript does not end with — nothing of them was stored, or another
// writer or a compaction came after them — since a dead activation may
// have stored them any time after it wrote the record.
type ReplayedHistory interface {
	// AppendReplayed is Append for an append a dead activation may have
	// stored already, no earlier than writtenMs (when the record that
	// carries it was written; the port allows for carried effects and
	// clocks): one stored then is not stored again.
	AppendReplayed(ctx context.Context, sid, id string, msgs []agent.Message, writtenMs int64) error
}

// Events publishes a session's events.
type Events interface {
	// Emit publishes ev asynchronously with message id id (deduplicated by
	// the stream); the acks are awaited by History.Flush.
	Emit(ctx context.Context, ev agent.Event, id string) error
}

// SequencedEvents is an Events port that numbers a session's events on
// from the last one it emitted, which holds only while nobody else
// emits for the session. The grain calls Resequence whenever the record
// moved under it (it activated, or another activation or a writer other
// than run::start building on this grain's own last write wrote it): the
// port then takes the number from the event stream again.
type SequencedEvents interface {
	Resequence(sid string)
}

// StoredEvents is an Events port that can tell which events of a loaded
// outbox a dead activation stored already, once the event stream's
// duplicate window may no longer drop them: a node restarted an hour after
// it died must not store the run's events a second time. The grain asks it
// before it delivers an outbox it loaded.
type StoredEvents interface {
	// StoredEvents returns those of ids (the outbox's event effect ids)
	// the stream holds already, whichever they are: events are published
	// asynchronously, so one that failed may sit before one that was
	// stored. writtenMs is when the record that carries them was written;
	// the events it carries were published at most [MaxCarryAge] before
	// (a port looks that far back, plus the clocks' skew). A port answers
	// none while the stream's duplicate window still covers everything
	// published since then: the message ids then drop the stored ones
	// exactly.
	StoredEvents(ctx context.Context, sid string, ids []string, writtenMs int64) ([]string, error)
}

// Forgetter is implemented by ports that keep per-session memory (an
// event sequence cache); the grain calls Forget when it passivates, so a
// long-running node does not grow with every session it ever served.
type Forgetter interface {
	Forget(sid string)
}

// ModelRequest is what a model call needs.
type ModelRequest struct {
	SessionID string
	RunID     string
	Step      uint64
	Provider  string
	Model     string
	System    string
	Messages  []agent.Message
	// HistoryID names the grain's transcript: while it stays the same,
	// Messages only grew since the last call (the grain appended); a new
	// id means the transcript was read again or compacted. A port may
	// send a provider only what is new under one id.
	HistoryID string
	// Run is the run's request without its messages (workspace, agent,
	// tools, limits).
	Run agent.RunStart
	// Compacted, called by the port on the call's goroutine before Stream
	// returns, hands the grain the transcript the call used instead of
	// Messages: the port compacted it (the model's window would have
	// overflowed) and the grain keeps the compacted one from then on.
	Compacted func(msgs []agent.Message)
	// Committed, when not nil, is closed once the record that goes on to
	// this call is written and its outbox delivered: the grain starts the
	// call while that write is in flight, so the two overlap. Until then
	// the call must leave no trace but the provider request itself: a
	// port waits for it before it emits an event, reserves budget,
	// compacts the transcript or returns (a write that fails cancels ctx
	// instead). The grain drops the outcome of a call whose record was
	// not written.
	Committed <-chan struct{}
}

// WaitCommitted waits until req's record is written (req.Committed
// closed) and reports true, or until ctx ends and reports false. A call
// with no Committed was started after its write: true at once.
func (req ModelRequest) WaitCommitted(ctx context.Context) bool {
	if req.Committed == nil {
		return true
	}
	select {
	case <-req.Committed:
		return true
	case <-ctx.Done():
		return false
	}
}

// Model calls the run's provider.
type Model interface {
	// Stream calls the provider and streams message_update events through
	// the Events port; it returns [turn.ModelDone], [turn.ModelFailed] or,
	// when ctx was cancelled by an abort, the partial message so far in a
	// [turn.ModelFailed] with kind "" (the grain applies its own Abort).
	Stream(ctx context.Context, req ModelRequest) turn.Input
}

// Functions runs the model's function calls: the chokepoint every call goes
// through. The grain asks Gate first (policy, approval settings,
// before-hooks), records the call started, then Call (the function, then
// after-hooks).
type Functions interface {
	// Gate decides whether call may run now. It never fails: an
	// unreachable policy or hook bus is a [VerdictDeny] (fail closed).
	Gate(ctx context.Context, sid string, call turn.Call) Verdict
	// Call runs one call that passed the gate and returns its result;
	// failures are error results.
	Call(ctx context.Context, sid string, call turn.Call) agent.FunctionResult
	// Idempotent reports whether re-running functionID after a crash is
	// harmless.
	Idempotent(ctx context.Context, functionID string) bool
}

// VerdictKind is what [Functions.Gate] decided.
type VerdictKind uint8

// Verdicts.
const (
	// VerdictRun: record the call started and dispatch Verdict.Call.
	VerdictRun VerdictKind = iota
	// VerdictDeny: do not run it; Verdict.Result is its (denial) result.
	VerdictDeny
	// VerdictPark: it needs a human's approval, bound to Verdict.ArgsHash.
	VerdictPark
)

// Verdict is the answer of [Functions.Gate].
type Verdict struct {
	Kind VerdictKind
	// Call is the call to dispatch (VerdictRun): the prepared one, or with
	// arguments a before-hook rewrote and the policy allowed again.
	Call turn.Call
	// Result is the result recorded for a call that does not run
	// (VerdictDeny).
	Result agent.FunctionResult
	// ArgsHash binds the approval (VerdictPark), agent.ArgsHash.
	ArgsHash string
}

// Approvals keeps the parked calls where humans resolve them (the
// approvals bucket). Every method is idempotent.
type Approvals interface {
	// Request records that call p of run runID waits for a decision.
	Request(ctx context.Context, sid, runID string, p agent.PendingApproval) error
	// Decisions returns the decisions written for the parked calls, only
	// those of run runID whose args hash matches the parked one.
	Decisions(ctx context.Context, sid, runID string, parked []agent.PendingApproval) ([]turn.ApprovalResolved, error)
	// Withdraw removes the records of callIDs (a decision was applied, or
	// the run ended).
	Withdraw(ctx context.Context, sid string, callIDs []string) error
}

// InboxMark names the items of each inbox a [Inbox.Peek] returned, by
// digest, in inbox order. The grain keeps it in the record that takes
// them in ([turn.Record].Taken) until [Inbox.Ack] is known done.
type InboxMark = turn.Taken

// Inbox is the session's steering and follow-up inboxes. Draining is
// peek, write the record, then ack: a crash in between redelivers the items
// at the next steering check (at least once) instead of losing them.
type Inbox interface {
	// Peek returns both inboxes' items without removing them.
	Peek(ctx context.Context, sid string) (steering, followups []agent.Message, mark InboxMark, err error)
	// Ack removes the items mark names that still head their inboxes
	// (pushes only append, so the items a Peek returned are the first
	// ones, unless the inbox was drained since). It may be called again
	// with the same mark, after a crash: it then removes nothing more
	// (unless an item the same to the byte was pushed since and heads the
	// inbox: digests cannot tell it from the one named).
	Ack(ctx context.Context, sid string, mark InboxMark) error
	// Requeue puts follow-ups back at the front of the follow-up inbox.
	// It must be idempotent (an outbox may be delivered twice): when msgs
	// already head the inbox, nothing changes.
	Requeue(ctx context.Context, sid string, msgs []agent.Message) error
}

// Workspace prepares what a run works with besides the model (its
// sandbox, its assembled system prompt) and releases it when the run ends.
type Workspace interface {
	// Provision runs once per run, in provisioning, and again after a
	// crash during it (so it must be idempotent per session). It returns
	// [turn.Provisioned] (with the frozen system prompt) or
	// [turn.ProvisionFailed]; when ctx was cancelled by an abort its answer
	// is dropped.
	Provision(ctx context.Context, sid string, run agent.RunStart) turn.Input
	// Release destroys the session's sandbox. Idempotent.
	Release(ctx context.Context, sid string) error
}

// Ports are all the grain's effects. Workspace is optional: without it
// provisioning succeeds at once and runs get no sandbox.
type Ports struct {
	Store     Store
	History   History
	Events    Events
	Model     Model
	Functions Functions
	Inbox     Inbox
	Approvals Approvals
	Workspace Workspace
}

func (p Ports) valid() error {
	if p.Store == nil || p.History == nil || p.Events == nil || p.Model == nil || p.Functions == nil || p.Inbox == nil || p.Approvals == nil {
		return errors.New("session: every port is required")
	}
	return nil
}

// forgetPorts tells every port that keeps per-session memory (Events,
// History, Model: [Forgetter]) that sid's grain passivated, each port
// once even where one value serves several.
func (h *Host) forgetPorts(sid string) {
	var done []Forgetter
	for _, p := range []any{h.ports.Events, h.ports.History, h.ports.Model} {
		f, ok := p.(Forgetter)
		if !ok || slices.ContainsFunc(done, func(d Forgetter) bool { return sameValue(d, f) }) {
			continue
		}
		f.Forget(sid)
		done = append(done, f)
	}
}

// sameValue is a == b for comparable values (comparing others panics).
func sameValue(a, b any) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
}
