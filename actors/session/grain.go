package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/nats-io/nuid"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
)

// Results of asynchronous actions, sent back to the grain by their
// goroutines. token ties a result to the action that was current when it
// started; a result for an older action is dropped.
type modelResult struct {
	token uint64
	in    turn.Input
	// history, when not nil, is the compacted transcript the call used.
	history []agent.Message
}

type callResult struct {
	token uint64
	in    turn.CallDone
}

// gateResult is the chokepoint's verdict on one call.
type gateResult struct {
	token uint64
	id    string
	v     Verdict
}

type heartbeat struct{}

// grain is one session's actor. All fields are touched only from Receive.
type grain struct {
	host *Host
	sid  string
	self *actor.PID
	root *actor.RootContext

	base   context.Context
	cancel context.CancelFunc

	loaded bool
	rec    turn.Record
	rev    uint64
	dirty  bool // the in-memory record differs from the written one (outbox delivered)
	// unconfirmed are effects this activation delivered whose appends or
	// acks may not be in yet (SettledHistory); the next mid-run
	// checkpoint carries them. The first carried effects of rec.Outbox
	// were delivered already.
	unconfirmed []turn.Effect
	carried     int
	// unconfirmedAt is when the first of unconfirmed was delivered.
	unconfirmedAt time.Time
	history       []agent.Message
	histID        string // names history; new whenever history is replaced, not appended to
	// reread is set when an activation loaded a record whose outbox
	// appends to the transcript something the transcript it read does
	// not end with: a dead activation may still have delivered it (after
	// what the check could see). Appends are then not added to history;
	// the next model call reads the transcript again instead.
	reread bool
	// stored holds the effects of a loaded outbox that a dead activation
	// stored already (storedEffects); deliver skips them, once.
	stored map[string]bool
	// replayedMs is set while a loaded outbox with appends the transcript
	// does not end with waits for its delivery: when its record was
	// written. deliver hands those appends to [ReplayedHistory], once.
	replayedMs int64
	// committed is the prestarted model call's [ModelRequest.Committed],
	// closed once the record is written and delivered. While it is set,
	// the appends being delivered are in history already (prestartModel).
	committed chan struct{}
	// loading is set while a load recovers the loaded record: its writes
	// do not start the model call early (the wake that activated the
	// grain is not held yet, and would be acked as a duplicate).
	loading bool

	wakes     []Wake
	aborts    []pendingAbort // run::abort requests waiting for the model stream to stop
	seen      uint64         // highest host message sequence received
	token     uint64         // current asynchronous action
	running   bool           // an asynchronous action is outstanding
	stopModel context.CancelFunc
	stopCalls context.CancelFunc
	hbTimer   *time.Timer
	stopped   bool
	// gating holds the calls whose gate verdict is awaited (current token).
	gating map[string]bool
	// decide: a wake arrived while calls are parked; look for decisions.
	decide bool
	// draining: hand the session off at the next checkpoint (drainMsg).
	draining bool
	// settleDue: the run is over and its outbox delivered and confirmed,
	// but the store still holds the terminal record with that outbox (at
	// rev); writeSettled writes it delivered, settleDelay after the run's
	// end unless the next run overwrites it first (the grain's timer).
	settleDue bool
	settleAt  time.Time
	// timer is the grain's own clock (passivation and the settled
	// write): it sends tick at timerAt. lastActive is when the grain
	// last received a message other than tick.
	timer      *time.Timer
	timerAt    time.Time
	lastActive time.Time
	// unwritten: rec holds the model's answer asking for calls, not
	// written yet: it is written with the first verdict of its calls'
	// gate (foldAnswer), and its outbox delivered after that write.
	// beforeAnswer is rec as it was before that answer: a run that fails
	// because the answer cannot be stored fails from there
	// (failUnstorable), as nothing of the answer went out.
	unwritten    bool
	beforeAnswer *turn.Record
	// failingUnstorable: the grain is writing the failure of a run whose
	// checkpoint the store refused for good (failUnstorable). failLean:
	// that failure is the lean one, the last try; failRefused: the store
	// refused the failure too (failOrHalt), which failUnstorable tries
	// again lean.
	failingUnstorable, failLean, failRefused bool
	// parking is the call whose approval was just requested while the
	// record that parks it is being written (onVerdict): should the
	// store refuse that record for good, the run's failure withdraws the
	// request, which no record names.
	parking string
}

// settleDelay is how long a grain leaves a finished run's record with
// its delivered outbox in the store before it writes it settled: the next
// run of a conversation usually comes sooner and overwrites it, which
// saves the write. It is far below the periodic sweep's interval, which
// would otherwise wake the session to deliver the outbox again.
const settleDelay = 200 * time.Millisecond

// tick is the grain's timer firing. The grain keeps its own timer rather
// than proto.actor's receive timeout, whose timer goroutine writes the
// actor context unsynchronised while a message is being received
// (docs/UPSTREAM.md).
type tick struct{}

