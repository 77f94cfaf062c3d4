package policy

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/ext"
)

// MaxWhenLen bounds the source of a when condition in bytes.
const MaxWhenLen = 4096

// celEnv declares the two variables a condition sees: function_id (string)
// and args (a map of string to dyn; a non-object args value is bound as it
// is, and selecting a field of it errors). Numbers compare across int,
// uint and double. The environment is immutable and shared; it is where
// the guarded functions take their implementations from, and conditions
// compile in guardedEnv's copy of it.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(celOptions()...)
})

// celOptions declares what a condition sees, beside the standard library.
func celOptions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Variable("function_id", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxWhenLen),
		cel.ParserRecursionLimit(64),
		ext.Strings(),
	}
}

// compileMu serializes compiling: cel-go v0.33.2's checker fills the
// shared environment's catalog lazily (a sync.Once) while another
// compile may be reading it (cloneWithDecls), a data race the race
// detector reports (docs/UPSTREAM.md). Policies compile on load only.
// It also guards celEnvs.
var compileMu sync.Mutex

// celLimits are the limits a program's guarded functions close over.
type celLimits struct {
	cost  uint64
	regex int
	match uint64 // the regex match budget
}

// celEnvs holds, for each limits in use, an environment that declares
// what celEnv does, with the guarded functions bound for those limits
// (celguard.go). A node uses one set of limits; the map is bounded all the
// same.
var celEnvs = map[celLimits]*cel.Env{}

const maxCELEnvs = 16

// guardedEnv returns the environment for limits l. Its caller holds
// compileMu.
func guardedEnv(l celLimits) (*cel.Env, error) {
	if env, ok := celEnvs[l]; ok {
		return env, nil
	}
	fns, err := guardedFunctions(l)
	if err != nil {
		return nil, err
	}
	env, err := cel.NewCustomEnv(append(celOptions(), fns...)...)
	if err != nil {
		return nil, err
	}
	if len(celEnvs) >= maxCELEnvs {
		clear(celEnvs)
	}
	celEnvs[l] = env
	return env, nil
}

// condition is a compiled when expression.
type condition struct {
	src string
	prg cel.Program
}

// compileWhen compiles a condition as a policy of its own.
func compileWhen(src string, o *options) (*condition, error) {
	return compileWhenIn(src, o, newRegexBudget(o.regexLimit))
}

// compileWhenIn compiles a condition of a policy whose regexes budget
// sizes.
func compileWhenIn(src string, o *options, budget *regexBudget) (*condition, error) {
	if src == "" {
		return nil, fmt.Errorf("when is empty")
	}
	if len(src) > MaxWhenLen {
		return nil, fmt.Errorf("when is %d bytes; the limit is %d", len(src), MaxWhenLen)
	}
	compileMu.Lock()
	defer compileMu.Unlock()
	env, err := guardedEnv(celLimits{cost: o.celCost, regex: o.regexLimit, match: o.regexMatch})
	if err != nil {
		return nil, fmt.Errorf("CEL environment: %w", err)
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("when does not compile: %v", iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("when must be a bool expression, not %s (compare explicitly: args.flag == true)", t)
	}
	prg, err := program(env, ast,
		cel.CostLimit(o.celCost),
		cel.CostTracking(celCosts{}),
		cel.CustomDecoratorV2(sizeConstantRegexes(budget)), // before cel-go compiles them (regex.go)
		cel.OptimizeRegex(boundedMatches(o.regexMatch)...), // in place of cel-go's unbounded matches
		cel.InterruptCheckFrequency(64),
		cel.EvalOptions(cel.OptOptimize),
	)
	var limitErr *regexLimitError
	if errors.As(err, &limitErr) {
		return nil, fmt.Errorf("when: %v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("when does not compile: %v", err)
	}
	return &condition{src: src, prg: prg}, nil
}

// program plans ast. A guard cancels an evaluation with a panic that Eval
// recovers; should planning ever run a guarded call on constants (cel-go
// folds only conversions today), its panic is an error here too.
func program(env *cel.Env, ast *cel.Ast, opts ...cel.ProgramOption) (prg cel.Program, err error) {
	defer func() {
		if p := recover(); p != nil {
			prg, err = nil, fmt.Errorf("%v", p)
		}
	}()
	return env.Program(ast, opts...)
}

// eval runs the condition for one call. Any error (a missing key, a type
// error, the cost limit, the deadline) is returned for the rule to fail
// closed on. A condition stopped by the check's own deadline runs once
// more with a fresh one (checkState.renew). A lenient (deny or
// needs_approval) condition reads object keys without case when the exact
// key is absent (foldAdapter).
func (c *condition) eval(st *checkState, lenient bool) (bool, error) {
	ok, err := c.evalOnce(st, lenient)
	if err != nil && st.renew() {
		ok, err = c.evalOnce(st, lenient)
	}
	return ok, err
}

func (c *condition) evalOnce(st *checkState, lenient bool) (ok bool, err error) {
	ctx, vars := st.cel(lenient)
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("no time left: %w", context.Cause(ctx))
	}
	defer func() {
		if p := recover(); p != nil {
			ok, err = false, fmt.Errorf("condition panicked: %v", p)
		}
	}()
	out, _, err := c.prg.ContextEval(ctx, vars)
	if err != nil {
		return false, err
	}
	b, isBool := out.Value().(bool)
	if !isBool {
		return false, fmt.Errorf("condition returned %s, not a bool", out.Type())
	}
	return b, nil
}
