package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/agent/redact"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/hook"
	"github.com/iii-on-nats/iii/engine/wire"
)

// The chokepoint's bus contracts.
const (
	// policyFunction answers whether a call may run (SPEC §4 policy).
	policyFunction = "policy::check_permissions"
	// policyTimeout is the caller's budget for a policy check: no answer
	// in time denies the call (fail closed).
	policyTimeout = 5 * time.Second
	// excerptBytes bounds a denial's args_excerpt.
	excerptBytes = 512
)

// Policy decisions (policy::check_permissions).
const (
	decisionAllow         = "allow"
	decisionDeny          = "deny"
	decisionNeedsApproval = "needs_approval"
)

// ruleNeedsApproval is the rule id of a needs_approval answer turned into
// a denial where no human can be asked (agent::trigger, a rewritten call).
const ruleNeedsApproval = "needs_approval"

// policyRequest and policyDecision are policy::check_permissions' wire
// shapes.
type policyRequest struct {
	FunctionID string         `json:"function_id"`
	Args       map[string]any `json:"args"`
}

type policyDecision struct {
	Decision          string `json:"decision"`
	RuleID            string `json:"rule_id,omitempty"`
	MatchedConstraint string `json:"matched_constraint,omitempty"`
	Reason            string `json:"reason,omitempty"`
}

// functions is the chokepoint every function call of a turn, and every
// agent::trigger, goes through: human-only list → policy (unless a human
// approved the call) → the session's approval settings → before-hooks →
// (the grain records the call started) → the call → after-hooks.
type functions struct {
	e        *engine.Engine
	catalog  *catalogCache
	settings *sessionKV // nil: every session is manual
	logger   *slog.Logger
	// hookTimeout bounds one hook round (subscribers that answer later are
	// not heard); hookQuiescence is the wait for more replies after one.
	hookTimeout, hookQuiescence time.Duration
	metrics                     *metrics
	// maxResult bounds a call's result ([agent.FunctionResult.Capped]).
	maxResult int
}

// Gate decides whether c may run now; it fails closed.
func (f functions) Gate(ctx context.Context, sid string, c turn.Call) session.Verdict {
	ctx = engine.WithSession(ctx, sid, "")
	if agent.IsHumanOnly(c.FunctionID) {
		return deny(c, agent.DeniedByPermissions, agent.RuleHumanOnly, c.FunctionID+" is human-only: a model can never call it")
	}
	if !c.Approved {
		d, err := f.check(ctx, c.FunctionID, c.Args)
		if err != nil {
			return deny(c, agent.DeniedByGateUnavailable, "", "the policy gate did not answer: "+err.Error())
		}
		switch d.Decision {
		case decisionAllow:
		case decisionDeny:
			return deny(c, agent.DeniedByPermissions, d.RuleID, policyReason(d))
		case decisionNeedsApproval:
			if !f.preApproved(ctx, sid, c.FunctionID) {
				hash, err := agent.ArgsHash(c.FunctionID, c.Args)
				if err != nil {
					return deny(c, agent.DeniedByPermissions, ruleNeedsApproval, err.Error())
				}
				return session.Verdict{Kind: session.VerdictPark, ArgsHash: hash}
			}
		default:
			return deny(c, agent.DeniedByGateUnavailable, d.RuleID, fmt.Sprintf("the policy gate answered an unknown decision %q", d.Decision))
		}
	}
	return f.beforeHooks(ctx, sid, c)
}