func (g *grain) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(tick); !ok {
		g.lastActive = time.Now()
	}
	switch ctx.Message().(type) {
	case *modelResult, *callResult, *gateResult:
		if g.host.life.Err() != nil {
			// The host is closing and cancelled what runs: an outcome
			// now is most likely that cancellation (a model call
			// "aborted", a gate that did not answer), not the call's.
			// It is abandoned, as a crash would abandon it; the next
			// activation takes the session up from its last write.
			return
		}
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.self = ctx.Self()
		g.root = ctx.ActorSystem().Root
		g.base, g.cancel = context.WithCancel(g.host.life)
		g.arm(g.lastActive.Add(g.host.opts.idle))
	case *cluster.ClusterInit:
		g.sid = m.Identity.Identity
		g.host.register(g.sid, g.self)
	case *wrapperspb.BytesValue:
		g.onEnvelope(ctx, m)
	case *drainMsg:
		g.draining = true
		if !g.loaded {
			g.release()
			return
		}
		g.drive()
	case *actor.Stopping:
		g.shutdown()
	case tick:
		g.onTick(ctx)
	case *wakeMsg:
		g.seen = max(g.seen, m.seq)
		g.onWake(m.Wake, m.written, m.rev, m.prev)
	case *abortMsg:
		g.seen = max(g.seen, m.seq)
		g.abortRequest(ctx, m.reason)
	case *modelResult:
		if m.token == g.token && m.history != nil {
			g.history, g.histID = m.history, nuid.Next()
		}
		if m.token == g.token && g.running && len(g.aborts) > 0 {
			g.running = false
			var partial *agent.Message
			switch in := m.in.(type) {
			case turn.ModelFailed:
				partial = in.Partial
			case turn.ModelDone:
				// The stream ended as the abort came: all of it streamed
				// (message_update events), so it is kept as a partial
				// answer is, without its calls.
				partial = &in.Message
			}
			res := g.onAbort(g.aborts[0].reason, partial)
			ctx.Send(g.aborts[0].sender, g.reply(res))
			// The aborts that came while the stream stopped find the run
			// ended, as an abort after it would.
			if ar, ok := res.(AbortResult); ok && ar.Aborted {
				res = AbortResult{Aborted: false, State: ar.State}
			}
			for _, a := range g.aborts[1:] {
				ctx.Send(a.sender, g.reply(res))
			}
			g.aborts = nil
			return
		}
		if m.token == g.token && g.running {
			g.running = false
			g.stopModel = nil
			if g.apply(m.in) {
				g.drive()
			}
		}
	case *callResult:
		if m.token == g.token {
			if g.apply(m.in) {
				g.drive()
			}
		}
	case *gateResult:
		if m.token == g.token && g.gating[m.id] {
			delete(g.gating, m.id)
			if g.draining {
				// Handing off: the next activation gates the call again.
				g.drive()
				return
			}
			if g.onVerdict(m.id, m.v) {
				g.drive()
			}
		}
	case heartbeat:
		g.beat()
	case *settledQuery:
		settled := g.loaded && !g.stopped && !g.running && (!g.dirty || g.settleDue) && len(g.wakes) == 0 &&
			g.rec.State.Terminal() && len(g.rec.Outbox) == 0
		if settled {
			// With a settle due, the store holds this run's record with
			// its outbox, all of it delivered and confirmed: the next run
			// need not carry any of it, so the copy has none.
			ctx.Respond(&settledAnswer{rec: turn.Retired(g.rec), rev: g.rev, ok: true})
		} else {
			ctx.Respond(&settledAnswer{})
		}
	}
}

// shutdown cancels whatever runs; un-acked wakes are redelivered.
func (g *grain) shutdown() {
	g.stopped = true
	if g.timer != nil {
		g.timer.Stop()
	}
	if g.cancel != nil {
		g.cancel()
	}
	if g.hbTimer != nil {
		g.hbTimer.Stop()
	}
}

// halt stops the activation without acking: it cancels the model stream
// and calls in flight and naks the wakes it holds (redelivered a second
// later to a fresh activation that reloads from KV). A lost CAS (another
// activation wrote) or a failed write ends here: the loser stops.
func (g *grain) halt(reason string, err error) {
	if g.stopped {
		return
	}
	g.host.opts.logger.WarnContext(g.traced(g.base), "session grain halted", "session_id", g.sid, "reason", reason, "error", err)
	for _, a := range g.aborts {
		g.root.Send(a.sender, g.reply(fmt.Errorf("session %s: activation halted before the abort was recorded: %w", g.sid, err)))
	}
	g.aborts = nil
	for _, w := range g.wakes {
		if w.Nak != nil {
			_ = w.Nak(time.Second)
		}
	}
	g.wakes = nil
	g.shutdown()
	g.host.forget(g.sid, g.self)
	g.root.Stop(g.self)
}

func (g *grain) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(g.traced(g.base), 30*time.Second)
}

// traced is ctx within the current run's trace (turn.Record.Trace).
func (g *grain) traced(ctx context.Context) context.Context {
	if g.host.opts.trace == nil || len(g.rec.Trace) == 0 {
		return ctx
	}
	return g.host.opts.trace(ctx, g.rec.Trace)
}

// load reads the record when the grain is idle (run::start may have
// written a new run since), and the transcript whenever the record moved
// (activation, a new run, another activation's write).
func (g *grain) load() error { return g.loadWritten(nil, 0, 0) }

// loadWritten is load, taking written (at revision wrev, written over
// revision wprev) for the stored record when it is given and newer than
// the one held.
func (g *grain) loadWritten(written *turn.Record, wrev, wprev uint64) error {
	if g.loaded && (g.running || len(g.wakes) > 0) {
		return nil
	}
	ctx, cancel := g.ctx()
	defer cancel()
	var (
		rec turn.Record
		rev uint64
		err error
	)
	// own: the record moved only by run::start building on this
	// activation's last write, so nobody else ran the session (or
	// emitted its events) since.
	own := false
	if written != nil && (!g.loaded || wrev > g.rev) {
		rec, rev = *written, wrev
		own = g.loaded && wprev == g.rev
	} else if rec, rev, err = g.host.ports.Store.Load(ctx, g.sid); err != nil {
		return err
	}
	if g.loaded && rev == g.rev {
		return nil
	}
	// A new run (or another writer) replaced the finished run's record:
	// its settled write is not needed any more.
	g.settleDue, g.unwritten, g.beforeAnswer = false, false, nil
	// The record moved: another activation wrote it, or a new run
	// started. Either way the transcript is read again, so what others
	// appended meanwhile (a compaction between runs) is seen; and unless
	// the move was our own, the events are numbered from the stream
	// again: another activation may have emitted some.
	if !own {
		g.resequence()
	}
	var (
		hist []agent.Message
		hid  string
	)
	if ih, ok := g.host.ports.History.(IdentifiedHistory); ok {
		hist, hid, err = ih.LoadIdentified(ctx, g.sid)
	} else {
		hist, err = g.host.ports.History.Load(ctx, g.sid)
	}
	if errors.Is(err, ErrUnstorable) && !rec.State.Terminal() {
		// The transcript cannot be read for good: the run fails, saying
		// why, rather than waiting for a transcript that never comes.
		g.rec, g.rev, g.loaded, g.dirty = rec, rev, true, false
		g.unconfirmed, g.carried, g.gating = nil, 0, nil
		g.failUnstorable(err)
		return nil
	}
	if err != nil {
		return err
	}
	stored, err := g.storedEffects(ctx, rec, hist)
	if err != nil {
		return err
	}
	g.history, g.histID, g.stored = g.keepHistory(hist, hid), cmp.Or(hid, nuid.Next()), stored
	// Appends the transcript does not end with are delivered again; the
	// dead activation may still have stored some (after the messages
	// the check could see, a compaction or another writer): the
	// transcript is read again before the next model call.
	g.reread = slices.ContainsFunc(rec.Outbox, func(e turn.Effect) bool {
		return e.Kind == turn.EffectAppendHistory && !stored[e.ID]
	})
	g.replayedMs = 0
	if g.reread {
		g.replayedMs = max(rec.UpdatedAtMs, 1)
	}
	g.rec, g.rev, g.loaded, g.dirty = rec, rev, true, false
	g.unconfirmed, g.carried = nil, 0 // LoadIdentified flushed
	g.gating = nil
	// A dead activation may have parked calls without recording them in
	// the approvals bucket: make sure every parked call can be resolved.
	// Should this fail, the record is not taken as loaded: the next
	// message loads it again and does all of this again (kept, a load at
	// the same revision would skip it, and its started calls would be
	// waited for forever).
	for _, p := range rec.AwaitingApproval {
		if err := g.host.ports.Approvals.Request(ctx, g.sid, rec.RunID, p); err != nil {
			g.loaded = false
			return fmt.Errorf("record pending approval %s: %w", p.FunctionCallID, err)
		}
	}
	// Calls a dead activation started: re-run idempotent ones, give the
	// others "interrupted: outcome unknown".
	if ids := turn.InFlight(rec); len(ids) > 0 {
		fns := g.host.ports.Functions
		g.loading = true
		ok := g.apply(turn.Recover{Idempotent: func(fn string) bool { return fns.Idempotent(ctx, fn) }})
		g.loading = false
		if !ok {
			g.loaded = false
			return errors.New("recover failed")
		}
	}
	return nil
}

