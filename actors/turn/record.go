package turn

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/iii-on-nats/iii/agent"
)

// Record is the turn state record of a session (SPEC §6), stored in KV
// turn_state/<session_id>. It carries everything a fresh activation needs
// to resume after a crash between any two effects: the batch of function
// calls with an effect record per call, the parked approvals, the messages
// not yet appended to the transcript, and the [Effect]s not yet delivered
// (the outbox).
//
// Treat a Record as a value: [Apply] never modifies the one it is given.
type Record struct {
	SessionID string          `json:"session_id"`
	RunID     string          `json:"run_id"`
	State     agent.TurnState `json:"state"`
	// Step counts accepted inputs: [New] sets 1 and every successful
	// [Apply] adds 1. A turn-step message older than Step is stale.
	Step uint64 `json:"step"`
	// TurnCount counts the run's model calls, including the current one.
	TurnCount int `json:"turn_count"`
	// MaxTurns bounds TurnCount; 0 means no bound.
	MaxTurns int `json:"max_turns,omitempty"`
	// Request is the run's request without its messages: provider, model,
	// mode, system prompt and ids for every model call of the run.
	Request       agent.RunStart `json:"request"`
	LastAssistant *agent.Message `json:"last_assistant,omitempty"`
	// Work is the batch of function calls of LastAssistant while it runs.
	// It goes once the batch completes: FunctionResults then hold the
	// results (a record carrying large results holds each once less), and
	// FunctionResults not empty is what continues the run to the model
	// after the steering check. (Records written before stop 31 keep Work
	// until the next model call; both read the same.)
	Work *Work `json:"work,omitempty"`
	// AwaitingApproval lists the calls of Work parked for a human decision,
	// in the order they were parked.
	AwaitingApproval []agent.PendingApproval `json:"awaiting_approval,omitempty"`
	// FunctionResults are the function_result messages of the last
	// completed batch, in the model's call order.
	FunctionResults []agent.Message  `json:"function_results"`
	Error           *agent.Failure   `json:"error,omitempty"`
	StopReason      agent.StopReason `json:"stop_reason,omitempty"`
	// Usage sums the usage of the run's assistant messages.
	Usage agent.Usage `json:"usage"`
	// Input holds the run's messages until the run leaves provisioning,
	// when they are appended to the transcript.
	Input []agent.Message `json:"input,omitempty"`
	// Followups holds follow-up messages drained from the inbox at a
	// steering check that steering won; they go to the model at a later
	// check, or back to the inbox when the run ends ([Finish].Requeue).
	Followups []agent.Message `json:"followups,omitempty"`
	// Outbox holds the effects that are written but not yet delivered; see
	// [Delivered].
	Outbox      []Effect `json:"outbox,omitempty"`
	StartedAtMs int64    `json:"started_at_ms"`
	UpdatedAtMs int64    `json:"updated_at_ms"`
	// Trace is the run's trace context (W3C traceparent, tracestate,
	// baggage) as run::start received it: every effect of the run, on any
	// node and after any crash or wait, continues that trace.
	Trace map[string]string `json:"trace,omitempty"`
	// Taken names the inbox items a steering check took in (the messages
	// this record's outbox appends to the transcript) until their removal
	// from the inbox is known done. The machine carries it unchanged; the
	// session grain sets and clears it, and removes the items again when
	// it loads a record that still names them, so a crash between the
	// write and the removal does not take them in twice.
	Taken *Taken `json:"taken,omitempty"`
}

// Taken lists the digests of inbox items in inbox order, per inbox. A
// digest is the inbox's business (the orchestrator hashes each item's
// JSON); the items a removal takes are those still heading their inbox
// whose digests match, in order.
type Taken struct {
	Steering  []string `json:"steering,omitempty"`
	Followups []string `json:"followups,omitempty"`
}

// Empty reports a mark that names no item.
func (t Taken) Empty() bool { return len(t.Steering) == 0 && len(t.Followups) == 0 }

// Work is the batch of function calls of one assistant message.
type Work struct {
	// Prepared are the calls in the order the model wrote them; results
	// keep this order whatever order the calls finish in.
	Prepared []Call `json:"prepared"`
	// Effects is the effect record of each call that started or finished,
	// by call id. A call with no entry has not started.
	Effects map[string]CallEffect `json:"effects"`
}

