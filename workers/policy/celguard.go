package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	celenv "cel.dev/cel-go/common/env"
	"cel.dev/cel-go/common/functions"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
)

// cel-go's cost tracker charges a call after it has run, by the size of
// its result. A call whose work grows faster than its inputs therefore
// does all of it before the limit can stop it: args.s.replace("", args.s)
// builds len(s)² bytes, and on a 256 KiB argument that is 64 GiB, enough
// to kill the node (every session on it) before the charge is made. The
// model controls args, so any condition an operator writes with such a
// call is a denial of service reachable from a prompt.
//
// So the calls below are checked before they run: a guard computes, from
// the arguments alone and without doing the call's work, at least what
// the tracker will charge for it, and the evaluation is cancelled at once
// when that alone passes the cost limit. Since the charge would cancel it
// anyway, no decision changes; only the work is not done. (format is the
// exception: its model does not charge its result, so its guard bounds
// the string it could build, and celCosts charges the one it built.)
//
// The guards run as the implementations of these functions: each set of
// limits in use has an environment of its own (guardedEnv), which
// declares their overloads again (cel.Function) with bindings that run
// the guard and then cel-go's own implementation.
//
// A matches whose pattern comes from args also has the pattern sized
// before it compiles (regex.go): the search's charge counts the text and
// the pattern, so a short text let a pattern that compiles to hundreds of
// MiB through, on every check. And its match is bounded by the regex
// match budget (regex.go) before it runs: the charge counts the pattern's
// bytes, not its program, so `.*w.{1000}…x` (67 bytes, 9,000
// instructions) searched 256 KiB for over a minute at a charge of less
// than half a million.

// celGuard names the guard of a function. Its cost method returns at
// least what the cost tracker will charge for a call with args, or 0 when
// a cheap bound shows that the charge cannot pass limit; it may stop
// counting once the count passes limit. It does not judge the arguments'
// types: a call with the wrong ones errors in its implementation, and its
// guard counts what it can. (A switch rather than func values, so that the
// arguments of a guarded call stay on the stack.)
type celGuard uint8

const (
	guardReplace celGuard = iota
	guardJoin
	guardFormat
	guardSplit
	guardContains
	guardSearch
	guardMatches
)

func (g celGuard) cost(args []ref.Val, limit uint64) uint64 {
	switch g {
	case guardReplace:
		return replaceCost(args, limit)
	case guardJoin:
		return joinCost(args, limit)
	case guardFormat:
		return formatCost(args, limit)
	case guardSplit:
		return splitCost(args, limit)
	case guardContains:
		return containsCost(args, limit)
	case guardSearch:
		return searchCost(args, limit)
	case guardMatches:
		return matchesCost(args, limit)
	}
	return 0
}

// celGuards maps the guarded functions to their guards. Each guards every
// overload of its function.
var celGuards = map[string]celGuard{
	// Builders: the result can outgrow the arguments by a factor that
	// the arguments choose.
	"replace": guardReplace,
	"join":    guardJoin,
	"format":  guardFormat,
	"split":   guardSplit, // 16 bytes or more per part, one part per byte
	// Searches: quadratic time in one call, which no deadline interrupts
	// (a condition's deadline is checked between comprehension steps).
	// A matches with a constant pattern is compiled once at load and runs
	// outside the dispatcher, so it is not guarded here; its pattern is
	// the operator's, sized when the policy loads, and its match bounded
	// by boundedMatches (regex.go).
	"contains":    guardContains,
	"indexOf":     guardSearch,
	"lastIndexOf": guardSearch,
	"matches":     guardMatches,
}

// guardedBinding is one binding of the environment for a guarded function.
type guardedBinding struct {
	name  string // the function
	guard celGuard
	impl  *functions.Overload
}

