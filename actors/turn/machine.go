package turn

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/iii-on-nats/iii/agent"
)

// Texts of the results the machine makes up.
const (
	textInterrupted = agent.InterruptedText
	textAborted     = "aborted"
	textDenied      = "denied by the user"
)

// Apply folds one input into rec and returns the next record and the
// effects to perform after writing it (they are also appended to the
// record's outbox). It does no I/O. An input that does not fit rec returns
// an error wrapping [ErrUnexpectedInput] or [ErrInvalidInput] (or
// [ErrInvalidRecord] for a corrupt rec) and rec unchanged. On success the
// step grows by exactly one and UpdatedAtMs becomes nowMs.
func Apply(rec Record, in Input, nowMs int64) (Record, []Effect, error) {
	if in == nil {
		return rec, nil, fmt.Errorf("%w: nil input", ErrInvalidInput)
	}
	if err := rec.Validate(); err != nil {
		return rec, nil, err
	}
	if rec.State.Terminal() {
		return rec, nil, unexpected(rec, in, "the run is over")
	}
	t := &tx{rec: rec.clone(), now: nowMs}
	t.rec.Step++
	t.rec.UpdatedAtMs = nowMs
	var err error
	switch in := in.(type) {
	case Provisioned:
		err = t.provisioned(in)
	case ProvisionFailed:
		err = t.provisionFailed(in)
	case BudgetExceeded:
		err = t.budgetExceeded(in)
	case ModelDone:
		err = t.modelDone(in)
	case ModelFailed:
		err = t.modelFailed(in)
	case CallsStarted:
		err = t.callsStarted(in)
	case CallDone:
		err = t.callDone(in)
	case CallParked:
		err = t.callParked(in)
	case ApprovalResolved:
		err = t.approvalResolved(in)
	case SteeringDrained:
		err = t.steeringDrained(in)
	case Abort:
		t.abort(in.Reason, in.Partial)
	case Fail:
		t.failRun(in.Message, in.Lean)
	case Recover:
		err = t.recover(in)
	default:
		err = fmt.Errorf("%w: unknown input %T", ErrInvalidInput, in)
	}
	if err != nil {
		return rec, nil, err
	}
	out, effects, _ := t.commit()
	return out, effects, nil
}

func unexpected(rec Record, in Input, why string) error {
	return fmt.Errorf("%w: %s in state %s: %s", ErrUnexpectedInput, in.inputName(), rec.State, why)
}

// tx is one Apply in progress: a private copy of the record and the
// effects produced so far.
type tx struct {
	rec     Record
	now     int64
	effects []Effect
}

// commit numbers the effects, appends them to the outbox and returns the
// record.
func (t *tx) commit() (Record, []Effect, error) {
	prefix := t.rec.RunID + ":" + strconv.FormatUint(t.rec.Step, 10) + ":"
	for i := range t.effects {
		t.effects[i].ID = prefix + strconv.Itoa(i)
	}
	t.rec.Outbox = append(t.rec.Outbox, t.effects...)
	return t.rec, t.effects, nil
}

func (t *tx) want(in Input, states ...agent.TurnState) error {
	if slices.Contains(states, t.rec.State) {
		return nil
	}
	return unexpected(t.rec, in, "not accepted here")
}

func (t *tx) emit(ev agent.Event) {
	ev.SessionID = t.rec.SessionID
	ev.TS = t.now
	t.effects = append(t.effects, Effect{Kind: EffectEmit, Event: &ev})
}

// history appends msgs to the transcript.
func (t *tx) history(msgs ...agent.Message) {
	if len(msgs) > 0 {
		t.effects = append(t.effects, Effect{Kind: EffectAppendHistory, Messages: slices.Clone(msgs)})
	}
}

// inject appends messages from the user (the run's input, steering,
// follow-ups) to the transcript and announces each.
func (t *tx) inject(msgs []agent.Message) {
	msgs = slices.Clone(msgs)
	for i := range msgs {
		if msgs[i].Timestamp == 0 {
			msgs[i].Timestamp = t.now
		}
	}
	t.history(msgs...)
	for i := range msgs {
		t.emit(agent.Event{Type: agent.EventMessageComplete, Message: &msgs[i]})
	}
}