// loadRetry is how soon a wake whose load failed comes again.
const loadRetry = 2 * time.Second

func (g *grain) onWake(w Wake, written *turn.Record, wrev, wprev uint64) {
	g.decide = true // an approval decision may be what woke the session
	if err := g.loadWritten(written, wrev, wprev); err != nil {
		if errors.Is(err, ErrNoRecord) {
			_ = w.Ack() // a step for a session that has no record: nothing to do
			return
		}
		g.host.opts.logger.Warn("session load failed; the wake comes again", "session_id", g.sid, "error", err, "retry_in", loadRetry)
		// Handed back for a redelivery soon: left unacked, it came back
		// only after the step consumer's ack wait (60 s), the session
		// standing still that long for a KV read that timed out once.
		if w.Nak != nil {
			_ = w.Nak(loadRetry)
		}
		return
	}
	// A terminal record whose outbox a dead activation did not deliver
	// (agent_end among it) is not stale: deliver it, then ack.
	if w.Step < g.rec.Step && ((g.rec.State.Terminal() && len(g.rec.Outbox) == 0) || g.running || len(g.wakes) > 0) {
		_ = w.Ack() // stale, or a duplicate of a wake already being served
		return
	}
	g.wakes = append(g.wakes, w)
	g.armHeartbeat()
	if !g.running {
		g.drive()
	}
}

// pendingAbort is a run::abort waiting for the model stream to stop.
type pendingAbort struct {
	reason string
	sender *actor.PID
}

// stopRunning cancels the model call (or provisioning), the calls and the
// gates in flight; what they answer later is stale.
func (g *grain) stopRunning() {
	if g.stopModel != nil {
		g.stopModel()
		g.stopModel = nil
	}
	if g.stopCalls != nil {
		g.stopCalls()
		g.stopCalls = nil
	}
	g.token++
	g.running, g.gating = false, nil
}

func (g *grain) onAbort(reason string, partial *agent.Message) any {
	if err := g.load(); err != nil {
		if errors.Is(err, ErrNoRecord) {
			return AbortResult{Aborted: false, State: ""}
		}
		return err
	}
	if g.rec.State.Terminal() {
		return AbortResult{Aborted: false, State: string(g.rec.State)}
	}
	g.stopRunning()
	if !g.apply(turn.Abort{Reason: reason, Partial: partial}) {
		return fmt.Errorf("abort of %s could not be recorded", g.sid)
	}
	g.drive()
	return AbortResult{Aborted: true, State: string(g.rec.State)}
}

// apply folds in into the record and writes it (one CAS). It returns false
// when the input was refused or the activation halted.
func (g *grain) apply(in turn.Input) bool { return g.fold(in, false, InboxMark{}) }

// applyUnwritten folds in like apply, but leaves the record unwritten
// when the transition may be replayed after a crash: it continues to the
// model call and emits events only, which the next checkpoint (the
// model's answer) carries if they are unconfirmed then. A crash before
// that checkpoint reloads the record from before in, and the same input
// gives the same events under the same ids again. An empty steering check
// that continues the run is such an input; anything else is written.
func (g *grain) applyUnwritten(in turn.Input) bool { return g.fold(in, true, InboxMark{}) }

// fold is apply (or applyUnwritten with mayDefer); taken names the inbox
// items in took in (a steering check's), which the write records and
// which are removed from the inbox once it is stored.
func (g *grain) fold(in turn.Input, mayDefer bool, taken InboxMark) bool {
	if g.stopped {
		return false
	}
	next, effs, err := turn.Apply(g.rec, in, g.host.opts.now().UnixMilli())
	if err != nil {
		if errors.Is(err, turn.ErrUnexpectedInput) {
			g.host.opts.logger.Debug("input refused", "session_id", g.sid, "input", turn.InputName(in), "error", err)
			return false
		}
		g.halt("apply", err)
		return false
	}
	if mayDefer && next.State == agent.StateAssistantStreaming &&
		!slices.ContainsFunc(effs, func(e turn.Effect) bool { return e.Kind != turn.EffectEmit }) {
		g.rec, g.dirty = next, true
		return true
	}
	if _, answer := in.(turn.ModelDone); answer && g.foldAnswer(next) {
		return true
	}
	if next.State == agent.StateSteeringCheck {
		var (
			mark InboxMark
			ok   bool
		)
		if next, mark, ok = g.foldSteering(next); !ok {
			return false
		}
		if taken.Empty() {
			taken = mark
		}
	}
	// The record names the items it takes in until they are removed
	// from the inbox; an earlier removal done since (peekInbox) is not
	// named any more.
	if g.rec.Taken == nil {
		next.Taken = nil
	}
	if !taken.Empty() {
		next.Taken = &taken
	}
	pre := g.prestartModel(next)
	if !g.write(next, true) {
		return false
	}
	if !taken.Empty() {
		g.ackInbox(taken)
	}
	if pre {
		// The call started before the write is told the record is
		// committed once its outbox is delivered (its events come first).
		if !g.deliver() {
			return false
		}
		close(g.committed)
		g.committed = nil
	}
	return true
}