// celBindings collects the environment's bindings of the guarded
// functions: one per overload id and one by function name (used when the
// checker cannot pick the overload, for dyn arguments).
var celBindings = sync.OnceValues(func() ([]guardedBinding, error) {
	env, err := celEnv()
	if err != nil {
		return nil, err
	}
	fns := env.Functions()
	var out []guardedBinding
	for name, g := range celGuards {
		fn, ok := fns[name]
		if !ok {
			return nil, fmt.Errorf("CEL function %s is not declared", name)
		}
		bs, err := fn.Bindings()
		if err != nil {
			return nil, fmt.Errorf("CEL function %s: %w", name, err)
		}
		for _, b := range bs {
			out = append(out, guardedBinding{name: name, guard: g, impl: b})
		}
	}
	return out, nil
})

// guardedFunctions returns the standard library and the guarded functions
// declared again, each overload with its signature and a binding that
// guards celEnv's own for limits l. A function bound once for all its
// overloads (matches) cannot be bound again: it is left out of the
// standard library and declared here whole.
func guardedFunctions(l celLimits) ([]cel.EnvOption, error) {
	env, err := celEnv()
	if err != nil {
		return nil, err
	}
	bs, err := celBindings()
	if err != nil {
		return nil, err
	}
	byID := make(map[string]guardedBinding, len(bs))
	for _, b := range bs {
		byID[b.impl.Operator] = b
	}
	fns := env.Functions()
	out := make([]cel.EnvOption, 0, len(celGuards)+1)
	var singletons []*celenv.Function
	for name := range celGuards {
		fn := fns[name]
		var opts []cel.FunctionOpt
		if fn.HasSingletonBinding() {
			singletons = append(singletons, celenv.NewFunction(name))
			b := byID[name]
			u, bin, f := b.wrap(l)
			switch {
			case u != nil:
				opts = append(opts, cel.SingletonUnaryBinding(u, b.impl.OperandTrait))
			case bin != nil:
				opts = append(opts, cel.SingletonBinaryBinding(bin, b.impl.OperandTrait))
			case f != nil:
				opts = append(opts, cel.SingletonFunctionBinding(f, b.impl.OperandTrait))
			default:
				return nil, fmt.Errorf("CEL function %s has no synchronous binding", name)
			}
		}
		for _, o := range fn.OverloadDecls() {
			var oopts []cel.OverloadOpt
			if !fn.HasSingletonBinding() {
				b, ok := byID[o.ID()]
				if !ok {
					return nil, fmt.Errorf("CEL function %s: overload %s has no binding", name, o.ID())
				}
				switch u, bin, f := b.wrap(l); {
				case u != nil:
					oopts = append(oopts, cel.UnaryBinding(u))
				case bin != nil:
					oopts = append(oopts, cel.BinaryBinding(bin))
				case f != nil:
					oopts = append(oopts, cel.FunctionBinding(f))
				default:
					return nil, fmt.Errorf("CEL function %s: overload %s has no synchronous binding", name, o.ID())
				}
			}
			if t := o.OperandTrait(); t != 0 {
				oopts = append(oopts, cel.OverloadOperandTrait(t))
			}
			if o.IsNonStrict() {
				oopts = append(oopts, cel.OverloadIsNonStrict())
			}
			if o.IsMemberFunction() {
				opts = append(opts, cel.MemberOverload(o.ID(), o.ArgTypes(), o.ResultType(), oopts...))
			} else {
				opts = append(opts, cel.Overload(o.ID(), o.ArgTypes(), o.ResultType(), oopts...))
			}
		}
		out = append(out, cel.Function(name, opts...))
	}
	std := cel.StdLib(cel.StdLibSubset(celenv.NewLibrarySubset().AddExcludedFunctions(singletons...)))
	return append([]cel.EnvOption{std}, out...), nil
}

// wrap runs the guard before the implementation, in whichever of its forms
// the implementation has. A call over the cost limit cancels the
// evaluation as the tracker does (a panic its Eval recovers), so an error
// value cannot be absorbed by || or && and let the condition go on as if
// the call had merely failed.
func (b guardedBinding) wrap(l celLimits) (functions.UnaryOp, functions.BinaryOp, functions.FunctionOp) {
	switch {
	case b.impl.Unary != nil:
		u := b.impl.Unary
		return func(a ref.Val) ref.Val {
			if err := b.check(l, a); err != nil {
				return err
			}
			return u(a)
		}, nil, nil
	case b.impl.Binary != nil:
		bin := b.impl.Binary
		return nil, func(x, y ref.Val) ref.Val {
			if err := b.check(l, x, y); err != nil {
				return err
			}
			return bin(x, y)
		}, nil
	case b.impl.Function != nil:
		f := b.impl.Function
		return nil, nil, func(args ...ref.Val) ref.Val {
			if err := b.check(l, args...); err != nil {
				return err
			}
			return f(args...)
		}
	}
	return nil, nil, nil
}

