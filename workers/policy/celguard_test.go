package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// allocOf reports the bytes allocated while f runs. Its caller must not
// run in parallel with other tests.
func allocOf(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A condition whose call builds far more than its arguments (replace with
// an empty needle, join, format of a list of references) must be stopped
// before it builds it: cel-go charges a call after it has run, and
// args.s.replace("", args.s) on a 1 MiB argument is a 1 TiB string. Calls
// that keep what they build per element of a comprehension must be
// charged for it. Not parallel: it measures the process's allocations.
func TestCELConditionWorkBounded(t *testing.T) {
	const maxAlloc = 48 << 20
	sizes := []struct {
		name string
		s, l int // bytes of args.s, elements of args.l
	}{
		// Without the guards these build 128-256 MiB; sizes grow, and the
		// test stops at the first failure, before the next size would
		// exhaust the machine.
		{"s=16KiB", 16 << 10, 8 << 10},
		{"s=1MiB", 1 << 20, 64 << 10},
	}
	cases := []struct {
		name   string
		when   string
		action Action
		want   string // in the reason
	}{
		{"replace empty needle", `args.s.replace("", args.s) == ""`, Deny, "replace would cost"},
		{"replace n", `args.s.replace("", args.s, -1) == ""`, Deny, "replace would cost"},
		{"replace in allow", `args.s.replace("", args.s) == ""`, Allow, "replace would cost"},
		// The limit cancels the evaluation: || cannot absorb it.
		{"replace or true in allow", `args.s.replace("", args.s) == "" || true`, Allow, "replace would cost"},
		{"join", `args.s.split("").join(args.s) == ""`, Deny, "would cost"}, // split at 1 MiB, join at 16 KiB
		{"format list of references", `"%s".format([args.l.map(x, args.s)]) == ""`, Deny, "format would cost"},
		{"dyn concatenation kept per element", `args.l.map(x, args.s + args.s).size() == 0`, Deny, "cost limit exceeded"},
		{"dyn bytes kept per element", `args.l.map(x, bytes(args.s)).size() == 0`, Deny, "cost limit exceeded"},
		{"format kept per element", `args.l.map(x, "%s".format([args.s])).size() == 0`, Deny, "cost limit exceeded"},
		{"quote kept per element", `args.l.map(x, strings.quote(args.s)).size() == 0`, Deny, "cost limit exceeded"},
	}
	for _, sz := range sizes {
		l := make([]any, sz.l)
		for i := range l {
			l[i] = 0
		}
		s := strings.Repeat("a", sz.s)
		args := map[string]any{"s": s, "l": l}
		for _, tc := range cases {
			doc := fmt.Sprintf("version: 1\nrules:\n  - {id: bomb, function: x::y, when: '%s', action: %s}\n  - {id: rest, function: \"*\", action: needs_approval}\n", tc.when, tc.action)
			p := mustParse(t, doc, WithMaxArgsBytes(4<<20), WithCELTimeout(10*time.Second)) // the cost limit stops it, not the clock
			var d Decision
			start := time.Now()
			alloc := allocOf(func() { d = p.Check("x::y", args) })
			el := time.Since(start)
			wantRule := "bomb"
			if tc.action == Allow {
				wantRule = "rest"
			}
			switch {
			case d.RuleID != wantRule:
				t.Fatalf("%s, %s: %+v, want rule %s", sz.name, tc.name, d, wantRule)
			case tc.action == Deny && !strings.Contains(d.Reason, tc.want):
				t.Fatalf("%s, %s: reason %q, want %q", sz.name, tc.name, d.Reason, tc.want)
			case alloc > maxAlloc:
				t.Fatalf("%s, %s: allocated %d MiB, more than %d", sz.name, tc.name, alloc>>20, maxAlloc>>20)
			case el > 5*time.Second:
				t.Fatalf("%s, %s: took %v", sz.name, tc.name, el)
			}
			t.Logf("%s, %s: %d KiB, %v", sz.name, tc.name, alloc>>10, el)
		}
	}
}

// A search whose work grows with the product of its arguments' sizes runs
// in one call, which no deadline interrupts (the deadline is checked
// between comprehension steps): it must be stopped before it starts when
// its cost passes the limit. Unguarded, each of these takes tens of
// seconds.
func TestCELSearchesStoppedBeforeTheyRun(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("a", 256<<10)
	for _, tc := range []struct {
		name, when, t string
	}{
		{"indexOf", `args.s.indexOf(args.t) >= 0`, s[:128<<10] + "b"},
		{"lastIndexOf", `args.s.lastIndexOf(args.t) >= 0`, s[:128<<10] + "b"},
		{"matches", `args.s.matches(args.t)`, strings.Repeat("a?", 2000) + strings.Repeat("a", 2000) + "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := fmt.Sprintf("version: 1\nrules:\n  - {id: search, function: x::y, when: '%s', action: deny}\n", tc.when)
			p := mustParse(t, doc, WithMaxArgsBytes(1<<20), WithCELTimeout(10*time.Second))
			start := time.Now()
			d := p.Check("x::y", map[string]any{"s": s, "t": tc.t})
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("took %v", el)
			}
			if d.Decision != Deny || d.RuleID != "search" || !strings.Contains(d.Reason, tc.name+" would cost") {
				t.Errorf("%+v", d)
			}
		})
	}
}