func (t *tx) emitState() {
	view := View(t.rec)
	t.emit(agent.Event{Type: agent.EventTurnStateChanged, State: t.rec.State, View: &view})
}

func (t *tx) setState(s agent.TurnState) {
	if t.rec.State == s {
		return
	}
	t.rec.State = s
	t.emitState()
}

// flushInput moves the run's messages to the transcript as the run leaves
// provisioning, whatever the outcome: the user said them.
func (t *tx) flushInput() {
	if t.rec.State != agent.StateProvisioning || len(t.rec.Input) == 0 {
		return
	}
	t.inject(t.rec.Input)
	t.rec.Input = nil
}

// startTurn begins a model call.
func (t *tx) startTurn() {
	t.rec.TurnCount++
	t.rec.Work = nil
	t.rec.FunctionResults = []agent.Message{}
	t.setState(agent.StateAssistantStreaming)
}

func (t *tx) maxTurnsReached() bool {
	return t.rec.MaxTurns > 0 && t.rec.TurnCount >= t.rec.MaxTurns
}

// finish ends the run in state with stop reason sr.
func (t *tx) finish(state agent.TurnState, sr agent.StopReason, reason string, cancel, withdraw []string) {
	t.rec.StopReason = sr
	t.setState(state)
	t.emit(agent.Event{Type: agent.EventAgentEnd, StopReason: sr})
	t.effects = append(t.effects, Effect{Kind: EffectFinish, Finish: &Finish{
		StopReason: sr,
		Reason:     reason,
		Cancel:     cancel,
		Withdraw:   withdraw,
		Requeue:    t.rec.Followups,
		Sandbox:    t.rec.Request.Sandbox,
	}})
	t.rec.Followups = nil
}

// fail ends the run in failed: an assistant message with stop_reason error
// is completed (not appended to the transcript), then agent_end.
func (t *tx) fail(kind agent.ErrorKind, text string, partial *agent.Message) {
	msg := t.assistant(partial, agent.StopError)
	msg.ErrorMessage = text
	t.emit(agent.Event{Type: agent.EventMessageComplete, Message: &msg})
	t.rec.Error = &agent.Failure{Kind: kind, Message: text}
	t.finish(agent.StateFailed, agent.StopError, text, nil, nil)
}

// endCalls gives every call of the batch that is not done the result
// result makes (its function_execution_end, and its start if it had none)
// and returns the calls that were started, to cancel, and parked, to
// withdraw.
func (t *tx) endCalls(result func(*Call) agent.FunctionResult) (cancel, withdraw []string) {
	w := t.rec.Work
	for i := range w.Prepared {
		c := &w.Prepared[i]
		switch {
		case w.Effects[c.ID].Status == StatusDone:
			continue
		case w.Effects[c.ID].Status == StatusStarted:
			cancel = append(cancel, c.ID)
		case parked(t.rec, c.ID):
			withdraw = append(withdraw, c.ID)
		}
		t.done(c, result(c))
	}
	return cancel, withdraw
}

// failRun ends the run in failed from any state, keeping only what a
// finished run needs (see [Fail]).
func (t *tx) failRun(text string, lean bool) {
	var cancel, withdraw, ended []string
	switch {
	case t.rec.Work != nil && lean:
		// Only what the run's end must act on: the calls to cancel and
		// to withdraw, by id, and the calls whose start went out, which
		// get their end at delivery (EffectEndCalls).
		for _, c := range t.rec.Work.Prepared {
			st := t.rec.Work.Effects[c.ID].Status
			switch {
			case st == StatusStarted:
				cancel = append(cancel, c.ID)
			case parked(t.rec, c.ID):
				withdraw = append(withdraw, c.ID)
			}
			if c.Announced && st != StatusDone {
				ended = append(ended, c.ID)
			}
		}
	case t.rec.Work != nil:
		// Every call announced gets its end, as an abort's do; the
		// results go with the record's calls.
		cancel, withdraw = t.endCalls(func(*Call) agent.FunctionResult { return agent.ErrorResult("the run failed: "+text, nil) })
	}
	t.rec.LastAssistant, t.rec.Work, t.rec.FunctionResults = nil, nil, nil
	t.rec.Input, t.rec.AwaitingApproval, t.rec.Outbox = nil, nil, nil
	if len(ended) > 0 {
		t.effects = append(t.effects, Effect{Kind: EffectEndCalls,
			Ends: &CallEnds{SessionID: t.rec.SessionID, Calls: ended, Text: "the run failed: " + text, TS: t.now}})
	}
	msg := t.assistant(nil, agent.StopError)
	msg.ErrorMessage = text
	t.emit(agent.Event{Type: agent.EventMessageComplete, Message: &msg})
	t.rec.Error = &agent.Failure{Kind: agent.ErrorPermanent, Message: text}
	t.finish(agent.StateFailed, agent.StopError, text, cancel, withdraw)
}