// Call is one prepared function call.
type Call struct {
	ID         string         `json:"id"`
	FunctionID string         `json:"function_id"`
	Args       map[string]any `json:"args,omitempty"`
	// Approved is set when a human allowed the call: the grain runs it
	// without asking the policy again (the approval is bound to these
	// exact arguments).
	Approved bool `json:"approved,omitempty"`
	// Announced is set once function_execution_start was emitted, so a
	// call re-run after a crash is not announced twice.
	Announced bool `json:"announced,omitempty"`
	// Batch is how many calls the call's assistant message asked for, set
	// by the grain when it dispatches the call (not stored): the batch's
	// results share one bound ([agent.FunctionResult.Capped]).
	Batch int `json:"-"`
}

// CallStatus is the state of a call's effect record.
type CallStatus string

// Call statuses. A call is "started" from just before it is dispatched
// until its result is recorded; a crash in between leaves it started.
const (
	StatusStarted CallStatus = "started"
	StatusDone    CallStatus = "done"
)

// CallEffect is the effect record of one call.
type CallEffect struct {
	Status      CallStatus            `json:"status"`
	Result      *agent.FunctionResult `json:"result,omitempty"`
	StartedAtMs int64                 `json:"started_at_ms,omitempty"`
	DoneAtMs    int64                 `json:"done_at_ms,omitempty"`
}

// New seeds the record of a run: state provisioning, step 1, the run's
// messages held until provisioning ends. rs.MaxTurns is taken as is (fill
// in the deployment's default before); 0 means no bound. The one effect, a
// turn_state_changed event, is in the record's outbox and is also returned.
// Errors wrap agent.ErrInvalidRunStart or agent.ErrInvalidID.
func New(rs agent.RunStart, runID string, nowMs int64) (Record, []Effect, error) {
	if err := rs.Validate(); err != nil {
		return Record{}, nil, err
	}
	if err := agent.ValidateID("run_id", runID); err != nil {
		return Record{}, nil, err
	}
	req := rs
	req.Messages = nil
	t := &tx{rec: Record{
		SessionID:       rs.SessionID,
		RunID:           runID,
		State:           agent.StateProvisioning,
		Step:            1,
		MaxTurns:        rs.MaxTurns,
		Request:         req,
		FunctionResults: []agent.Message{},
		Input:           slices.Clone(rs.Messages),
		StartedAtMs:     nowMs,
		UpdatedAtMs:     nowMs,
	}, now: nowMs}
	t.emitState()
	return t.commit()
}

// Delivered returns rec with an empty outbox: the grain calls it once every
// effect in rec.Outbox was performed. It is not an input: the step does not
// change, and the next write of the record persists the empty outbox.
func Delivered(rec Record) Record {
	rec.Outbox = nil
	return rec
}

// Retired returns what a grain keeps of a finished run's record once it
// is written and its outbox delivered: the fields that identify the run and
// say how it ended, without its messages, calls and results (they are in
// KV; an idle grain need not hold them). It keeps Taken: the next run
// removes those items before its first steering check (run::start builds
// on a retired record). rec is returned unchanged unless it is terminal
// with an empty outbox. A retired record is not written again: [Apply]
// refuses every input on a terminal record.
func Retired(rec Record) Record {
	if !rec.State.Terminal() || len(rec.Outbox) > 0 {
		return rec
	}
	return Record{
		SessionID:   rec.SessionID,
		RunID:       rec.RunID,
		State:       rec.State,
		Step:        rec.Step,
		TurnCount:   rec.TurnCount,
		MaxTurns:    rec.MaxTurns,
		Request:     rec.Request,
		Error:       rec.Error,
		StopReason:  rec.StopReason,
		Usage:       rec.Usage,
		StartedAtMs: rec.StartedAtMs,
		UpdatedAtMs: rec.UpdatedAtMs,
		Trace:       rec.Trace,
		Taken:       rec.Taken,
	}
}

// View is the client's view of rec (turn::get_state, turn_state_changed).
func View(rec Record) agent.TurnView {
	return agent.TurnView{
		SessionID:        rec.SessionID,
		RunID:            rec.RunID,
		State:            rec.State,
		Step:             rec.Step,
		TurnCount:        rec.TurnCount,
		MaxTurns:         rec.MaxTurns,
		AwaitingApproval: slices.Clone(rec.AwaitingApproval),
		StopReason:       rec.StopReason,
		Error:            rec.Error,
		StartedAtMs:      rec.StartedAtMs,
		UpdatedAtMs:      rec.UpdatedAtMs,
	}
}

