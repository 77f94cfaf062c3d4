package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/nats-io/nuid"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// SessionRequest names a session.
type SessionRequest struct {
	SessionID string `json:"session_id"`
}

// Validate checks the session id.
func (r SessionRequest) Validate() error { return agent.ValidateSessionID(r.SessionID) }

// AbortResult is run::abort's response.
type AbortResult struct {
	SessionID string          `json:"session_id"`
	Aborted   bool            `json:"aborted"`
	State     agent.TurnState `json:"state"`
}

// HarnessTrigger is harness::trigger's request.
type HarnessTrigger struct {
	SessionID string         `json:"session_id,omitempty"`
	MessageID string         `json:"message_id,omitempty"`
	Payload   agent.RunStart `json:"payload"`
}

// HarnessResult is harness::trigger's response.
type HarnessResult struct {
	StatusCode int            `json:"status_code"`
	Body       RunStartResult `json:"body"`
}

// AgentTrigger is agent::trigger's request: one function call through the
// same chokepoint as the model's calls.
type AgentTrigger struct {
	SessionID string         `json:"session_id"`
	Function  string         `json:"function"`
	Payload   map[string]any `json:"payload"`
}

// Validate checks the request.
func (r AgentTrigger) Validate() error {
	if err := agent.ValidateSessionID(r.SessionID); err != nil {
		return err
	}
	if r.Function == "" {
		return errors.New("function is required")
	}
	return nil
}

// InboxPushResult is session::inbox_push's response.
type InboxPushResult struct {
	Queued int `json:"queued"`
}

// InboxDrainResult is session::inbox_drain's response.
type InboxDrainResult struct {
	Items []agent.Message `json:"items"`
}

func (o *Orchestrator) register() error {
	w, err := o.e.Worker("orchestrator", engine.WithDescription("iii turn loop: runs, aborts, turn state, session inbox"))
	if err != nil {
		return err
	}
	fns := []engine.Function{
		{
			ID:            "run::start",
			Description:   "Start a run on a session: persist the request, seed the turn record, enqueue the first step. Returns at once.",
			RequestSchema: runStartSchema,
			Handler: engine.Typed(func(ctx context.Context, rs agent.RunStart) (RunStartResult, error) {
				// The run's trace carries its own session (and message)
				// in its baggage, not its caller's: a run started from
				// a function call of another session kept that
				// session's ids on every span of the run. A caller
				// without session baggage adds none (the spans take the
				// ids from the payloads; baggage on every hop of every
				// turn cost ≈ 5 % of a turn's CPU).
				if sid, _ := engine.SessionFromContext(ctx); sid != "" && sid != rs.SessionID {
					ctx = engine.WithSession(ctx, rs.SessionID, rs.MessageID)
				}
				return o.runStart(ctx, rs)
			}),
		},
		{
			ID:            "run::abort",
			Description:   "Abort the session's running turn in any state (streaming, executing functions, parked).",
			RequestSchema: sessionSchema,
			Handler: engine.Typed(func(ctx context.Context, r SessionRequest) (AbortResult, error) {
				// A session homed in a region with no stores here is
				// not_found, as for run::start, before a grain is asked.
				if _, err := o.turns.of(ctx, r.SessionID); err != nil {
					return AbortResult{}, err
				}
				res, err := o.Host().Abort(ctx, r.SessionID, "aborted by run::abort")
				if err != nil {
					return AbortResult{}, recordErr(err, "")
				}
				return AbortResult{SessionID: r.SessionID, Aborted: res.Aborted, State: agent.TurnState(res.State)}, nil
			}),
		},
		{
			ID:            "turn::get_state",
			Description:   "The session's turn state (state, step, turn count, pending approvals), or null.",
			RequestSchema: sessionSchema,
			Idempotent:    true,
			Handler: engine.Typed(func(ctx context.Context, r SessionRequest) (*agent.TurnView, error) {
				if _, err := o.turns.of(ctx, r.SessionID); err != nil {
					return nil, err // a region with no stores here: not_found
				}
				rec, _, err := o.store().Load(ctx, r.SessionID)
				if errors.Is(err, session.ErrNoRecord) {
					return nil, nil
				}
				if err != nil {
					return nil, recordErr(err, "")
				}
				v := turn.View(rec)
				return &v, nil
			}),
		},
		{
			ID:            "harness::trigger",
			Description:   "Entry point: seeds trace baggage (iii.session.id, iii.message.id) and starts a run; status_code 409 when the session is busy.",
			RequestSchema: harnessTriggerSchema,
			Handler: engine.Typed(func(ctx context.Context, r HarnessTrigger) (HarnessResult, error) {
				rs := r.Payload
				// The outer ids fill the payload's; two that differ are
				// ambiguous (which session runs, which message is
				// traced), so they are refused rather than one dropped.
				if r.SessionID != "" && rs.SessionID != "" && r.SessionID != rs.SessionID {
					return HarnessResult{}, wire.Errorf(wire.CodeInvalidPayload, "session_id and payload.session_id differ: give one, or the same in both")
				}
				if r.MessageID != "" && rs.MessageID != "" && r.MessageID != rs.MessageID {
					return HarnessResult{}, wire.Errorf(wire.CodeInvalidPayload, "message_id and payload.message_id differ: give one, or the same in both")
				}
				if rs.SessionID == "" {
					rs.SessionID = r.SessionID
				}
				if rs.SessionID == "" {
					rs.SessionID = newSessionID(rs.IdempotencyKey)
				}
				if rs.MessageID == "" {
					rs.MessageID = r.MessageID
				}
				if err := rs.Validate(); err != nil {
					return HarnessResult{}, wire.Wrap(wire.CodeInvalidPayload, err, "")
				}
				ctx = engine.WithSession(ctx, rs.SessionID, rs.MessageID)
				var res RunStartResult
				if err := o.e.Trigger(ctx, "run::start", rs, &res); err != nil {
					return HarnessResult{}, err
				}
				code := 200
				if !res.Started {
					code = 409
				}
				return HarnessResult{StatusCode: code, Body: res}, nil
			}),
		},
		{
			ID:            "agent::trigger",
			Description:   "Call a function through the same chokepoint the model's calls go through; returns a FunctionResult.",
			RequestSchema: agentTriggerSchema,
			Handler: engine.Typed(func(ctx context.Context, r AgentTrigger) (agent.FunctionResult, error) {
				return o.AgentTrigger(ctx, r.SessionID, r.Function, r.Payload), nil
			}),
		},
		{
			ID:            "session::inbox_push",
			Description:   "Queue a user message for a running session: name steering (read at the next steering check) or followup (after the run would end).",
			RequestSchema: inboxPushSchema,
			Handler: engine.Typed(func(ctx context.Context, r InboxPushRequest) (InboxPushResult, error) {
				if r.Item.Timestamp == 0 {
					r.Item.Timestamp = time.Now().UnixMilli()
				}
				n, err := o.inbox.push(ctx, r.SessionID, r.Name, r.Item)
				return InboxPushResult{Queued: n}, err
			}),
		},
		{
			ID:            "session::inbox_drain",
			Description:   "Remove and return every item of a session inbox (steering or followup).",
			RequestSchema: inboxDrainSchema,
			Handler: engine.Typed(func(ctx context.Context, r InboxDrainRequest) (InboxDrainResult, error) {
				items, err := o.inbox.drain(ctx, r.SessionID, r.Name)
				if items == nil {
					items = []agent.Message{}
				}
				return InboxDrainResult{Items: items}, err
			}),
		},
	}
	for _, fn := range fns {
		if err := w.Register(fn); err != nil {
			return err
		}
	}
	return nil
}

