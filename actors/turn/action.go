package turn

import "github.com/iii-on-nats/iii/agent"

// ActionKind names what the grain must do next for a record.
type ActionKind string

// Actions of [Next].
const (
	// ActionNone: the run is over (stopped or failed). Passivate.
	ActionNone ActionKind = "none"
	// ActionDeliver: perform the effects in rec.Outbox, then [Delivered].
	ActionDeliver ActionKind = "deliver"
	// ActionProvision: resolve the model, skills, system prompt and budget
	// reservation; answer [Provisioned], [ProvisionFailed] or
	// [BudgetExceeded].
	ActionProvision ActionKind = "provision"
	// ActionStreamModel: reserve budget, call the provider with the
	// transcript and stream deltas as message_update events; answer
	// [ModelDone], [ModelFailed] or [BudgetExceeded].
	ActionStreamModel ActionKind = "stream_model"
	// ActionExecuteCalls: for each of Action.Calls (in order; run them in
	// parallel if you like): policy check unless Approved (deny →
	// [CallDone] with a denial, needs_approval → [CallParked]), before
	// hooks, [CallsStarted] (written before dispatch), trigger, after
	// hooks, [CallDone].
	ActionExecuteCalls ActionKind = "execute_calls"
	// ActionWait: calls are in flight; wait for their [CallDone].
	ActionWait ActionKind = "wait"
	// ActionPark: only parked calls are left; nothing to do until an
	// [ApprovalResolved] or an [Abort]. Checkpoint and ack the step.
	ActionPark ActionKind = "park"
	// ActionCheckSteering: drain the steering inbox and the follow-up
	// inbox; answer [SteeringDrained].
	ActionCheckSteering ActionKind = "check_steering"
)

// Action is what the grain must do next. Calls is set for
// [ActionExecuteCalls] only: the calls that are neither started, done nor
// parked, in the model's order.
type Action struct {
	Kind  ActionKind
	Calls []Call
}

// Next says what the grain must do now for rec. It is pure and cheap. A
// record with undelivered effects asks for delivery first.
func Next(rec Record) Action {
	if len(rec.Outbox) > 0 {
		return Action{Kind: ActionDeliver}
	}
	switch rec.State {
	case agent.StateProvisioning:
		return Action{Kind: ActionProvision}
	case agent.StateAssistantStreaming:
		return Action{Kind: ActionStreamModel}
	case agent.StateFunctionExecute:
		if rec.Work == nil {
			return Action{Kind: ActionNone}
		}
		var calls []Call
		for _, c := range rec.Work.Prepared {
			if _, ok := rec.Work.Effects[c.ID]; ok || parked(rec, c.ID) {
				continue
			}
			calls = append(calls, c)
		}
		if len(calls) == 0 {
			return Action{Kind: ActionWait}
		}
		return Action{Kind: ActionExecuteCalls, Calls: calls}
	case agent.StateFunctionAwaitingApproval:
		return Action{Kind: ActionPark}
	case agent.StateSteeringCheck:
		return Action{Kind: ActionCheckSteering}
	default:
		return Action{Kind: ActionNone}
	}
}

func parked(rec Record, id string) bool {
	for _, p := range rec.AwaitingApproval {
		if p.FunctionCallID == id {
			return true
		}
	}
	return false
}