// prestartModel starts the model call that rec goes on to once its outbox
// is delivered, before rec is written: the call and the write overlap. A
// model call has no effect to record (a crash before the write runs it
// again from the record before, as a crash during it would), and a write
// that fails halts the grain, which cancels the call. The call's request
// is what it would be after the delivery: history with rec's new appends,
// which are added to history now (deliver does not add them again while
// g.committed is set).
func (g *grain) prestartModel(rec turn.Record) bool {
	if g.loading || g.draining || g.reread || g.running || g.stopped || len(rec.AwaitingApproval) > 0 ||
		turn.Next(turn.Delivered(rec)).Kind != turn.ActionStreamModel {
		return false
	}
	for _, eff := range rec.Outbox[min(g.carried, len(rec.Outbox)):] {
		if eff.Kind == turn.EffectAppendHistory && !g.stored[eff.ID] {
			g.history = append(g.history, eff.Messages...)
		}
	}
	g.committed = make(chan struct{})
	g.startModelFor(rec, g.committed)
	return true
}

// foldAnswer holds rec, the model's answer asking for calls, unwritten
// and starts the gate of those calls: the answer is written with the
// first verdict (the call started, denied or parked), one write instead of
// two, and the gate does not wait for a write. Until then nothing of the
// answer is delivered; a crash before that write runs the model call
// again, as a crash during the call would. It reports false when rec asks
// for no calls to gate (the answer is written as any input is).
func (g *grain) foldAnswer(rec turn.Record) bool {
	if g.draining || rec.State != agent.StateFunctionExecute {
		return false
	}
	act := turn.Next(turn.Delivered(rec))
	if act.Kind != turn.ActionExecuteCalls || len(act.Calls) == 0 {
		return false
	}
	before := g.rec
	g.rec, g.dirty, g.unwritten, g.beforeAnswer = rec, true, true, &before
	g.startGates(act.Calls)
	return true
}

// foldSteering performs the steering check rec enters before rec is
// written, so the input that led to the check and the check's outcome
// are one write: the model's last answer, the check and the run's end;
// or the function results, the check and the next model call. The items
// read are removed from the inbox after the write (ackInbox). A check
// whose outcome the machine refuses is left to drive, which checks again
// after rec is written, as it does for a record loaded in the check.
func (g *grain) foldSteering(rec turn.Record) (turn.Record, InboxMark, bool) {
	ctx, cancel := g.ctx()
	steering, followups, mark, err := g.peekInbox(ctx)
	cancel()
	if err != nil {
		g.halt("read inbox", err)
		return rec, InboxMark{}, false
	}
	next, _, err := turn.Apply(rec, turn.SteeringDrained{Steering: steering, Followups: followups}, g.host.opts.now().UnixMilli())
	if err != nil {
		g.host.opts.logger.Debug("steering check left to drive", "session_id", g.sid, "error", err)
		return rec, InboxMark{}, true
	}
	return next, mark, true
}

// peekInbox reads the inboxes for a steering check. Items an earlier
// check took in whose removal failed, or whose activation died before
// it (the loaded record names them: Taken), are removed first, or the
// check fails: read again, they would be taken in twice. When steering wins,
// the follow-ups are left in their inbox, not taken in: the machine would
// hold them in the record ([turn.Record].Followups) and put them back at
// the front of the inbox when the run ends, and that put back could fail
// for good (the inbox filled up meanwhile: it is one value, bounded by the
// max payload), leaving the session stuck. Left where they are, they keep
// their place ahead of later pushes and are read at the next check that
// finds no steering, as held ones would be.
func (g *grain) peekInbox(ctx context.Context) (steering, followups []agent.Message, mark InboxMark, err error) {
	if g.rec.Taken != nil {
		if err := g.host.ports.Inbox.Ack(ctx, g.sid, *g.rec.Taken); err != nil {
			return nil, nil, InboxMark{}, fmt.Errorf("remove the inbox items taken in before: %w", err)
		}
		g.rec.Taken = nil
	}
	steering, followups, mark, err = g.host.ports.Inbox.Peek(ctx, g.sid)
	if err == nil && len(steering) > 0 {
		followups, mark.Followups = nil, nil
	}
	return steering, followups, mark, err
}

// ackInbox removes the items a steering check read, once the record that
// took them in (naming them: Taken) is written. After a failure (or a
// crash first) the record keeps naming them, and they are removed before
// the next check reads the inbox (peekInbox), in this activation or the
// next one.
func (g *grain) ackInbox(mark InboxMark) {
	ctx, cancel := g.ctx()
	defer cancel()
	if err := g.host.ports.Inbox.Ack(ctx, g.sid, mark); err != nil {
		g.host.opts.logger.WarnContext(ctx, "inbox ack failed; tried again before the next steering check", "session_id", g.sid, "error", err)
		return
	}
	g.rec.Taken = nil
}

// maxCarried bounds the unconfirmed effects a checkpoint carries: past
// it (a transcript store that lags far behind) the grain waits for them.
const maxCarried = 64

// MaxCarryAge bounds how long before a checkpoint the effects it carries
// were delivered: older ones (a transcript append that has waited that
// long, say in a stream leader election) are waited for instead. A
// replay of the record ([StoredEvents]) finds the carried events it must
// not publish again by looking this far back before the record's
// UpdatedAtMs, plus the clocks' skew.
const MaxCarryAge = 5 * time.Second