// The guards only stop early what the cost tracker would stop anyway:
// with and without them a condition errors for the same inputs, and
// otherwise gives the same result.
func TestCELGuardsAgreeWithTracker(t *testing.T) {
	t.Parallel()
	const limit = 5000
	conds := []string{
		`args.s.replace(args.a, args.b)`,
		`args.s.replace(args.a, args.b, 3)`,
		`args.s.replace(args.a, args.b, 0)`,
		`args.s.split(args.a).join(args.b)`,
		`[args.s, args.b, args.s].join()`,
		`string(args.s.split(args.a).size())`,
		`string(args.s.split(args.a, 4800).size())`,
		`string(args.s.contains(args.a))`,
		`string(args.s.indexOf(args.a))`,
		`string(args.s.lastIndexOf(args.a))`,
		`string(args.s.matches(args.a))`,
		`string(matches(args.s, args.a))`,
	}
	var texts []string
	for _, unit := range []string{"a", "é", "中", "a\x00"} {
		for _, n := range []int{0, 1, 3, 40, 300, 700, 2500, 6000} {
			texts = append(texts, strings.Repeat(unit, n))
		}
	}
	needles := []string{"", "a", "é", "aa", strings.Repeat("a", 60), strings.Repeat("中", 200)}
	for _, src := range conds {
		guarded, plain := guardedAndPlain(t, `(`+src+`) != "\x01"`, limit)
		agree, errs := 0, 0
		for _, s := range texts {
			for _, a := range needles {
				for _, b := range []string{"", "x", strings.Repeat("yz", 40)} {
					vars := map[string]any{"function_id": "x::y", "args": map[string]any{"s": s, "a": a, "b": b}}
					g, gErr := evalBool(guarded, vars)
					p, pErr := evalBool(plain, vars)
					if (gErr != nil) != (pErr != nil) || g != p {
						t.Fatalf("%s with s=%d×%q a=%q b=%q: guarded (%v, %v), plain (%v, %v)",
							src, len([]rune(s)), firstRune(s), a, b, g, gErr, p, pErr)
					}
					if gErr != nil {
						errs++
					} else {
						agree++
					}
				}
			}
		}
		if agree == 0 || errs == 0 {
			t.Errorf("%s: %d agreeing results and %d errors; the inputs must reach both sides of the limit", src, agree, errs)
		}
	}
}

func firstRune(s string) string {
	for _, r := range s {
		return string(r)
	}
	return ""
}