// beforeHooks runs agent::before_function_call: a block denies, a rewrite
// of the arguments is checked by the policy again, a publish failure or a
// round that overflowed its bounds (hook.Result.Overflow) denies.
func (f functions) beforeHooks(ctx context.Context, sid string, c turn.Call) session.Verdict {
	res, err := hook.PublishCollect(ctx, f.e.Conn(), hook.Request{
		Topic:        hook.TopicBeforeCall,
		Payload:      hook.BeforeCall{SessionID: sid, FunctionCallID: c.ID, FunctionID: c.FunctionID, Args: args(c.Args)},
		MergeRule:    hook.FirstBlockWins,
		TimeoutMs:    int(f.hookTimeout / time.Millisecond),
		QuiescenceMs: max(int(f.hookQuiescence/time.Millisecond), 1),
	}, hook.WithInjector(f.e.Inject))
	if err != nil {
		return deny(c, agent.DeniedByGateUnavailable, "", "the before-call hooks could not be asked: "+err.Error())
	}
	if res.Overflow {
		// The replies not read may hold a block.
		return deny(c, agent.DeniedByGateUnavailable, "", fmt.Sprintf("the before-call hooks answered more than %d replies or %d bytes; the rest were not read", hook.MaxReplies, hook.MaxReplyBytes))
	}
	switch block := res.Merged["block"].(type) {
	case nil: // no hook blocks
	case bool:
		if block {
			reason, _ := res.Merged["reason"].(string)
			if reason == "" {
				reason = "blocked by a before-call hook"
			}
			return deny(c, agent.DeniedByHook, "", reason)
		}
	default:
		// {"block":"true"} may have meant a block: fail closed, as a
		// round whose replies were not all read does.
		return deny(c, agent.DeniedByHook, "", fmt.Sprintf("a before-call hook answered block as a %T, not a boolean: taken as a block", block))
	}
	raw, ok := res.Merged["args"]
	if !ok {
		return session.Verdict{Kind: session.VerdictRun, Call: c}
	}
	rewritten, ok := raw.(map[string]any)
	if !ok {
		return deny(c, agent.DeniedByHook, "", fmt.Sprintf("a before-call hook rewrote the arguments into a %T, not an object", raw))
	}
	before, err1 := agent.ArgsHash(c.FunctionID, c.Args)
	after, err2 := agent.ArgsHash(c.FunctionID, rewritten)
	if err := errors.Join(err1, err2); err != nil {
		return deny(c, agent.DeniedByHook, "", err.Error())
	}
	if before == after {
		return session.Verdict{Kind: session.VerdictRun, Call: c}
	}
	if c.Approved {
		// The approval is bound to the arguments the human saw.
		return deny(c, agent.DeniedByHook, "", "a before-call hook changed the arguments of a call after a human approved it")
	}
	d, err := f.check(ctx, c.FunctionID, rewritten)
	rc := c
	rc.Args = rewritten
	switch {
	case err != nil:
		return deny(rc, agent.DeniedByGateUnavailable, "", "the policy gate did not answer on rewritten arguments: "+err.Error())
	case d.Decision == decisionAllow:
		return session.Verdict{Kind: session.VerdictRun, Call: rc}
	case d.Decision == decisionDeny:
		return deny(rc, agent.DeniedByPermissions, d.RuleID, "arguments rewritten by a before-call hook: "+policyReason(d))
	default:
		return deny(rc, agent.DeniedByPermissions, ruleNeedsApproval, "a before-call hook rewrote the arguments into a call that needs approval")
	}
}

// check asks the policy, within policyTimeout.
func (f functions) check(ctx context.Context, fn string, a map[string]any) (policyDecision, error) {
	ctx, cancel := context.WithTimeout(ctx, policyTimeout)
	defer cancel()
	var d policyDecision
	if err := f.e.Trigger(ctx, policyFunction, policyRequest{FunctionID: fn, Args: args(a)}, &d); err != nil {
		f.metrics.policyDecision(ctx, "unavailable")
		return policyDecision{}, err
	}
	f.metrics.policyDecision(ctx, d.Decision)
	return d, nil
}

// preApproved reports whether the session's approval settings let a call
// the policy wants approved run without asking (agent.ApprovalMode).
func (f functions) preApproved(ctx context.Context, sid, fn string) bool {
	st := f.sessionSettings(ctx, sid)
	for _, p := range st.AlwaysAllow {
		if agent.MatchPattern(p, fn) {
			return true
		}
	}
	switch st.Mode {
	case agent.ApprovalFull:
		return true
	case agent.ApprovalAuto:
		info, ok := f.catalog.current(ctx, fn)
		return ok && info.Idempotent
	default:
		return false
	}
}

// sessionSettings reads sid's approval settings; anything unreadable is
// the default, manual (the safe side).
func (f functions) sessionSettings(ctx context.Context, sid string) agent.ApprovalSettings {
	st := agent.ApprovalSettings{SessionID: sid, Mode: agent.ApprovalManual}
	if f.settings == nil {
		return st
	}
	kv, err := f.settings.of(ctx, sid)
	if err != nil {
		f.logger.WarnContext(ctx, "approval settings unreadable; treating the session as manual", "session_id", sid, "error", err)
		return st
	}
	ent, err := kv.Get(ctx, sid)
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			f.logger.WarnContext(ctx, "approval settings unreadable; treating the session as manual", "session_id", sid, "error", err)
		}
		return st
	}
	var got agent.ApprovalSettings
	if err := json.Unmarshal(ent.Value(), &got); err != nil || !got.Mode.Valid() {
		f.logger.WarnContext(ctx, "approval settings do not decode; treating the session as manual", "session_id", sid, "error", err)
		return st
	}
	// A pattern that no longer validates ("**", stored before such
	// patterns were refused) pre-approves nothing, as approval::settings::get
	// leaves it out.
	got.AlwaysAllow = slices.DeleteFunc(got.AlwaysAllow, func(p string) bool { return agent.ValidatePattern(p) != nil })
	return got
}

