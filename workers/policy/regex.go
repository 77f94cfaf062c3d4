package policy

import (
	"fmt"
	"regexp"
	"regexp/syntax"

	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
)

// A regex costs memory and time in proportion to its program: compiling
// it builds one instruction per step, and matching walks them for each
// byte of input. The program can be far larger than the pattern: a bounded
// repeat is written out, so `.{1000}` is a thousand instructions in six
// bytes, and a 4 KiB pattern of them compiles to 140 MiB in a second. So
// every pattern is sized before it is compiled, from its syntax tree:
// each pattern against the regex program limit, and a policy's patterns
// (args matches, and CEL matches with a constant pattern, which compile
// when the policy loads) against regexTotalFactor times it together.

// regexTotalFactor times the regex program limit bounds the programs of
// all the patterns of one policy.
const regexTotalFactor = 10

// regexSize estimates the instructions of the program pattern compiles to
// without compiling it, as regexp/syntax does when it checks a pattern's
// size: a repeat counts its copies. It errors when pattern does not parse.
func regexSize(pattern string) (int64, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, err
	}
	return progSize(re), nil
}

// progSize follows regexp/syntax's calcSize. The parser bounds the nesting
// (1000 levels) and the product of nested repeats (1000), so the count of
// a pattern parsed from n bytes stays far below overflow.
func progSize(re *syntax.Regexp) int64 {
	var n int64
	switch re.Op {
	case syntax.OpLiteral:
		n = int64(len(re.Rune))
	case syntax.OpCapture, syntax.OpStar:
		n = 2 + progSize(re.Sub[0])
	case syntax.OpPlus, syntax.OpQuest:
		n = 1 + progSize(re.Sub[0])
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			n += progSize(sub)
		}
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			n += progSize(sub)
		}
		n += int64(len(re.Sub)) - 1
	case syntax.OpRepeat:
		sub := progSize(re.Sub[0])
		switch {
		case re.Max == -1 && re.Min == 0:
			n = 2 + sub // x*
		case re.Max == -1:
			n = 1 + int64(re.Min)*sub // xxx+
		default:
			n = int64(re.Max)*sub + int64(re.Max-re.Min) // xx(x(x)?)?
		}
	}
	return max(1, n)
}

// regexBudget sizes the patterns one policy compiles.
type regexBudget struct {
	limit int   // of one pattern
	left  int64 // for the rest of the policy
}

func newRegexBudget(limit int) *regexBudget {
	return &regexBudget{limit: limit, left: int64(limit) * regexTotalFactor}
}

// take sizes pattern and charges it to the policy. A pattern that does not
// parse is left to the compiler to refuse, with its own error.
func (b *regexBudget) take(pattern string) error {
	n, err := regexSize(pattern)
	if err != nil {
		return nil
	}
	if n > int64(b.limit) {
		return &regexLimitError{pattern: pattern, size: n, limit: int64(b.limit)}
	}
	if n > b.left {
		return &regexLimitError{pattern: pattern, limit: int64(b.limit) * regexTotalFactor, total: true}
	}
	b.left -= n
	return nil
}

// regexLimitError is a pattern over the regex program limit, or one that
// takes a policy over its total.
type regexLimitError struct {
	pattern string
	size    int64
	limit   int64
	total   bool
}

func (e *regexLimitError) Error() string {
	if e.total {
		return fmt.Sprintf("regex %q takes the policy's regexes over %d instructions in all (%d times the regex program limit)",
			truncate(e.pattern, 64), e.limit, regexTotalFactor)
	}
	return fmt.Sprintf("regex %q compiles to about %d instructions; the regex program limit is %d",
		truncate(e.pattern, 64), e.size, e.limit)
}

// regexPattern returns the pattern of a call of CEL's matches (member or
// global: the pattern is the second argument either way), and whether the
// call is one.
func regexPattern(call interpreter.InterpretableCall) (interpreter.InterpretableV2, bool) {
	switch {
	case call.Function() == overloads.Matches,
		call.OverloadID() == overloads.Matches,
		call.OverloadID() == overloads.MatchesString:
	default:
		return nil, false
	}
	args := call.Args()
	if len(args) != 2 {
		return nil, false
	}
	return args[1], true
}