// InFlight returns the ids of the calls that are started but not done, in
// the model's order. A fresh activation that finds any applies [Recover]:
// their outcome is unknown.
func InFlight(rec Record) []string {
	if rec.Work == nil || rec.State.Terminal() {
		return nil
	}
	var ids []string
	for _, c := range rec.Work.Prepared {
		if e, ok := rec.Work.Effects[c.ID]; ok && e.Status == StatusStarted {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// Validate checks the invariants the machine keeps, so a record read from
// storage can be trusted by [Next] and [Apply]. Errors wrap
// [ErrInvalidRecord].
func (r Record) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRecord}, args...)...)
	}
	if err := agent.ValidateSessionID(r.SessionID); err != nil {
		return bad("%v", err)
	}
	if err := agent.ValidateID("run_id", r.RunID); err != nil {
		return bad("%v", err)
	}
	if !r.State.Valid() {
		return bad("unknown state %q", r.State)
	}
	if r.MaxTurns < 0 || r.TurnCount < 0 {
		return bad("negative turn count or max_turns")
	}
	batch := r.State == agent.StateFunctionExecute || r.State == agent.StateFunctionAwaitingApproval
	if batch && (r.Work == nil || len(r.Work.Prepared) == 0) {
		return bad("state %s without a batch of calls", r.State)
	}
	if r.Work == nil {
		if len(r.AwaitingApproval) > 0 {
			return bad("parked calls without a batch")
		}
		return nil
	}
	ids := make(map[string]bool, len(r.Work.Prepared))
	for _, c := range r.Work.Prepared {
		if c.ID == "" || ids[c.ID] {
			return bad("empty or duplicate call id %q", c.ID)
		}
		ids[c.ID] = true
	}
	for id, e := range r.Work.Effects {
		if !ids[id] {
			return bad("effect for call %q that is not prepared", id)
		}
		switch e.Status {
		case StatusStarted:
		case StatusDone:
			if e.Result == nil {
				return bad("call %q is done without a result", id)
			}
		default:
			return bad("call %q has unknown status %q", id, e.Status)
		}
	}
	parked := make(map[string]bool, len(r.AwaitingApproval))
	for _, p := range r.AwaitingApproval {
		if !ids[p.FunctionCallID] || parked[p.FunctionCallID] {
			return bad("parked call %q is not prepared or parked twice", p.FunctionCallID)
		}
		if _, ok := r.Work.Effects[p.FunctionCallID]; ok {
			return bad("parked call %q has an effect record", p.FunctionCallID)
		}
		parked[p.FunctionCallID] = true
	}
	if !batch {
		if len(parked) > 0 {
			return bad("parked calls in state %s", r.State)
		}
		return nil
	}
	var running, done int
	for _, c := range r.Work.Prepared {
		switch {
		case parked[c.ID]:
		case r.Work.Effects[c.ID].Status == StatusDone:
			done++
		default:
			running++
		}
	}
	switch {
	case done == len(r.Work.Prepared):
		return bad("state %s with every call done", r.State)
	case r.State == agent.StateFunctionAwaitingApproval && (running > 0 || len(parked) == 0):
		return bad("state %s with calls to run or none parked", r.State)
	case r.State == agent.StateFunctionExecute && running == 0:
		return bad("state %s with only parked calls left", r.State)
	}
	return nil
}

// clone copies the containers of r that Apply changes; the messages and
// arguments inside are shared (they are never modified).
func (r Record) clone() Record {
	c := r
	if r.Work != nil {
		w := Work{Prepared: slices.Clone(r.Work.Prepared), Effects: maps.Clone(r.Work.Effects)}
		if w.Effects == nil {
			w.Effects = map[string]CallEffect{}
		}
		c.Work = &w
	}
	c.AwaitingApproval = slices.Clone(r.AwaitingApproval)
	c.FunctionResults = slices.Clone(r.FunctionResults)
	c.Input = slices.Clone(r.Input)
	c.Followups = slices.Clone(r.Followups)
	c.Outbox = slices.Clone(r.Outbox)
	if r.Taken != nil {
		t := *r.Taken
		c.Taken = &t
	}
	return c
}

// UnmarshalJSON decodes c, its arguments exact (agent.DecodeArguments:
// an integer past 2^53 is not rounded when a record is read back).
func (c *Call) UnmarshalJSON(b []byte) error {
	type plain Call
	var p struct {
		plain
		Args json.RawMessage `json:"args,omitempty"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	args, err := agent.RawArguments(p.Args)
	if err != nil {
		return err
	}
	*c = Call(p.plain)
	c.Args = args
	return nil
}