// assistant builds the assistant message that closes an interrupted model
// call from what was streamed: text, thinking and images only.
func (t *tx) assistant(partial *agent.Message, sr agent.StopReason) agent.Message {
	msg := agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{}}
	if partial != nil {
		msg.Usage = partial.Usage
		msg.Model, msg.Provider = partial.Model, partial.Provider
		for _, c := range partial.Content {
			if c.Type != agent.ContentFunctionCall && c.Validate() == nil {
				msg.Content = append(msg.Content, c)
			}
		}
	}
	t.normalize(&msg)
	msg.StopReason = sr
	return msg
}

// normalize fills in what the provider may leave out.
func (t *tx) normalize(m *agent.Message) {
	if m.Model == "" {
		m.Model = t.rec.Request.Model
	}
	if m.Provider == "" {
		m.Provider = t.rec.Request.Provider
	}
	if m.Timestamp == 0 {
		m.Timestamp = t.now
	}
	if m.Content == nil {
		m.Content = []agent.Content{}
	}
}

func errorKind(in Input, k agent.ErrorKind) (agent.ErrorKind, error) {
	if k == "" {
		return agent.ErrorPermanent, nil
	}
	if !k.Valid() {
		return "", fmt.Errorf("%w: %s: unknown error kind %q", ErrInvalidInput, in.inputName(), k)
	}
	return k, nil
}

func (t *tx) provisioned(in Provisioned) error {
	if err := t.want(in, agent.StateProvisioning); err != nil {
		return err
	}
	if in.SystemPrompt != "" {
		t.rec.Request.SystemPrompt = in.SystemPrompt
	}
	t.flushInput()
	t.startTurn()
	return nil
}

func (t *tx) provisionFailed(in ProvisionFailed) error {
	if err := t.want(in, agent.StateProvisioning); err != nil {
		return err
	}
	kind, err := errorKind(in, in.Kind)
	if err != nil {
		return err
	}
	t.flushInput()
	t.fail(kind, in.Message, nil)
	return nil
}

func (t *tx) budgetExceeded(in BudgetExceeded) error {
	if err := t.want(in, agent.StateProvisioning, agent.StateAssistantStreaming); err != nil {
		return err
	}
	t.flushInput()
	t.finish(agent.StateStopped, agent.StopBudgetExceeded, in.Message, nil, nil)
	return nil
}

func (t *tx) modelFailed(in ModelFailed) error {
	if err := t.want(in, agent.StateAssistantStreaming); err != nil {
		return err
	}
	kind, err := errorKind(in, in.Kind)
	if err != nil {
		return err
	}
	t.fail(kind, in.Message, in.Partial)
	return nil
}