// write CAS-writes rec once the effects delivered so far are safe: their
// outbox is about to be replaced. A mid-run checkpoint (mayCarry, rec not
// terminal) does not wait for them when the History port can tell what
// is confirmed (SettledHistory): the unconfirmed ones go at the head of
// rec's outbox instead. Any other write waits for them (Flush): a
// terminal record is overwritten by the next run::start, and a settled
// one is where the grain acks its wakes.
func (g *grain) write(rec turn.Record, mayCarry bool) bool {
	ctx, cancel := g.ctx()
	defer cancel()
	// rec came from g.rec: its outbox starts with what g.rec carries.
	carried := g.carried
	sh, ok := g.host.ports.History.(SettledHistory)
	flush := !ok || !mayCarry || rec.State.Terminal() || len(g.unconfirmed) > maxCarried
	if !flush {
		done, err := sh.Settled(g.sid)
		switch {
		case errors.Is(err, ErrUndelivered):
			flush = true // carry only what is under way
		case err != nil:
			g.failOrHalt("flush effects", err)
			return false
		case done:
			g.unconfirmed = nil
		case len(g.unconfirmed) > 0 && g.host.opts.now().Sub(g.unconfirmedAt) > MaxCarryAge:
			// A replay of this record looks for its carried events only
			// so far back before the record's time: older ones it would
			// publish again, past the event stream's duplicate window.
			flush = true
		case carried == 0 && len(g.unconfirmed) > 0:
			rec.Outbox = append(slices.Clip(g.unconfirmed), rec.Outbox...)
			carried = len(g.unconfirmed)
		}
	}
	if flush {
		if err := g.host.ports.History.Flush(ctx, g.sid); err != nil {
			g.failOrHalt("flush effects", err)
			return false
		}
		g.unconfirmed = nil
	}
	if g.unconfirmed == nil && carried > 0 {
		rec.Outbox, carried = rec.Outbox[carried:], 0 // confirmed meanwhile
	}
	rev, err := g.host.ports.Store.Write(ctx, rec, g.rev)
	if errors.Is(err, ErrUnstorable) && carried > 0 {
		// Too large with the effects it carries (a transcript store
		// lagging behind checks that took large messages in): wait for
		// them instead, and write the record alone.
		if ferr := g.host.ports.History.Flush(ctx, g.sid); ferr != nil {
			g.failOrHalt("flush effects", ferr)
			return false
		}
		g.unconfirmed = nil
		rec.Outbox, carried = rec.Outbox[carried:], 0
		rev, err = g.host.ports.Store.Write(ctx, rec, g.rev)
	}
	if err != nil {
		g.failOrHalt("write record", err)
		return false
	}
	g.rec, g.rev, g.dirty, g.carried = rec, rev, false, carried
	g.unwritten, g.beforeAnswer = false, nil
	return true
}

// failOrHalt ends a write that failed: the run fails when the store
// refused the checkpoint for good (failUnstorable, unless that is the
// write failing), the activation halts otherwise.
func (g *grain) failOrHalt(reason string, err error) {
	if errors.Is(err, ErrUnstorable) {
		switch {
		case !g.failingUnstorable:
			g.failUnstorable(err)
			return
		case !g.failLean:
			g.failRefused = true // failUnstorable tries the lean failure
			return
		}
	}
	g.halt(reason, err)
}

// failUnstorable ends the run when the store refuses a checkpoint for good
// (ErrUnstorable: its record too large for one message, a transcript
// append the session tree refuses, a transcript it cannot read): rather
// than halting, and failing the
// same way at every redelivery, the grain stops what it started for that
// checkpoint, fails the run from the record before it ([turn.Fail] keeps
// only what a finished run needs), writes that and drives it to its end.
// The transcript is read again before the next run: the grain's copy may
// hold appends that were never stored. The caller reports false.
func (g *grain) failUnstorable(cause error) {
	g.host.opts.logger.WarnContext(g.traced(g.base), "the store refuses the run's checkpoint, or its transcript, for good; the run fails", "session_id", g.sid, "error", cause)
	g.stopRunning()
	base := g.rec
	if g.unwritten && g.beforeAnswer != nil {
		// The answer asking for calls was never written, so nothing of
		// it went out (no call ran, no event was sent): the run fails
		// from before it. Failing from the answer would give every call
		// an end of its own, a record as large as the refused one when
		// the batch is what made it too large.
		base = *g.beforeAnswer
	}
	g.unwritten, g.beforeAnswer, g.committed, g.reread = false, nil, nil, true
	fail := turn.Fail{Message: "the run could not be stored or read: " + cause.Error()}
	// The outbox Fail dropped is not carried: write flushes what is
	// under way before a terminal record. Should even that record be
	// refused (a batch of thousands of calls, each with its end event),
	// the lean failure is written instead, and should that be refused
	// too, write halts.
	g.carried = 0
	g.failingUnstorable = true
	ok := false
	for {
		next, _, err := turn.Apply(base, fail, g.host.opts.now().UnixMilli())
		if err != nil {
			g.halt("fail an unstorable run", err)
			break
		}
		if g.parking != "" {
			withdrawToo(next.Outbox, g.parking)
		}
		if ok = g.write(next, false); ok || !g.failRefused || g.failLean {
			break // written, or halted
		}
		g.failRefused, g.failLean, fail.Lean = false, true, true
	}
	g.failingUnstorable, g.failLean, g.failRefused = false, false, false
	if ok {
		g.drive()
	}
}

// withdrawToo adds id to the approvals the Finish in outbox withdraws.
func withdrawToo(outbox []turn.Effect, id string) {
	for i, e := range outbox {
		if e.Kind == turn.EffectFinish && e.Finish != nil && !slices.Contains(e.Finish.Withdraw, id) {
			f := *e.Finish
			f.Withdraw = append(slices.Clip(f.Withdraw), id)
			outbox[i].Finish = &f
		}
	}
}

// abortRequest serves run::abort: mid-stream it stops the provider and
// answers once what streamed so far is recorded.
func (g *grain) abortRequest(ctx actor.Context, reason string) {
	if len(g.aborts) > 0 {
		// An abort already stopped the stream and waits for what it
		// streamed: this one is answered with it. (Answered at once, it
		// would move the token on, strand the first and leave it to abort
		// the session's next run.)
		g.aborts = append(g.aborts, pendingAbort{reason: reason, sender: ctx.Sender()})
		return
	}
	if g.running && g.stopModel != nil && g.loaded && !g.rec.State.Terminal() {
		// Mid-stream: stop the provider and wait for what it streamed
		// so far, so the partial answer is kept; reply then.
		g.aborts = append(g.aborts, pendingAbort{reason: reason, sender: ctx.Sender()})
		g.stopModel()
		g.stopModel = nil
		return
	}
	ctx.Respond(g.reply(g.onAbort(reason, nil)))
}

// release ends a draining activation at a checkpoint: everything it did is
// in the record, the outbox (if any) is left for the next activation, the
// wakes go back to JetStream for whoever runs the session next.
func (g *grain) release() {
	if g.stopped || !g.writeSettled() {
		return
	}
	if g.unwritten && !g.write(g.rec, false) {
		return // halted; the next activation calls the model again
	}
	ctx, cancel := g.ctx()
	if err := g.host.ports.History.Flush(ctx, g.sid); err != nil {
		g.host.opts.logger.WarnContext(ctx, "flush before hand-off failed; the next activation delivers again", "session_id", g.sid, "error", err)
	}
	cancel()
	for _, w := range g.wakes {
		if w.Nak != nil {
			_ = w.Nak(100 * time.Millisecond)
		}
	}
	g.wakes = nil
	g.shutdown()
	g.host.forget(g.sid, g.self)
	g.root.Stop(g.self)
}

