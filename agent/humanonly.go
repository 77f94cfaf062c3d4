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
// function name ([subjects.ValidateFunctionID] rules) in which '*' matches
// any run of characters. A pattern that matches every function id — '*'
// alone or repeated ("*", "**") — is refused: it would approve everything,
// which is what mode "full" says explicitly. A pattern with any other
// character misses some id and is kept as it is: "*::*" misses the ids
// without "::", though it approves every namespaced function, as a human
// who writes it means.
func ValidatePattern(p string) error {
	if p != "" && strings.Trim(p, "*") == "" {
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
	// Walks p's '*'-separated parts without splitting it (this runs for
	// every pattern at every call of a run).
	first, rest, glob := strings.Cut(p, "*")
	if !glob {
		return p == functionID
	}
	if !strings.HasPrefix(functionID, first) {
		return false
	}
	s := functionID[len(first):]
	for {
		mid, more, ok := strings.Cut(rest, "*")
		if !ok {
			// mid is the last part: anchored at the end.
			return len(s) >= len(mid) && strings.HasSuffix(s, mid)
		}
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s, rest = s[i+len(mid):], more
	}
}