func (t *tx) modelDone(in ModelDone) error {
	if err := t.want(in, agent.StateAssistantStreaming); err != nil {
		return err
	}
	msg := in.Message
	if msg.Role != agent.RoleAssistant {
		t.fail(agent.ErrorPermanent, fmt.Sprintf("provider returned a %q message, not an assistant message", msg.Role), nil)
		return nil
	}
	if err := msg.Validate(); err != nil {
		t.fail(agent.ErrorPermanent, "provider returned an invalid message: "+err.Error(), &msg)
		return nil
	}
	t.normalize(&msg)
	calls := msg.FunctionCalls()
	if msg.StopReason == "" {
		msg.StopReason = agent.StopEnd
		if len(calls) > 0 {
			msg.StopReason = agent.StopFunctionCall
		}
	}
	if msg.Usage != nil {
		t.rec.Usage = t.rec.Usage.Add(*msg.Usage)
	}
	t.rec.LastAssistant = &msg
	t.history(msg)
	t.emit(agent.Event{Type: agent.EventMessageComplete, Message: &msg})
	if len(calls) == 0 {
		t.emit(agent.Event{Type: agent.EventTurnEnd, Message: &msg})
		if t.maxTurnsReached() {
			// The model is done; the inbox stays for the next run.
			t.finish(agent.StateStopped, agent.StopEnd, "", nil, nil)
			return nil
		}
		t.setState(agent.StateSteeringCheck)
		return nil
	}
	w := &Work{Prepared: make([]Call, len(calls)), Effects: map[string]CallEffect{}}
	for i, c := range calls {
		w.Prepared[i] = Call{ID: c.ID, FunctionID: c.FunctionID, Args: c.Arguments}
	}
	t.rec.Work = w
	t.setState(agent.StateFunctionExecute)
	return nil
}

// call finds a prepared call by id.
func (t *tx) call(in Input, id string) (*Call, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: %s: empty call id", ErrInvalidInput, in.inputName())
	}
	if t.rec.Work != nil {
		for i := range t.rec.Work.Prepared {
			if t.rec.Work.Prepared[i].ID == id {
				return &t.rec.Work.Prepared[i], nil
			}
		}
	}
	return nil, unexpected(t.rec, in, fmt.Sprintf("call %q is not prepared", id))
}

// announce emits function_execution_start once per call.
func (t *tx) announce(c *Call) {
	if c.Announced {
		return
	}
	c.Announced = true
	t.emit(agent.Event{Type: agent.EventFunctionExecutionStart, FunctionCallID: c.ID, FunctionID: c.FunctionID, Args: c.Args})
}

// done records the result of c and emits function_execution_end.
func (t *tx) done(c *Call, r agent.FunctionResult) {
	t.announce(c)
	e := t.rec.Work.Effects[c.ID]
	var dur int64
	if e.Status == StatusStarted {
		dur = max(t.now-e.StartedAtMs, 0)
	}
	t.rec.Work.Effects[c.ID] = CallEffect{Status: StatusDone, Result: &r, StartedAtMs: e.StartedAtMs, DoneAtMs: t.now}
	t.emit(agent.Event{Type: agent.EventFunctionExecutionEnd, FunctionCallID: c.ID, Result: &r, IsError: r.IsError, DurationMs: dur})
}

func (t *tx) unpark(id string) {
	t.rec.AwaitingApproval = slices.DeleteFunc(t.rec.AwaitingApproval, func(p agent.PendingApproval) bool {
		return p.FunctionCallID == id
	})
}

func (t *tx) callsStarted(in CallsStarted) error {
	if err := t.want(in, agent.StateFunctionExecute); err != nil {
		return err
	}
	if len(in.IDs) == 0 {
		return fmt.Errorf("%w: CallsStarted without ids", ErrInvalidInput)
	}
	seen := make(map[string]bool, len(in.IDs))
	calls := make([]*Call, len(in.IDs))
	for i, id := range in.IDs {
		if seen[id] {
			return fmt.Errorf("%w: CallsStarted: call %q twice", ErrInvalidInput, id)
		}
		seen[id] = true
		c, err := t.call(in, id)
		if err != nil {
			return err
		}
		if e, ok := t.rec.Work.Effects[id]; ok {
			return unexpected(t.rec, in, fmt.Sprintf("call %q is already %s", id, e.Status))
		}
		if parked(t.rec, id) {
			return unexpected(t.rec, in, fmt.Sprintf("call %q is parked", id))
		}
		calls[i] = c
	}
	for _, c := range calls {
		t.announce(c)
		t.rec.Work.Effects[c.ID] = CallEffect{Status: StatusStarted, StartedAtMs: t.now}
	}
	return nil
}

