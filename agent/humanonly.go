package agent

import (
	"fmt"
	"strings"
)

// HumanOnly lists the functions the chokepoint never lets a model call,
// whatever the policy file says: they change who decides (approval
// resolution and settings) or what the gate enforces, read credentials, or
// move spend ceilings. A call to one of them
// from a turn or through agent::trigger is denied (denied_by "permissions",
// rule_id [RuleHumanOnly]); humans call them directly.
var HumanOnly = []string{
	"approval::resolve",
	"approval::settings::set",
	"policy::reload",
	// Credentials: reading one hands the model a secret.
	"auth::get_token",
	"auth::set_token",
	"auth::delete_token",
	// Spend: the model must not raise or settle its own ceiling.
	"budget::create",
	"budget::delete",
	"budget::reserve",
	"budget::settle",
}

// RuleHumanOnly is the rule id of a denial of a [HumanOnly] function.
const RuleHumanOnly = "human_only"

// IsHumanOnly reports whether functionID is in [HumanOnly].
func IsHumanOnly(functionID string) bool {
	for _, f := range HumanOnly {
		if f == functionID {
			return true
		}
	}
	return false
}

// ValidatePattern checks a function id pattern of an always_allow list: a
// function name ([ValidateFunctionID] rules) in which '*' matches any run
// of characters. A lone "*" is refused: it would approve everything, which
// is what mode "full" says explicitly.
func ValidatePattern(p string) error {
	if p == "*" {
		return fmt.Errorf("%w: pattern %q matches every function; use mode \"full\" instead", ErrInvalidID, p)
	}
	if err := validName("pattern", p); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidID, err)
	}
	return nil
}

// MatchPattern reports whether functionID matches p: '*' is the only glob,
// matching any run of characters (including "::"), and the match is
// anchored at both ends.
func MatchPattern(p, functionID string) bool {
	parts := strings.Split(p, "*")
	if len(parts) == 1 {
		return p == functionID
	}
	if !strings.HasPrefix(functionID, parts[0]) {
		return false
	}
	s := functionID[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}