// drive runs the machine until it needs to wait.
func (g *grain) drive() {
	for !g.stopped {
		if g.draining {
			// Hand off once nothing runs: the model call or calls in
			// flight finish and are recorded first, and what the written
			// record holds to deliver goes out (a run the drain let
			// finish kept its answer, turn_end and agent_end in the
			// record until another node activated the session).
			if !g.running && len(g.gating) == 0 && len(turn.InFlight(g.rec)) == 0 {
				if !g.unwritten && turn.Next(g.rec).Kind == turn.ActionDeliver {
					if !g.deliver() {
						return
					}
					continue
				}
				g.release()
			}
			return
		}
		if g.unwritten {
			return // the answer is written with its calls' first verdict
		}
		act := turn.Next(g.rec)
		if act.Kind != turn.ActionDeliver && len(g.rec.AwaitingApproval) > 0 && (g.decide || act.Kind == turn.ActionPark) {
			g.decide = false
			applied, ok := g.applyDecisions()
			if !ok {
				return
			}
			if applied {
				continue
			}
		}
		switch act.Kind {
		case turn.ActionDeliver:
			if !g.deliver() {
				return
			}
		case turn.ActionNone, turn.ActionPark:
			g.settle()
			return
		case turn.ActionWait:
			return
		case turn.ActionProvision:
			if g.host.ports.Workspace != nil {
				g.startProvision()
				return
			}
			if !g.apply(turn.Provisioned{}) {
				return
			}
		case turn.ActionStreamModel:
			if !g.running { // else started before the write (prestartModel)
				g.startModel()
			}
			return
		case turn.ActionExecuteCalls:
			calls := act.Calls[:0:0]
			for _, c := range act.Calls {
				if !g.gating[c.ID] {
					calls = append(calls, c)
				}
			}
			if len(calls) == 0 {
				return // every call is at the gate
			}
			g.startGates(calls)
		case turn.ActionCheckSteering:
			ctx, cancel := g.ctx()
			steering, followups, mark, err := g.peekInbox(ctx)
			if err != nil {
				cancel()
				g.halt("read inbox", err)
				return
			}
			in := turn.SteeringDrained{Steering: steering, Followups: followups}
			if len(steering) == 0 && len(followups) == 0 && mark.Empty() {
				if !g.applyUnwritten(in) {
					cancel()
					return
				}
			} else if !g.fold(in, false, mark) {
				cancel()
				return
			}
			cancel()
		default:
			g.halt("unknown action", fmt.Errorf("%s", act.Kind))
			return
		}
	}
}

// deliver performs the outbox: events and transcript appends go out
// asynchronously (awaited before the next write), Finish cleans up.
func (g *grain) deliver() bool {
	ctx, cancel := g.ctx()
	defer cancel()
	// The carried effects at the head were delivered before.
	fresh := g.rec.Outbox[min(g.carried, len(g.rec.Outbox)):]
	for _, eff := range fresh {
		if g.stored[eff.ID] {
			continue // a dead activation stored it
		}
		var err error
		switch eff.Kind {
		case turn.EffectEmit:
			if eff.Event != nil {
				err = g.host.ports.Events.Emit(ctx, *eff.Event, eff.ID)
			}
		case turn.EffectEndCalls:
			for id, ev := range eff.EndEvents() {
				if g.stored[id] {
					continue
				}
				if err = g.host.ports.Events.Emit(ctx, ev, id); err != nil {
					break
				}
			}
		case turn.EffectAppendHistory:
			if !g.reread && g.committed == nil {
				g.history = append(g.history, eff.Messages...)
			}
			if rh, ok := g.host.ports.History.(ReplayedHistory); ok && g.replayedMs != 0 {
				err = rh.AppendReplayed(ctx, g.sid, eff.ID, eff.Messages, g.replayedMs)
			} else {
				err = g.host.ports.History.Append(ctx, g.sid, eff.ID, eff.Messages)
			}
		case turn.EffectFinish:
			if eff.Finish != nil {
				if g.stopCalls != nil {
					g.stopCalls()
					g.stopCalls = nil
				}
				if len(eff.Finish.Requeue) > 0 {
					err = g.host.ports.Inbox.Requeue(ctx, g.sid, eff.Finish.Requeue)
				}
				if err == nil && len(eff.Finish.Withdraw) > 0 {
					err = g.host.ports.Approvals.Withdraw(ctx, g.sid, eff.Finish.Withdraw)
				}
				if err == nil && eff.Finish.Sandbox && g.host.ports.Workspace != nil {
					// Not worth holding the run's end for: the sandbox
					// worker reaps idle sandboxes.
					if rerr := g.host.ports.Workspace.Release(ctx, g.sid); rerr != nil {
						g.host.opts.logger.WarnContext(ctx, "sandbox not released; the sandbox worker reaps it when idle", "session_id", g.sid, "error", rerr)
					}
				}
			}
		}
		if err != nil {
			g.halt("deliver "+string(eff.Kind), err)
			return false
		}
	}
	if len(g.unconfirmed) == 0 && len(fresh) > 0 {
		g.unconfirmedAt = g.host.opts.now()
	}
	g.unconfirmed = append(g.unconfirmed, fresh...)
	g.rec, g.carried, g.stored, g.replayedMs = turn.Delivered(g.rec), 0, nil, 0
	g.dirty = true
	return true
}

// settle checkpoints a parked or finished session and acks its wakes.
func (g *grain) settle() {
	switch {
	case g.settleDue:
		// Everything delivered is confirmed; the settled write is armed.
	case g.dirty && g.rec.State.Terminal():
		// The run is over and agent_end is out: a client may already have
		// started the next run. Once everything delivered is confirmed,
		// the record is written settled: at once on a clustered host (a
		// run::start elsewhere reads the store, and would deliver the
		// outbox found there again), settleDelay later here, unless the
		// next run overwrites it first.
		ctx, cancel := g.ctx()
		err := g.host.ports.History.Flush(ctx, g.sid)
		cancel()
		if err != nil {
			g.halt("flush effects", err)
			return
		}
		g.unconfirmed = nil
		g.settleDue = true
		if g.host.cluster != nil || g.timer == nil {
			if !g.writeSettled() {
				return
			}
		} else {
			g.settleAt = time.Now().Add(settleDelay)
			g.arm(g.settleAt)
		}
	case g.dirty:
		if !g.write(g.rec, false) {
			return
		}
	default:
		ctx, cancel := g.ctx()
		err := g.host.ports.History.Flush(ctx, g.sid)
		cancel()
		if err != nil {
			g.halt("flush effects", err)
			return
		}
		g.unconfirmed = nil
	}
	if g.rec.State.Terminal() && !g.dirty {
		g.retire()
	}
	if len(g.gating) == 0 {
		g.gating = nil
	}
	for _, w := range g.wakes {
		_ = w.Ack()
	}
	g.wakes = nil
	if g.hbTimer != nil {
		g.hbTimer.Stop()
		g.hbTimer = nil
	}
}