// validResult replaces a result whose content the transcript cannot hold.
func validResult(r agent.FunctionResult) agent.FunctionResult {
	for _, c := range r.Content {
		err := c.Validate()
		if err == nil && c.Type != agent.ContentText && c.Type != agent.ContentImage {
			err = fmt.Errorf("a function result cannot carry a %s block", c.Type)
		}
		if err != nil {
			return agent.ErrorResult("the function returned an invalid result: "+err.Error(), nil)
		}
	}
	return r
}

func (t *tx) callDone(in CallDone) error {
	if err := t.want(in, agent.StateFunctionExecute); err != nil {
		return err
	}
	c, err := t.call(in, in.ID)
	if err != nil {
		return err
	}
	if t.rec.Work.Effects[in.ID].Status == StatusDone {
		return unexpected(t.rec, in, fmt.Sprintf("call %q is already done", in.ID))
	}
	if parked(t.rec, in.ID) {
		return unexpected(t.rec, in, fmt.Sprintf("call %q is parked", in.ID))
	}
	t.done(c, validResult(in.Result))
	t.settle()
	return nil
}

func (t *tx) callParked(in CallParked) error {
	if err := t.want(in, agent.StateFunctionExecute); err != nil {
		return err
	}
	c, err := t.call(in, in.ID)
	if err != nil {
		return err
	}
	if e, ok := t.rec.Work.Effects[in.ID]; ok {
		return unexpected(t.rec, in, fmt.Sprintf("call %q is already %s", in.ID, e.Status))
	}
	if parked(t.rec, in.ID) {
		return unexpected(t.rec, in, fmt.Sprintf("call %q is already parked", in.ID))
	}
	if c.Approved {
		return unexpected(t.rec, in, fmt.Sprintf("call %q was approved already", in.ID))
	}
	t.announce(c)
	t.rec.AwaitingApproval = append(t.rec.AwaitingApproval, agent.PendingApproval{
		FunctionCallID: c.ID, FunctionID: c.FunctionID, Args: c.Args, ArgsHash: in.ArgsHash, RequestedAt: t.now,
	})
	t.emit(agent.Event{Type: agent.EventApprovalRequested, FunctionCallID: c.ID, FunctionID: c.FunctionID, Args: c.Args})
	t.settle()
	return nil
}

func (t *tx) approvalResolved(in ApprovalResolved) error {
	if err := t.want(in, agent.StateFunctionExecute, agent.StateFunctionAwaitingApproval); err != nil {
		return err
	}
	switch in.Decision {
	case DecisionAllow, DecisionDeny, DecisionAborted:
	default:
		return fmt.Errorf("%w: unknown decision %q", ErrInvalidInput, in.Decision)
	}
	c, err := t.call(in, in.ID)
	if err != nil {
		return err
	}
	if !parked(t.rec, in.ID) {
		return unexpected(t.rec, in, fmt.Sprintf("call %q is not parked", in.ID))
	}
	switch in.Decision {
	case DecisionAllow:
		t.unpark(in.ID)
		c.Approved = true
		t.setState(agent.StateFunctionExecute)
	case DecisionDeny:
		t.unpark(in.ID)
		text := textDenied
		if in.Reason != "" {
			text += ": " + in.Reason
		}
		t.done(c, agent.ErrorResult(text, agent.Denial{
			Status: agent.StatusDenied, DeniedBy: agent.DeniedByUser, FunctionID: c.FunctionID, Reason: in.Reason,
		}))
		t.settle()
	case DecisionAborted:
		t.abort(in.Reason, nil)
	}
	return nil
}

// settle moves on once no call of the batch is left to run: to
// function_awaiting_approval while calls are parked, or past the batch.
func (t *tx) settle() {
	w := t.rec.Work
	var running, parkedN int
	for _, c := range w.Prepared {
		switch {
		case parked(t.rec, c.ID):
			parkedN++
		case w.Effects[c.ID].Status != StatusDone:
			running++
		}
	}
	switch {
	case running > 0:
		t.setState(agent.StateFunctionExecute)
	case parkedN > 0:
		t.setState(agent.StateFunctionAwaitingApproval)
	default:
		var terminate bool
		for _, e := range w.Effects {
			terminate = terminate || e.Result.Terminate
		}
		t.completeBatch()
		// The batch's results are in FunctionResults (and the outbox)
		// now: the effect records, which hold each result once more,
		// are done with, and a record that carries large results is
		// written with one copy less.
		t.rec.Work = nil
		switch {
		case terminate:
			t.finish(agent.StateStopped, agent.StopEnd, "", nil, nil)
		case t.maxTurnsReached():
			t.finish(agent.StateStopped, agent.StopLength, "", nil, nil)
		default:
			t.setState(agent.StateSteeringCheck)
		}
	}
}