// sizeConstantRegexes sizes the constant patterns of a condition's matches
// calls against budget while the program is planned, before cel-go
// compiles them (its regex optimization runs after the decorators of the
// program's options). A pattern folded from a conversion (string("…"))
// is a constant here too.
func sizeConstantRegexes(budget *regexBudget) interpreter.InterpretableDecoratorV2 {
	return func(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
		call, ok := i.(interpreter.InterpretableCall)
		if !ok {
			return i, nil
		}
		arg, ok := regexPattern(call)
		if !ok {
			return i, nil
		}
		c, ok := arg.(interpreter.InterpretableConst)
		if !ok {
			return i, nil // sized when it runs (celguard.go)
		}
		if s, ok := c.Value().(types.String); ok {
			if err := budget.take(string(s)); err != nil {
				return nil, err
			}
			if id := call.OverloadID(); id != overloads.Matches && id != overloads.MatchesString {
				// boundedMatches would not replace cel-go's unbounded match.
				return nil, fmt.Errorf("matches %q: the call's overload is not resolved (%q)", truncate(string(s), 64), id)
			}
		}
		return i, nil
	}
}

// Matching costs time in proportion to the program too, and the model
// chooses the text: regexp's matchers step every instruction at most once
// per byte, so a match takes up to the program's instructions times the
// text's bytes, and nothing interrupts it (not ctx, not the CEL deadline,
// which is checked between comprehension steps). `.*w.{1000}…`, well under
// the program limit at about 9,000 instructions, took 15 s of CPU on one
// 256 KiB argument. So a match is bounded before it runs: when its
// instructions times its bytes pass the regex match budget, it does not
// run, and its outcome is unknown — which fails closed, as a value of the
// wrong type does (an args constraint is indeterminate; a CEL matches is
// an error value).

// boundedRegexp is a compiled regex that matches only a text it can match
// within its budget.
type boundedRegexp struct {
	re      *regexp.Regexp
	pattern string // as the operator wrote it, for errors
	insts   uint64 // of re's program
	budget  uint64
}

// compileBounded compiles expr (RE2 syntax) for texts it can match within
// budget; pattern names it in errors.
func compileBounded(expr, pattern string, budget uint64) (*boundedRegexp, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	n, err := progInsts(expr)
	if err != nil {
		return nil, err
	}
	return &boundedRegexp{re: re, pattern: pattern, insts: n, budget: budget}, nil
}

// progInsts counts the instructions of the program regexp compiles expr
// to, by the steps regexp.Compile takes.
func progInsts(expr string) (uint64, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, err
	}
	return uint64(len(prog.Inst)), nil
}

// match reports whether the regex matches s, or a *matchBudgetError
// without matching when that would pass the budget.
func (b *boundedRegexp) match(s string) (bool, error) {
	if err := checkMatchWork(b.pattern, b.insts, len(s), b.budget); err != nil {
		return false, err
	}
	return b.re.MatchString(s), nil
}

// checkMatchWork errors when a program of insts instructions may take
// more than budget steps over a text of n bytes.
func checkMatchWork(pattern string, insts uint64, n int, budget uint64) error {
	if w := insts * uint64(n); w > budget || (n > 0 && w/uint64(n) != insts) {
		return &matchBudgetError{pattern: pattern, insts: insts, text: n, budget: budget}
	}
	return nil
}

// matchBudgetError is a match refused because it could take longer than
// the regex match budget allows.
type matchBudgetError struct {
	pattern string
	insts   uint64
	text    int
	budget  uint64
}

func (e *matchBudgetError) Error() string {
	return fmt.Sprintf("regex %q on %d bytes passes the regex match budget (%d instructions times %d bytes, over %d)",
		truncate(e.pattern, 64), e.text, e.insts, e.text, e.budget)
}

// boundedMatches replaces cel-go's compilation of a constant matches
// pattern (interpreter.MatchesRegexOptimization, which matches without a
// bound) by one whose matches refuse a text over budget with an error
// value, so that the condition fails closed unless the rest of it decides
// without the match (err || true is true). They are keyed by overload:
// cel-go adds its own, by function name, after the program's options, and
// a call's overload is looked up first; sizeConstantRegexes refuses a
// constant pattern whose call has no overload id.
func boundedMatches(budget uint64) []*interpreter.RegexOptimization {
	factory := func(call interpreter.InterpretableCall, pattern string) (interpreter.InterpretableCall, error) {
		b, err := compileBounded(pattern, pattern, budget)
		if err != nil {
			return nil, err
		}
		return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), func(values ...ref.Val) ref.Val {
			if len(values) != 2 {
				return types.NoSuchOverloadErr()
			}
			s, ok := values[0].Value().(string)
			if !ok {
				return types.NoSuchOverloadErr()
			}
			m, err := b.match(s)
			if err != nil {
				return types.NewErr("%s", err)
			}
			return types.Bool(m)
		}), nil
	}
	return []*interpreter.RegexOptimization{
		{Function: overloads.Matches, OverloadID: overloads.Matches, RegexIndex: 1, Factory: factory},
		{Function: overloads.Matches, OverloadID: overloads.MatchesString, RegexIndex: 1, Factory: factory},
	}
}