// Call runs a call that passed the gate, then the after-call hooks, which
// may replace (redact) its result, and bounds the result (maxResult, shared
// by the calls of one assistant message, each keeping at least
// minBatchResult): the model, the events and the transcript get the same,
// cut, result.
func (f functions) Call(ctx context.Context, sid string, c turn.Call) agent.FunctionResult {
	ctx = engine.WithSession(ctx, sid, "")
	// A function that declares a time limit is not waited for longer (a
	// call whose worker died with it is never answered): its limit and a
	// second for the bus.
	if info, ok := f.catalog.lookup(ctx, c.FunctionID); ok && info.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(info.TimeoutMs)*time.Millisecond+time.Second)
		defer cancel()
	}
	var reply engine.Raw
	start := time.Now()
	var res agent.FunctionResult
	if err := f.e.Trigger(ctx, c.FunctionID, args(c.Args), &reply); err != nil {
		we := wire.From(err)
		text, details := we.Error(), map[string]any{"code": string(we.Code), "duration_ms": time.Since(start).Milliseconds()}
		if we.Code == wire.CodeTimeout {
			// No answer in time is not "it did not run": the function may
			// have run and its reply been lost (its node died, the bus
			// dropped it). Say so as a crash's recovery does, so that a
			// model does not take a timeout of a non-idempotent call as
			// safe to repeat.
			text = agent.InterruptedText + " (" + text + ")"
			details["outcome"] = "unknown"
		}
		res = agent.FunctionResult{
			Content: []agent.Content{{Type: agent.ContentText, Text: text}},
			Details: details,
			IsError: true,
		}
	} else {
		res = toResult(f.e.Codec(), reply)
	}
	limit := f.maxResult
	if c.Batch > 1 {
		// The batch's results share the bound: the record holds them all.
		limit = max(limit/c.Batch, min(minBatchResult, limit))
	}
	// Capped before the after-call hooks too: they see the result the
	// model will see, and a whole one near the max payload, with the
	// call's arguments, made a hook message too large to publish (the
	// round was skipped, a redacting hook's redaction with it).
	res = f.capResult(ctx, sid, c, res, limit)
	if after, replaced := f.afterHooks(ctx, sid, c, res); replaced {
		return f.capResult(ctx, sid, c, after, limit)
	}
	return res
}

// capResult bounds res at limit bytes ([agent.FunctionResult.Capped]).
func (f functions) capResult(ctx context.Context, sid string, c turn.Call, res agent.FunctionResult, limit int) agent.FunctionResult {
	if capped, cut := res.Capped(limit); cut {
		f.logger.InfoContext(ctx, "function result truncated", "session_id", sid, "function_id", c.FunctionID, "bytes", res.Size(), "limit", limit)
		return capped
	}
	return res
}

// minBatchResult is the least a result of a large batch may keep.
const minBatchResult = 2 << 10

// afterHooks asks the after-call hooks about res; replaced says that one
// answered another result.
func (f functions) afterHooks(ctx context.Context, sid string, c turn.Call, res agent.FunctionResult) (agent.FunctionResult, bool) {
	out, err := hook.PublishCollect(ctx, f.e.Conn(), hook.Request{
		Topic:        hook.TopicAfterCall,
		Payload:      hook.AfterCall{SessionID: sid, FunctionCallID: c.ID, FunctionID: c.FunctionID, Args: args(c.Args), Result: res},
		MergeRule:    hook.FieldMerge,
		TimeoutMs:    int(f.hookTimeout / time.Millisecond),
		QuiescenceMs: max(int(f.hookQuiescence/time.Millisecond), 1),
	}, hook.WithInjector(f.e.Inject))
	if err != nil {
		// The call ran: its result stands. Say so loudly.
		f.logger.WarnContext(ctx, "after-call hooks could not be asked", "session_id", sid, "function_id", c.FunctionID, "error", err)
		return res, false
	}
	if out.Overflow {
		// A partial round is not acted on, as one that failed to publish.
		f.logger.WarnContext(ctx, "after-call hooks answered too many replies; they are ignored", "session_id", sid, "function_id", c.FunctionID, "max_replies", hook.MaxReplies, "max_bytes", hook.MaxReplyBytes)
		return res, false
	}
	raw, ok := out.Merged["result"]
	if !ok {
		return res, false
	}
	var replaced agent.FunctionResult
	b, err := json.Marshal(raw)
	if err == nil {
		err = json.Unmarshal(b, &replaced)
	}
	if err != nil || len(replaced.Content) == 0 {
		f.logger.WarnContext(ctx, "an after-call hook answered a result that is not a FunctionResult; it is ignored", "session_id", sid, "function_id", c.FunctionID, "error", err)
		return res, false
	}
	return replaced, true
}

// deny is the verdict for a call that does not run, with the SPEC §5
// envelope; the arguments are excerpted with secrets redacted.
func deny(c turn.Call, by, rule, reason string) session.Verdict {
	d := agent.Denial{
		Status:     agent.StatusDenied,
		DeniedBy:   by,
		FunctionID: c.FunctionID,
		RuleID:     rule,
		Reason:     reason,
	}
	if len(c.Args) > 0 {
		d.ArgsExcerpt = redact.Excerpt(c.Args, excerptBytes)
	}
	return session.Verdict{Kind: session.VerdictDeny, Result: agent.ErrorResult(fmt.Sprintf("denied (%s): %s", by, reason), d)}
}

func policyReason(d policyDecision) string {
	r := d.Reason
	if r == "" {
		r = "denied by policy rule " + d.RuleID
	}
	if d.MatchedConstraint != "" {
		r += " (" + d.MatchedConstraint + ")"
	}
	return r
}

// args never sends null arguments.
func args(a map[string]any) map[string]any {
	if a == nil {
		return map[string]any{}
	}
	return a
}
