package policy

import (
	"context"
	"strings"

	"github.com/iii-on-nats/iii/subjects"
)

// Action is what a rule does with a call it matches, and the decision of a
// check.
type Action string

// Actions.
const (
	Allow         Action = "allow"
	Deny          Action = "deny"
	NeedsApproval Action = "needs_approval"
)

// Rule ids of the decisions no rule of the file made. An explicit rule id
// may not take one of them.
const (
	// RuleInvalidFunctionID denies a function id that
	// subjects.ValidateFunctionID refuses (empty, too long, not UTF-8,
	// whitespace or control characters, an empty segment).
	RuleInvalidFunctionID = "invalid_function_id"
	// RuleArgsTooLarge denies args whose JSON exceeds the size limit.
	RuleArgsTooLarge = "args_too_large"
	// RuleArgsTooDeep denies args nested deeper than the depth limit.
	RuleArgsTooDeep = "args_too_deep"
	// RuleAmbiguousArgs denies args with an object holding two keys that
	// differ only in case ("path" and "Path"): a handler that matches keys
	// without case (Go's encoding/json does) could read either.
	RuleAmbiguousArgs = "ambiguous_args"
	// RuleInvalidArgs denies args that are not JSON values.
	RuleInvalidArgs = "invalid_args"
	// RuleNoPolicy denies every call checked against a nil *Policy.
	RuleNoPolicy = "no_policy"
)

var reservedIDs = map[string]bool{
	RuleInvalidFunctionID: true,
	RuleArgsTooLarge:      true,
	RuleArgsTooDeep:       true,
	RuleAmbiguousArgs:     true,
	RuleInvalidArgs:       true,
	RuleNoPolicy:          true,
}

// Decision is the outcome of a check, and the response of
// policy::check_permissions.
type Decision struct {
	// Decision is allow, deny or needs_approval.
	Decision Action `json:"decision"`
	// RuleID names the rule that decided: "rule-<index>" (0-based), the
	// rule's explicit id, or one of the Rule* constants. Empty when no rule
	// matched.
	RuleID string `json:"rule_id,omitempty"`
	// MatchedConstraint spells the args constraints and the when condition
	// of the deciding rule, when it has any.
	MatchedConstraint string `json:"matched_constraint,omitempty"`
	// Reason is the rule's reason, or says why the gate decided on its own.
	Reason string `json:"reason,omitempty"`
}

// Allowed reports whether the call may run without asking anyone.
func (d Decision) Allowed() bool { return d.Decision == Allow }

// Policy is a parsed, immutable rules file. Its methods are safe for
// concurrent use.
type Policy struct {
	rules []*rule
	o     options
}

// Len is the number of rules.
func (p *Policy) Len() int {
	if p == nil {
		return 0
	}
	return len(p.rules)
}

// RuleIDs lists the rule ids in order.
func (p *Policy) RuleIDs() []string {
	if p == nil {
		return nil
	}
	out := make([]string, len(p.rules))
	for i, r := range p.rules {
		out[i] = r.id
	}
	return out
}

// Check decides a call of functionID with args (any JSON value, as decoded
// by encoding/json or the wire codecs; nil is the empty object). See
// [CheckContext].
func (p *Policy) Check(functionID string, args any) Decision {
	return p.CheckContext(context.Background(), functionID, args)
}

// CheckContext decides a call of functionID with args. In order: an
// invalid function id is denied; args that are too large, too deep,
// ambiguous or not JSON are denied; then the first rule that matches
// decides; no match needs approval. When conditions stop with ctx (and
// with the CEL timeout); a condition that cannot finish fails closed.
func (p *Policy) CheckContext(ctx context.Context, functionID string, args any) Decision {
	if p == nil {
		return Decision{Decision: Deny, RuleID: RuleNoPolicy, Reason: "no policy is loaded"}
	}
	if err := subjects.ValidateFunctionID(functionID); err != nil {
		return Decision{Decision: Deny, RuleID: RuleInvalidFunctionID, Reason: strings.TrimPrefix(err.Error(), "subjects: ")}
	}
	root, reject := inspectArgs(args, p.o.maxArgsBytes, p.o.maxArgsDepth)
	if reject != nil {
		return *reject
	}
	st := checkState{ctx: ctx, id: functionID, args: root, timeout: p.o.celTimeout, deadline: p.o.celDeadline}
	defer st.release()
	for _, r := range p.rules {
		if !r.glob.match(functionID) {
			continue
		}
		if d, ok := r.decide(&st); ok {
			return d
		}
	}
	return Decision{Decision: NeedsApproval, Reason: "no rule matches"}
}