const sessionSchema = `{"type":"object","properties":{"session_id":` + subjects.SessionIDSchema + `},"required":["session_id"]}`

const runStartSchema = `{"type":"object","required":["session_id","provider","model","messages"],"properties":` + runStartProperties + `}`

const runStartProperties = `{"session_id":` + subjects.SessionIDSchema + `,"message_id":{"type":"string"},` +
	`"provider":{"type":"string"},"model":{"type":"string"},"mode":{"enum":["plan","ask","agent"]},` +
	`"messages":{"type":"array","minItems":1},"max_turns":{"type":"integer","minimum":0},"system_prompt":{"type":"string"},` +
	`"workspace_id":{"type":"string"},"agent_id":{"type":"string"},"idempotency_key":{"type":"string"}}`

// harnessTriggerSchema: the run's session id may be given outside the
// payload, or left out for a fresh one.
const harnessTriggerSchema = `{"type":"object","required":["payload"],"properties":{` +
	`"session_id":` + subjects.SessionIDSchema + `,"message_id":{"type":"string"},` +
	`"payload":{"type":"object","required":["provider","model","messages"],"properties":` + runStartProperties + `}}}`

const agentTriggerSchema = `{"type":"object","required":["session_id","function"],"properties":{` +
	`"session_id":` + subjects.SessionIDSchema + `,"function":{"type":"string","minLength":1},"payload":{"type":"object"}}}`

const inboxNameSchema = `{"enum":["` + InboxSteering + `","` + InboxFollowup + `"]}`

const inboxPushSchema = `{"type":"object","required":["session_id","name","item"],"properties":{` +
	`"session_id":` + subjects.SessionIDSchema + `,"name":` + inboxNameSchema + `,"item":{"type":"object","description":"a user message"}}}`

const inboxDrainSchema = `{"type":"object","required":["session_id","name"],"properties":{` +
	`"session_id":` + subjects.SessionIDSchema + `,"name":` + inboxNameSchema + `}}`

// AgentTrigger runs one call of fn with args for session sid through the
// chokepoint outside a turn: what agent::trigger does, in process (the
// bench measures the chokepoint with it). A call that needs approval is not
// run: there is no turn to park it in, so it is denied saying so (add an
// allow rule, an always_allow pattern, or make the call from a turn).
func (o *Orchestrator) AgentTrigger(ctx context.Context, sid, fn string, args map[string]any) agent.FunctionResult {
	c := turn.Call{ID: "agent_" + nuid.Next(), FunctionID: fn, Args: args}
	v := o.fns.Gate(ctx, sid, c)
	switch v.Kind {
	case session.VerdictDeny:
		return v.Result
	case session.VerdictPark:
		return deny(c, agent.DeniedByPermissions, ruleNeedsApproval,
			"the call needs a human's approval and agent::trigger does not wait for one; allow it in the policy or the session's always_allow, or make it from a turn").Result
	default:
		return o.fns.Call(ctx, sid, v.Call)
	}
}

// newSessionID names the session of a harness::trigger that gives none:
// fresh ("s_" and a nuid), or, with an idempotency key, derived from the
// key ("s_k" and 24 hex digits of its SHA-256), so a retry of the trigger
// reaches the same session, where run::start recognises the key. A fresh
// id each time started the run again in a new session at every retry.
func newSessionID(idempotencyKey string) string {
	if idempotencyKey == "" {
		return "s_" + nuid.Next()
	}
	h := sha256.Sum256([]byte("harness::trigger\x00" + idempotencyKey))
	return "s_k" + hex.EncodeToString(h[:12])
}
