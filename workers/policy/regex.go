package policy

import (
	"fmt"
	"regexp/syntax"

	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
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
		}
		return i, nil
	}
}
