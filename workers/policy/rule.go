package policy

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// rule is one compiled rule of a policy file.
type rule struct {
	id          string
	action      Action
	glob        glob
	constraints []*constraint
	when        *condition
	reason      string
	spelled     string // the constraints and condition, for MatchedConstraint
}

// constraint is one entry of a rule's args: the value at path must equal a
// scalar and/or match an anchored regex.
type constraint struct {
	key       string   // as written: "command", "options.mode"
	path      []string // key split on '.'
	hasEquals bool
	equals    any // canonical scalar: string, bool, int64, uint64, float64
	re        *boundedRegexp
	matches   string // the regex as written
}

func (c *constraint) String() string {
	var parts []string
	if c.hasEquals {
		if s, ok := c.equals.(string); ok {
			parts = append(parts, fmt.Sprintf("args.%s equals %q", c.key, s))
		} else {
			parts = append(parts, fmt.Sprintf("args.%s equals %v", c.key, c.equals))
		}
	}
	if c.re != nil {
		parts = append(parts, fmt.Sprintf("args.%s matches %q", c.key, c.matches))
	}
	return strings.Join(parts, ", ")
}

// outcome of a constraint or condition against one call.
type outcome uint8

const (
	fails outcome = iota
	holds
	// indeterminate: the value has another type than the constraint
	// expects, or is too long for its regex to match within the regex
	// match budget, so nothing is proven either way. Allow rules treat
	// it as fails, deny and needs_approval rules as holds (fail closed).
	indeterminate
)

func (c *constraint) eval(root any, lenient bool) (outcome, string) {
	v, found, mismatch := lookup(root, c.path, lenient)
	if mismatch != kindMissing {
		return indeterminate, fmt.Sprintf("args.%s crosses %s, not an object", c.key, mismatch)
	}
	if !found || v == nil {
		return fails, ""
	}
	k := kindOf(v)
	if c.hasEquals {
		if want := kindOf(c.equals); k != want {
			return indeterminate, fmt.Sprintf("args.%s is %s, not %s", c.key, k, want)
		}
		if v != c.equals {
			return fails, ""
		}
	}
	if c.re != nil {
		s, ok := v.(string)
		if !ok {
			return indeterminate, fmt.Sprintf("args.%s is %s, not a string", c.key, k)
		}
		m, err := c.re.match(s)
		if err != nil {
			return indeterminate, fmt.Sprintf("args.%s: %v", c.key, err)
		}
		if !m {
			return fails, ""
		}
	}
	return holds, ""
}

// decide reports whether r matches the call (its glob already did) and the
// decision it makes. Allow rules need every constraint and the condition
// to hold for certain; deny and needs_approval rules match unless one of
// them certainly fails, so a type mismatch or an erroring condition can
// never let a call slip past them.
func (r *rule) decide(st *checkState) (Decision, bool) {
	lenient := r.action != Allow
	var notes []string
	for _, c := range r.constraints {
		out, note := c.eval(st.args, lenient)
		switch {
		case out == fails, out == indeterminate && !lenient:
			return Decision{}, false
		case out == indeterminate:
			notes = append(notes, note)
		}
	}
	if r.when != nil {
		ok, err := r.when.eval(st, lenient)
		switch {
		case err != nil && !lenient:
			return Decision{}, false
		case err != nil:
			notes = append(notes, "when does not evaluate: "+truncate(err.Error(), 200))
		case !ok:
			return Decision{}, false
		}
	}
	d := Decision{Decision: r.action, RuleID: r.id, MatchedConstraint: r.spelled, Reason: r.reason}
	if len(notes) > 0 {
		note := strings.Join(notes, "; ") + " (fail closed)"
		if d.Reason != "" {
			note = d.Reason + "; " + note
		}
		d.Reason = note
	}
	return d, true
}

// checkState is one check in flight: its inputs, and the CEL deadline and
// variables, made on the first condition that runs.
type checkState struct {
	ctx      context.Context
	id       string
	args     any
	timeout  time.Duration
	deadline deadlineFunc

	celCtx  context.Context
	cancel  context.CancelFunc
	vars    map[string]any // args as they are (allow rules)
	folded  map[string]any // args read without case (deny, needs_approval)
	renewed bool           // the deadline was given once more (renew)
}

// deadlineFunc makes the CEL deadline of a check: context.WithTimeout, or
// a test's stand-in.
type deadlineFunc func(context.Context, time.Duration) (context.Context, context.CancelFunc)

func (st *checkState) cel(lenient bool) (context.Context, map[string]any) {
	if st.celCtx == nil {
		st.celCtx, st.cancel = st.deadline(st.ctx, st.timeout)
	}
	if !lenient {
		if st.vars == nil {
			st.vars = map[string]any{"function_id": st.id, "args": st.args}
		}
		return st.celCtx, st.vars
	}
	if st.folded == nil {
		fa := &foldAdapter{}
		st.folded = map[string]any{"function_id": st.id, "args": fa.NativeToValue(st.args)}
	}
	return st.celCtx, st.folded
}

// renew gives the check's conditions the CEL timeout once more when it ran
// out and the caller's ctx did not: the timeout counts wall time, so an
// evaluation that only waited for a core on a loaded node can run out of
// it; a condition that is expensive is stopped by the cost limit, or runs
// out again. It reports whether it renewed (once per check).
func (st *checkState) renew() bool {
	if st.renewed || st.celCtx == nil || st.celCtx.Err() == nil || st.ctx.Err() != nil {
		return false
	}
	st.renewed = true
	st.cancel()
	st.celCtx, st.cancel = st.deadline(st.ctx, st.timeout)
	return true
}

func (st *checkState) release() {
	if st.cancel != nil {
		st.cancel()
	}
}