// completeBatch appends the batch's results to the transcript in the
// model's order and emits turn_end.
func (t *tx) completeBatch() {
	w := t.rec.Work
	results := make([]agent.Message, len(w.Prepared))
	for i, c := range w.Prepared {
		e := w.Effects[c.ID]
		results[i] = e.Result.Message(c.ID, c.FunctionID, e.DoneAtMs)
	}
	t.rec.FunctionResults = results
	t.history(results...)
	t.emit(agent.Event{Type: agent.EventTurnEnd, Message: t.rec.LastAssistant, FunctionResults: results})
}

func (t *tx) steeringDrained(in SteeringDrained) error {
	if err := t.want(in, agent.StateSteeringCheck); err != nil {
		return err
	}
	for _, list := range []struct {
		name string
		msgs []agent.Message
	}{{"steering", in.Steering}, {"followups", in.Followups}} {
		for i, m := range list.msgs {
			if m.Role != agent.RoleUser {
				return fmt.Errorf("%w: %s[%d] is a %q message, not a user message", ErrInvalidInput, list.name, i, m.Role)
			}
			if err := m.Validate(); err != nil {
				return fmt.Errorf("%w: %s[%d]: %w", ErrInvalidInput, list.name, i, err)
			}
		}
	}
	t.rec.Followups = append(t.rec.Followups, in.Followups...)
	switch {
	case len(in.Steering) > 0:
		t.inject(in.Steering)
	case len(t.rec.Followups) > 0:
		t.inject(t.rec.Followups)
		t.rec.Followups = nil
	case len(t.rec.FunctionResults) > 0:
		// Continue: the model has not seen the function results yet.
	default:
		t.finish(agent.StateStopped, agent.StopEnd, "", nil, nil)
		return nil
	}
	t.startTurn()
	return nil
}

// abort ends the run with stop_reason aborted from any non-terminal state.
func (t *tx) abort(reason string, partial *agent.Message) {
	var cancel, withdraw []string
	switch t.rec.State {
	case agent.StateProvisioning:
		t.flushInput()
	case agent.StateAssistantStreaming:
		if partial != nil {
			msg := t.assistant(partial, agent.StopAborted)
			if len(msg.Content) > 0 {
				t.rec.LastAssistant = &msg
				t.history(msg)
			}
			t.emit(agent.Event{Type: agent.EventMessageComplete, Message: &msg})
		}
	case agent.StateFunctionExecute, agent.StateFunctionAwaitingApproval:
		text := textAborted
		if reason != "" {
			text += ": " + reason
		}
		cancel, withdraw = t.endCalls(func(c *Call) agent.FunctionResult {
			return agent.ErrorResult(text, agent.Denial{Status: agent.StatusAborted, FunctionID: c.FunctionID, Reason: reason})
		})
		t.rec.AwaitingApproval = nil
		t.completeBatch()
	}
	t.finish(agent.StateStopped, agent.StopAborted, reason, cancel, withdraw)
}

func (t *tx) recover(in Recover) error {
	if err := t.want(in, agent.StateFunctionExecute); err != nil {
		return err
	}
	ids := InFlight(t.rec)
	if len(ids) == 0 {
		return unexpected(t.rec, in, "no call is in flight")
	}
	for _, id := range ids {
		c, _ := t.call(in, id)
		if in.Idempotent != nil && in.Idempotent(c.FunctionID) {
			delete(t.rec.Work.Effects, id)
			continue
		}
		t.done(c, agent.ErrorResult(textInterrupted, agent.Denial{
			Status: agent.StatusInterrupted, FunctionID: c.FunctionID,
			Reason: "the harness restarted while the call was running; it may or may not have taken effect",
		}))
	}
	t.settle()
	return nil
}
