package turn

import "github.com/iii-on-nats/iii/agent"

// Input is one fact the grain folds into the record with [Apply]: the
// outcome of the action [Next] asked for, or a wake-up from outside
// (approval, abort, recovery). The set of inputs is closed.
type Input interface {
	inputName() string
}

// Provisioned: provisioning (model catalog, skills, system prompt, budget
// reservation, sandbox) succeeded. Accepted in provisioning. A non-empty
// SystemPrompt is the run's assembled prompt, frozen for the run.
type Provisioned struct {
	SystemPrompt string
}

// ProvisionFailed: provisioning failed for good (unknown model, no
// credentials, ...). The run fails. Accepted in provisioning. An empty Kind
// means permanent.
type ProvisionFailed struct {
	Kind    agent.ErrorKind
	Message string
}

// BudgetExceeded: a budget reservation was refused. The run stops with
// stop_reason budget_exceeded. Accepted in provisioning and
// assistant_streaming (a reservation before a model call).
type BudgetExceeded struct {
	Message string
}

// ModelDone: the provider stream ended with done. Accepted in
// assistant_streaming. A message that is not a valid assistant message
// fails the run (kind permanent) rather than wedging the session.
type ModelDone struct {
	Message agent.Message
}

// ModelFailed: the provider stream ended with error, after whatever retries
// the grain does for retryable kinds (rate limits, transient errors,
// refreshed credentials, a compaction after a context overflow). The run
// fails. Partial, if set, is what was streamed before the failure.
// Accepted in assistant_streaming. An empty Kind means permanent.
type ModelFailed struct {
	Kind    agent.ErrorKind
	Message string
	Partial *agent.Message
}

// CallsStarted: the grain is about to dispatch these calls (the policy
// allowed them, before-hooks ran). It must write the record with this
// input applied before dispatching: that is the "started" effect record
// recovery relies on. Accepted in function_execute for calls that are
// prepared, not parked and have no effect record.
type CallsStarted struct {
	IDs []string
}

// CallDone: a call produced its result. Also used for a call the grain did
// not run: a policy denial, a failed before-hook, a timeout. Accepted in
// function_execute for a prepared call that is not parked and not done.
// A result with a malformed content block is replaced by an error result.
type CallDone struct {
	ID     string
	Result agent.FunctionResult
}

// CallParked: the policy answered needs_approval for a call; the grain
// keeps running the rest of the batch. ArgsHash is the hash the approval
// gate binds the decision to; the function id and arguments are the
// prepared call's. Accepted in function_execute for a call that has no
// effect record and was not approved already.
type CallParked struct {
	ID       string
	ArgsHash string
}

// Decision is a human's answer to a parked call.
type Decision string

// Decisions of approval::resolve.
const (
	DecisionAllow   Decision = "allow"
	DecisionDeny    Decision = "deny"
	DecisionAborted Decision = "aborted"
)

// ApprovalResolved: a human decided on a parked call. allow makes the call
// runnable again (marked approved); deny records a denial result
// (denied_by "user"); aborted aborts the whole run, like [Abort]. Accepted
// in function_execute and function_awaiting_approval for a parked call.
type ApprovalResolved struct {
	ID       string
	Decision Decision
	Reason   string
}

// SteeringDrained: the grain drained the session's inboxes at a steering
// check. Steering wins over follow-ups: when both are present, the
// follow-ups are kept in the record for a later check. Every message must
// be a valid user message. Accepted in steering_check.
type SteeringDrained struct {
	Steering  []agent.Message
	Followups []agent.Message
}

// Abort: run::abort, or the step's owner giving up. Accepted in every
// non-terminal state; the run stops with stop_reason aborted. Partial, if
// set while streaming, is what the model streamed so far: it is completed
// with stop_reason aborted (function call blocks dropped) and, if it has
// any content, appended to the transcript.
type Abort struct {
	Reason  string
	Partial *agent.Message
}

// Fail: the grain cannot go on with the run, because the record of its
// next checkpoint would not fit the store (an answer or results too large
// for one message). Accepted in every non-terminal state. The run fails
// (kind permanent) with Message, and the record keeps only what a finished
// run needs: the answer, the calls and their results, the run's input and
// whatever the outbox held are dropped (what was delivered of them stays in
// the transcript and the events). As in an abort, every call not done
// ends with an error result (its function_execution_end), calls started
// are cancelled and parked ones withdrawn; then an assistant message with
// stop_reason error is completed, and agent_end.
type Fail struct {
	Message string
	// Lean leaves out the function_execution_end of each call not done:
	// for a failure whose record would otherwise be too large itself (a
	// batch of thousands of calls). Started calls are still cancelled and
	// parked ones withdrawn (the Finish effect names them), and the calls
	// whose function_execution_start went out still get their end, built
	// at delivery from their ids ([EffectEndCalls]); calls never
	// announced get neither.
	Lean bool
}

// Recover: a fresh activation found calls started by an earlier one that
// died ([InFlight]). A call whose function is idempotent goes back to not
// started and runs again; any other gets the error result "interrupted:
// outcome unknown". A nil Idempotent treats every function as not
// idempotent. Accepted in function_execute while some call is started.
type Recover struct {
	Idempotent func(functionID string) bool
}

func (Provisioned) inputName() string      { return "Provisioned" }
func (ProvisionFailed) inputName() string  { return "ProvisionFailed" }
func (BudgetExceeded) inputName() string   { return "BudgetExceeded" }
func (ModelDone) inputName() string        { return "ModelDone" }
func (ModelFailed) inputName() string      { return "ModelFailed" }
func (CallsStarted) inputName() string     { return "CallsStarted" }
func (CallDone) inputName() string         { return "CallDone" }
func (CallParked) inputName() string       { return "CallParked" }
func (ApprovalResolved) inputName() string { return "ApprovalResolved" }
func (SteeringDrained) inputName() string  { return "SteeringDrained" }
func (Abort) inputName() string            { return "Abort" }
func (Fail) inputName() string             { return "Fail" }
func (Recover) inputName() string          { return "Recover" }

// InputName returns the name of in's type ("CallDone"), for logs and
// metrics; "" for nil.
func InputName(in Input) string {
	if in == nil {
		return ""
	}
	return in.inputName()
}