// check panics when the call would pass the cost limit, and returns an
// error value for a matches whose pattern is over the regex program limit
// or whose match could pass the regex match budget.
func (b guardedBinding) check(l celLimits, args ...ref.Val) ref.Val {
	if c := b.guard.cost(args, l.cost); c > l.cost {
		panic(interpreter.EvalCancelledError{
			Cause:   interpreter.CostLimitExceeded,
			Message: fmt.Sprintf("cost limit exceeded: %s would cost at least %d, more than the limit of %d", b.name, c, l.cost),
		})
	}
	if b.guard == guardMatches {
		if re, ok := stringArg(args, 1); ok {
			if err := newRegexBudget(l.regex).take(re); err != nil {
				return types.NewErr("%s", err)
			}
			n, err := regexSize(re)
			if err != nil {
				return nil // the implementation refuses it, with its own error
			}
			// regexSize and the four instructions every program has
			// bound the program from above (FuzzRegexSize).
			text, _ := stringArg(args, 0)
			if err := checkMatchWork(re, uint64(n)+4, len(text), l.match); err != nil {
				return types.NewErr("%s", err)
			}
		}
	}
	return nil
}

// runes is the size the cost tracker gives a string: its code points.
func runes(s string) uint64 { return uint64(utf8.RuneCountInString(s)) }

func stringArg(args []ref.Val, i int) (string, bool) {
	if i >= len(args) {
		return "", false
	}
	s, ok := args[i].(types.String)
	return string(s), ok
}

// replaceCost: s.replace(old, new[, n]) is charged at least the code
// points of its result.
func replaceCost(args []ref.Val, limit uint64) uint64 {
	s, ok1 := stringArg(args, 0)
	old, ok2 := stringArg(args, 1)
	nw, ok3 := stringArg(args, 2)
	if !ok1 || !ok2 || !ok3 {
		return 0
	}
	n := int64(-1)
	if len(args) == 4 {
		if i, ok := args[3].(types.Int); ok {
			n = int64(i)
		}
	}
	limitTo := func(count uint64) uint64 {
		if n >= 0 && uint64(n) < count {
			return uint64(n)
		}
		return count
	}
	// Bytes bound code points from above: most calls stop here.
	most := uint64(len(s)) + 1
	if old != "" {
		most = uint64(len(s) / len(old))
	}
	if cost.SafeAdd(uint64(len(s)), cost.SafeMultiply(limitTo(most), uint64(len(nw)))) <= limit {
		return 0
	}
	// The result's code points, less any that invalid UTF-8 at the seams
	// might merge (args decoded from JSON are valid).
	count := limitTo(uint64(strings.Count(s, old))) // "" matches runes(s)+1 times
	return cost.SafeAdd(cost.SafeSubtract(runes(s), count*runes(old)), cost.SafeMultiply(count, runes(nw)))
}

// splitCost: s.split(sep[, n]) is charged at least one unit per part.
func splitCost(args []ref.Val, limit uint64) uint64 {
	s, ok1 := stringArg(args, 0)
	sep, ok2 := stringArg(args, 1)
	if !ok1 || !ok2 {
		return 0
	}
	n := int64(-1)
	if len(args) == 3 {
		if i, ok := args[2].(types.Int); ok {
			n = int64(i)
		}
	}
	limitTo := func(parts uint64) uint64 {
		if n >= 0 && uint64(n) < parts {
			return uint64(n)
		}
		return parts
	}
	most := uint64(len(s))
	if sep != "" {
		most = uint64(len(s)/len(sep)) + 1
	}
	if limitTo(most) <= limit {
		return 0
	}
	if sep == "" {
		return limitTo(runes(s)) // one part per code point
	}
	return limitTo(uint64(strings.Count(s, sep)) + 1)
}