// onTick writes a due settled record and passivates a grain idle for the
// idle timeout; otherwise it arms the timer for what is due next.
func (g *grain) onTick(ctx actor.Context) {
	g.timerAt = time.Time{}
	if g.stopped {
		return
	}
	now := time.Now()
	idleAt := g.lastActive.Add(g.host.opts.idle)
	idle := !now.Before(idleAt)
	// A settled write due, or still due when the grain goes, is made
	// first.
	if g.settleDue && (idle || !now.Before(g.settleAt)) {
		if !g.writeSettled() {
			return
		}
	}
	if idle {
		if g.running || len(g.wakes) > 0 || !g.host.passivate(g.sid, g.self, g.seen) {
			// Busy, or the host holds a message for it: idle again
			// from now.
			idleAt = now.Add(g.host.opts.idle)
		} else {
			g.host.forgetPorts(g.sid)
			ctx.Stop(g.self)
			return
		}
	}
	if g.settleDue && g.settleAt.Before(idleAt) {
		idleAt = g.settleAt
	}
	g.arm(idleAt)
}

// arm makes the timer fire by at (sooner if it is armed sooner; a tick
// before the grain is due only arms it again).
func (g *grain) arm(at time.Time) {
	if !g.timerAt.IsZero() && !at.Before(g.timerAt) {
		return
	}
	g.timerAt = at
	d := time.Until(at)
	if g.timer == nil {
		root, self := g.root, g.self
		g.timer = time.AfterFunc(d, func() { root.Send(self, tick{}) })
		return
	}
	g.timer.Reset(d)
}

// writeSettled writes the finished run's record with its outbox
// delivered (settleDue). Losing the CAS to the next run is fine. It
// returns false when the activation halted.
func (g *grain) writeSettled() bool {
	if !g.settleDue || g.stopped {
		return !g.stopped
	}
	g.settleDue = false
	ctx, cancel := g.ctx()
	defer cancel()
	rev, err := g.host.ports.Store.Write(ctx, g.rec, g.rev)
	if err == nil {
		g.rev, g.dirty = rev, false
	} else if errors.Is(err, ErrFenced) {
		if cur, _, lerr := g.host.ports.Store.Load(ctx, g.sid); lerr == nil && cur.RunID != g.rec.RunID {
			// Another run started over ours, on another replica maybe.
			// The grain lets ours go and takes that one up at its next
			// message as an activation does (load): the transcript as
			// it is now, the calls a dead activation left started, the
			// stored part of the outbox, the events numbered on from
			// the stream's. Adopting the record as it stands would skip
			// all that (its revision is the one the next load finds).
			g.loaded, g.dirty, err = false, false, nil
		}
	}
	if err != nil {
		g.halt("write record", err)
		return false
	}
	if g.rec.State.Terminal() && !g.dirty {
		g.retire()
	}
	return true
}

// resequence has the Events port number this session's events from the
// stream again: the record moved under the grain, so another activation
// may have emitted some.
func (g *grain) resequence() {
	if es, ok := g.host.ports.Events.(SequencedEvents); ok {
		es.Resequence(g.sid)
	}
}

// retire trims what an idle grain holds once its run is over and
// checkpointed.
func (g *grain) retire() {
	// An idle grain holds no transcript. The next run moves the record,
	// and load reads the transcript again (from the History port's cache
	// when this process wrote it).
	g.history = nil
	g.rec = turn.Retired(g.rec)
	// Nothing of the run is in flight any more (its calls were stopped
	// at Finish; appends outlive it by design): a fresh base context lets
	// go of what the run's contexts left in the old one (the map of its
	// children, ~400 B, for as long as the grain idles).
	if g.cancel != nil {
		g.cancel()
		g.base, g.cancel = context.WithCancel(g.host.life)
	}
}

// startProvision provisions the run asynchronously; the answer comes back
// as a modelResult, so an abort stops it the way it stops a model call.
func (g *grain) startProvision() {
	g.token++
	tok := g.token
	ctx, cancel := context.WithTimeout(g.traced(g.base), g.host.opts.callTimeout)
	g.stopModel = cancel
	g.running = true
	ws, root, self, sid, run := g.host.ports.Workspace, g.root, g.self, g.sid, g.rec.Request
	g.host.pool.Go(func() {
		defer cancel()
		in := ws.Provision(ctx, sid, run)
		root.Send(self, &modelResult{token: tok, in: in})
	})
}

func (g *grain) startModel() {
	if g.reread && !g.rereadHistory() {
		return
	}
	g.startModelFor(g.rec, nil)
}

// startModelFor starts the model call of rec (g.rec, or the record about
// to be written, committed closed once it is) on history.
func (g *grain) startModelFor(rec turn.Record, committed <-chan struct{}) {
	g.token++
	tok := g.token
	ctx, cancel := context.WithCancel(g.traced(g.base))
	g.stopModel = cancel
	g.running = true
	req := ModelRequest{
		SessionID: g.sid,
		RunID:     rec.RunID,
		Step:      rec.Step,
		Provider:  rec.Request.Provider,
		Model:     rec.Request.Model,
		System:    rec.Request.SystemPrompt,
		// Clipped, not copied: the grain only appends to history (a
		// reader of this slice never sees that) or replaces it.
		Messages:  slices.Clip(g.history),
		HistoryID: g.histID,
		Run:       rec.Request,
		Committed: committed,
	}
	model, root, self := g.host.ports.Model, g.root, g.self
	g.host.pool.Go(func() {
		defer cancel()
		var compacted []agent.Message
		req.Compacted = func(msgs []agent.Message) { compacted = msgs }
		in := model.Stream(ctx, req)
		root.Send(self, &modelResult{token: tok, in: in, history: compacted})
	})
}