// guardedAndPlain compiles src as the worker does, and once more without
// the guards.
func guardedAndPlain(t *testing.T, src string, limit uint64) (cel.Program, cel.Program) {
	t.Helper()
	o, err := buildOptions([]Option{WithCELCostLimit(limit)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := compileWhen(src, &o)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	env, err := celEnv()
	if err != nil {
		t.Fatal(err)
	}
	compileMu.Lock()
	defer compileMu.Unlock()
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		t.Fatal(iss.Err())
	}
	plain, err := env.Program(ast, cel.CostLimit(limit), cel.CostTracking(celCosts{}), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		t.Fatal(err)
	}
	return c.prg, plain
}

func evalBool(p cel.Program, vars map[string]any) (bool, error) {
	out, _, err := p.Eval(vars)
	if err != nil {
		return false, err
	}
	if types.IsError(out) {
		return false, fmt.Errorf("%v", out)
	}
	b, _ := out.Value().(bool)
	return b, nil
}

// Ordinary uses of the guarded functions give their usual results.
func TestCELGuardedFunctionsWork(t *testing.T) {
	t.Parallel()
	args := map[string]any{"path": "/workspace//src/main.go", "dir": "/workspace/src", "name": "main.go", "n": 3, "x": 1.5, "l": []any{1, "a", map[string]any{"k": true}}}
	for _, when := range []string{
		`args.path.replace("//", "/") == "/workspace/src/main.go"`,
		`"ab".replace("", "-") == "-a-b-"`,
		`"aaa".replace("a", "b", 2) == "bba"`,
		`[args.dir, args.name].join("/") == "/workspace/src/main.go"`,
		`["a", "b"].join() == "ab"`,
		`args.dir + "/" + args.name == "/workspace/src/main.go"`,
		`"%s/%s %d %.2f %x %s".format([args.dir, args.name, args.n, args.x, "hi", args.l]) == "/workspace/src/main.go 3 1.50 6869 [1, a, {k: true}]"`,
		`strings.quote("a\n") == "\"a\\n\""`,
		`args.path.contains("/src/") && args.path.indexOf("src") == 12 && args.path.lastIndexOf("/") == 15`,
		`args.name.matches("^[a-z]+\\.go$") && matches(args.name, "go$")`,
		`args.path.split("/").size() == 5`,
	} {
		p := mustParse(t, fmt.Sprintf("version: 1\nrules:\n  - {function: x::y, when: '%s', action: allow}\n", strings.ReplaceAll(when, "'", "''")))
		if d := p.Check("x::y", args); d.Decision != Allow {
			t.Errorf("%s: %+v", when, d)
		}
	}
}

// formatCost bounds the bytes format writes: it must never be less than
// what the ext strings library writes, whatever the format and arguments.
func FuzzFormatCost(f *testing.F) {
	for _, s := range [][2]string{
		{"%s", `["abc"]`},
		{"%s and %s", `[[1, 2.5, "x", null, true], {"k": [{}], "é": -1e308}]`},
		{"%d %x %X %o %b", `[-9223372036854775808, "héllo", 255, 8, 5]`},
		{"%e %f %.3f %.100f %%", `[1e308, -1e-300, 2.5, 5e-324]`},
		{"%s", `[[[[[]]]], {}]`},
		{"%.", `[1]`},
		{"%", `[]`},
		{"%s%s%s", `["a"]`},
		{"%d", `[1.5]`},
		{"%s", `[0.1, 123456789012345678901234567890]`},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	bs, err := celBindings()
	if err != nil {
		f.Fatal(err)
	}
	var impl func(...ref.Val) ref.Val
	for _, b := range bs {
		if b.name == "format" && b.impl.Function != nil {
			impl = b.impl.Function
		}
	}
	if impl == nil {
		f.Fatal("no format binding")
	}
	f.Fuzz(func(t *testing.T, format string, raw []byte) {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return
		}
		root, reject := inspectArgs(map[string]any{"l": v}, DefaultMaxArgsBytes, DefaultMaxArgsDepth)
		if reject != nil {
			return
		}
		list := types.DefaultTypeAdapter.NativeToValue(root.(map[string]any)["l"])
		if _, ok := list.Type().(*types.Type); !ok || list.Type() != types.ListType {
			return
		}
		args := []ref.Val{types.String(format), list}
		bound := formatCost(args, math.MaxUint64)
		out := impl(args...)
		if s, ok := out.(types.String); ok && uint64(len(s)) > bound {
			t.Fatalf("format %q of %s wrote %d bytes, bound %d: %q", format, raw, len(s), bound, s)
		}
	})
}