// joinCost: list.join([sep]) is charged at least the code points of its
// result.
func joinCost(args []ref.Val, limit uint64) uint64 {
	if len(args) == 0 {
		return 0
	}
	l, ok := args[0].(traits.Lister)
	if !ok {
		return 0
	}
	sep, _ := stringArg(args, 1)
	k, ok := l.Size().(types.Int)
	if !ok || k <= 0 {
		return 0
	}
	total := cost.SafeMultiply(uint64(k-1), runes(sep))
	// By index: an iterator is an allocation, on every call.
	for i := types.Int(0); i < k && total <= limit; i++ {
		s, ok := l.Get(i).(types.String)
		if !ok {
			break
		}
		total = cost.SafeAdd(total, runes(string(s)))
	}
	return total
}

// formatCost: the format model charges the format string only, so the
// guard bounds the bytes of the result instead: what each clause can
// write for its argument, as the ext strings library (version 4 and
// later) formats it. Precision is at most 100 digits, so a number takes
// at most maxNumberLen bytes under any clause.
func formatCost(args []ref.Val, limit uint64) uint64 {
	f, ok := stringArg(args, 0)
	if !ok || len(args) < 2 {
		return 0
	}
	l, ok := args[1].(traits.Lister)
	if !ok {
		return 0
	}
	size, ok := l.Size().(types.Int)
	if !ok {
		return 0
	}
	var total uint64
	var scratch []byte
	next := types.Int(0)
	for i := 0; i < len(f) && total <= limit; {
		if f[i] != '%' {
			total++
			i++
			continue
		}
		if i+1 < len(f) && f[i+1] == '%' {
			total++
			i += 2
			continue
		}
		j := i + 1
		if j < len(f) && f[j] == '.' {
			j++
			for j < len(f) && f[j] >= '0' && f[j] <= '9' {
				j++
			}
		}
		if j >= len(f) || next >= size {
			break // the call errors
		}
		v := l.Get(next)
		next++
		switch f[j] {
		case 's':
			total = cost.SafeAdd(total, renderLen(v, limit-total, &scratch))
		case 'x', 'X':
			switch x := v.(type) {
			case types.String:
				total = cost.SafeAdd(total, 2*uint64(len(x)))
			case types.Bytes:
				total = cost.SafeAdd(total, 2*uint64(len(x)))
			default:
				total += maxNumberLen
			}
		default:
			total += maxNumberLen
		}
		i = j + 1
	}
	return total
}

// maxNumberLen bounds the bytes a clause other than %s or %x writes: a
// number under %d, %f, %e, %b or %o (%f of 1e308 with a precision of
// 100, the most the library allows, is 411 bytes).
const maxNumberLen = 512

// renderLen bounds the bytes %s writes for v, stopping once it passes
// budget. It mirrors the ext strings formatter: strings and bytes as they
// are, lists as [a, b], maps as {k: v, k: v}, numbers in decimal.
func renderLen(v ref.Val, budget uint64, scratch *[]byte) uint64 {
	switch v.Type() {
	case types.StringType, types.TypeType:
		s, _ := v.Value().(string)
		return uint64(len(s))
	case types.BytesType:
		b, _ := v.Value().([]byte)
		return uint64(len(b))
	case types.DoubleType:
		d, _ := v.Value().(float64)
		if math.IsNaN(d) || math.IsInf(d, 0) {
			return uint64(len("-Infinity"))
		}
		*scratch = strconv.AppendFloat((*scratch)[:0], d, 'f', -1, 64)
		return uint64(len(*scratch))
	case types.BoolType:
		return uint64(len("false"))
	case types.IntType, types.UintType:
		return 20
	case types.NullType:
		return uint64(len("null"))
	case types.TimestampType, types.DurationType:
		return 40 // 9999-12-31T23:59:59.999999999Z; ±315576000000.999999999s
	case types.ListType:
		l, ok := v.(traits.Lister)
		if !ok {
			return 0
		}
		total := uint64(2)
		for it := l.Iterator(); total <= budget && it.HasNext() == types.True; {
			total = cost.SafeAdd(total, 2+renderLen(it.Next(), budget-total, scratch))
		}
		return total
	case types.MapType:
		m, ok := v.(traits.Mapper)
		if !ok {
			return 0
		}
		total := uint64(2)
		for it := m.Iterator(); total <= budget && it.HasNext() == types.True; {
			k := it.Next()
			total = cost.SafeAdd(total, 4+renderLen(k, budget-total, scratch))
			if total > budget {
				break
			}
			if val, found := m.Find(k); found {
				total = cost.SafeAdd(total, renderLen(val, budget-total, scratch))
			}
		}
		return total
	}
	return 0 // the formatter refuses the value, and the call errors
}