// keepHistory returns the transcript the grain goes on with after a load
// answered hist named hid: the grain's own copy when it is the same
// transcript (the same id and length: it only grew by the grain's own
// appends, which the grain made to its copy too), else hist. Keeping the
// copy saves copying the whole transcript at every run's start: the
// grain's first append to a loaded slice has to copy it.
func (g *grain) keepHistory(hist []agent.Message, hid string) []agent.Message {
	if hid != "" && hid == g.histID && !g.reread && len(hist) == len(g.history) {
		return g.history
	}
	return hist
}

// rereadHistory reads the transcript again once the appends delivered
// since the load are confirmed (see reread). It returns false when the
// activation halted.
func (g *grain) rereadHistory() bool {
	ctx, cancel := g.ctx()
	defer cancel()
	var (
		hist []agent.Message
		hid  string
		err  error
	)
	if err = g.host.ports.History.Flush(ctx, g.sid); err == nil {
		if ih, ok := g.host.ports.History.(IdentifiedHistory); ok {
			hist, hid, err = ih.LoadIdentified(ctx, g.sid)
		} else {
			hist, err = g.host.ports.History.Load(ctx, g.sid)
		}
	}
	if err != nil {
		g.halt("read transcript", err)
		return false
	}
	g.history, g.histID, g.reread = g.keepHistory(hist, hid), cmp.Or(hid, nuid.Next()), false
	g.unconfirmed = nil // flushed; the outbox was delivered (carried is 0)
	return true
}

// callCtx is the context calls and gates run in: cancelled by an abort
// or the run's end (stopCalls).
func (g *grain) callCtx() context.Context {
	ctx, cancel := context.WithCancel(g.traced(g.base))
	if g.stopCalls != nil {
		prev := g.stopCalls
		g.stopCalls = func() { prev(); cancel() }
	} else {
		g.stopCalls = cancel
	}
	return ctx
}

// startGates asks the chokepoint about each call in parallel, bounded;
// verdicts come back as gateResult.
func (g *grain) startGates(calls []turn.Call) {
	if g.gating == nil {
		g.gating = map[string]bool{}
	}
	tok := g.token
	ctx := g.callCtx()
	fns, root, self, sid := g.host.ports.Functions, g.root, g.self, g.sid
	sem := make(chan struct{}, g.host.opts.parallel)
	for _, c := range calls {
		g.gating[c.ID] = true
		g.host.pool.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, ccancel := context.WithTimeout(ctx, g.host.opts.callTimeout)
			v := fns.Gate(cctx, sid, c)
			ccancel()
			root.Send(self, &gateResult{token: tok, id: c.ID, v: v})
		})
	}
}

// onVerdict folds a gate verdict in: a denial is the call's result, a park
// is recorded (and the approval requested), a run is recorded started
// (written before dispatch) and dispatched. It returns false when the
// input was refused or the activation halted.
func (g *grain) onVerdict(id string, v Verdict) bool {
	switch v.Kind {
	case VerdictDeny:
		return g.apply(turn.CallDone{ID: id, Result: v.Result})
	case VerdictPark:
		// The approval is recorded before the parked state is written: a
		// client that sees the call parked can resolve it at once. A crash
		// in between leaves a record for a call that is not parked yet; the
		// next activation gates the call again, parks it under the same
		// record, and applies a decision already written there.
		in := turn.CallParked{ID: id, ArgsHash: v.ArgsHash}
		next, _, err := turn.Apply(g.rec, in, g.host.opts.now().UnixMilli())
		if err != nil {
			return g.apply(in) // refused or failed: apply logs or halts
		}
		for _, p := range next.AwaitingApproval {
			if p.FunctionCallID != id {
				continue
			}
			ctx, cancel := g.ctx()
			err := g.host.ports.Approvals.Request(ctx, g.sid, next.RunID, p)
			cancel()
			if err != nil {
				g.halt("record pending approval", err) // the call is gated again
				return false
			}
		}
		g.parking = id
		ok := g.write(next, true)
		g.parking = ""
		return ok
	default:
		if !g.apply(turn.CallsStarted{IDs: []string{id}}) {
			return false
		}
		g.dispatch(v.Call)
		return true
	}
}

// dispatch runs one started call; its result comes back as callResult.
func (g *grain) dispatch(c turn.Call) {
	if w := g.rec.Work; w != nil {
		c.Batch = len(w.Prepared)
	}
	tok := g.token
	ctx := g.callCtx()
	fns, root, self, sid, timeout := g.host.ports.Functions, g.root, g.self, g.sid, g.host.opts.callTimeout
	g.host.pool.Go(func() {
		cctx, ccancel := context.WithTimeout(ctx, timeout)
		res := fns.Call(cctx, sid, c)
		ccancel()
		root.Send(self, &callResult{token: tok, in: turn.CallDone{ID: c.ID, Result: res}})
	})
}

// applyDecisions applies the decisions humans wrote for parked calls and
// withdraws the records it consumed. applied says whether any was; ok is
// false when the activation halted.
func (g *grain) applyDecisions() (applied, ok bool) {
	ctx, cancel := g.ctx()
	defer cancel()
	ds, err := g.host.ports.Approvals.Decisions(ctx, g.sid, g.rec.RunID, g.rec.AwaitingApproval)
	if err != nil {
		// Halting naks the wake: it comes back in a second.
		g.halt("read approval decisions", err)
		return false, false
	}
	var ids []string
	for _, d := range ds {
		if g.apply(d) {
			ids = append(ids, d.ID)
		} else if g.stopped {
			return false, false
		}
	}
	if len(ids) > 0 {
		if err := g.host.ports.Approvals.Withdraw(ctx, g.sid, ids); err != nil {
			g.host.opts.logger.WarnContext(ctx, "withdrawing consumed approvals failed", "session_id", g.sid, "error", err)
		}
	}
	return len(ids) > 0, true
}

// armHeartbeat keeps held wakes from timing out while the grain works.
func (g *grain) armHeartbeat() {
	if g.hbTimer != nil {
		return
	}
	root, self := g.root, g.self
	g.hbTimer = time.AfterFunc(g.host.opts.heartbeat, func() { root.Send(self, heartbeat{}) })
}

func (g *grain) beat() {
	g.hbTimer = nil
	if len(g.wakes) == 0 || g.stopped {
		return
	}
	for _, w := range g.wakes {
		if w.InProgress != nil {
			_ = w.InProgress()
		}
	}
	g.armHeartbeat()
}