// containsCost: s.contains(sub) is charged (0.1·|s|)·(0.1·|sub|).
func containsCost(args []ref.Val, limit uint64) uint64 {
	return productCost(args, limit, func(n, m uint64) uint64 {
		return cost.SafeMultiply(n/10, m/10)
	})
}

// searchCost: s.indexOf(sub[, offset]) and lastIndexOf are charged
// 0.1·|s|·|sub| (they compare code points, O(|s|·|sub|)).
func searchCost(args []ref.Val, limit uint64) uint64 {
	return productCost(args, limit, func(n, m uint64) uint64 {
		return cost.SafeMultiply(n, m) / 10
	})
}

// matchesCost: s.matches(re) is charged (0.1·(|s|+1))·(0.25·|re|).
func matchesCost(args []ref.Val, limit uint64) uint64 {
	return productCost(args, limit, func(n, m uint64) uint64 {
		return cost.SafeMultiply((n+1)/10, m/4)
	})
}

// productCost applies charge, which grows with both sizes, to the first
// two string arguments: on their bytes first (a bound from above), then,
// when that passes limit, on their code points, as the tracker counts.
func productCost(args []ref.Val, limit uint64, charge func(n, m uint64) uint64) uint64 {
	s, ok1 := stringArg(args, 0)
	t, ok2 := stringArg(args, 1)
	if !ok1 || !ok2 || charge(uint64(len(s)), uint64(len(t))) <= limit {
		return 0
	}
	return charge(runes(s), runes(t))
}

// celCosts charges, after a call, what cel-go's cost models leave out:
//
//   - the string a format or strings.quote call built, as the library
//     charges its other transforms (lowerAscii): its models charge a
//     tenth of the input only, so "%s".format([list]) built any size for
//     a few units, and quote three bytes for a tenth of one;
//   - the string or bytes built by a call whose overload is chosen at run
//     time. args is a map of dyn, so the checker cannot pick add_string
//     for args.a + args.b, the tracker finds no model for the call and
//     charged 1, and args.l.map(x, args.s + args.s) kept len(l)·2·len(s)
//     bytes for a few units per element. Such a call is charged as
//     add_string is: a tenth of the result's size.
//
// It is consulted after the libraries' own overload models and before
// the standard ones, and returns nil to leave a call to them.
type celCosts struct{}

var _ cost.ActualCostEstimator = celCosts{}

func (celCosts) CallCost(_, overloadID string, args []ref.Val, result ref.Val) *uint64 {
	switch overloadID {
	case overloads.ExtFormatString, overloads.ExtQuoteString:
		var in uint64
		if len(args) > 0 {
			in = sizeOf(args[0])
		}
		c := cost.SafeAdd(1, cost.SafeMultiplyByFactor(in, cost.StringTraversalCostFactor), sizeOf(result))
		return &c
	case "":
		switch result.(type) {
		case types.String, types.Bytes:
			c := max(1, cost.SafeMultiplyByFactor(sizeOf(result), cost.StringTraversalCostFactor))
			return &c
		}
	}
	return nil // most calls: no allocation
}

// sizeOf is cost.ActualSize, counting a string's code points without
// converting it (types.String.Size does, when built with -race).
func sizeOf(v ref.Val) uint64 {
	if s, ok := v.(types.String); ok {
		return runes(string(s))
	}
	return cost.ActualSize(v)
}
