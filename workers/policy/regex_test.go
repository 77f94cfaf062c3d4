package policy

import (
	"context"
	"errors"
	"fmt"
	"regexp/syntax"
	"strings"
	"testing"
	"time"
)

// repeats is a pattern of n bounded repeats of one character class:
// n×1000 instructions in 6n bytes.
func repeats(n int) string { return strings.Repeat(`.{1000}`, n) }

// A regex is sized before it compiles: a policy whose regex would compile
// to more than the limit, or whose regexes would together, does not load,
// and names the rule. Before the limit, a 4 KiB pattern of bounded repeats
// took 140 MiB and a second to load, every load, and a 1 MiB file of them
// several GiB. Not parallel: it measures the process's allocations.
func TestRegexProgramLimit(t *testing.T) {
	rule := func(r string) string {
		return fmt.Sprintf("version: 1\nrules:\n  - \"a::b\"\n  - %s\n", r)
	}
	whenRule := func(when string) string {
		return rule(fmt.Sprintf("{function: x::y, when: '%s', action: deny}", when))
	}
	// Each pattern under the limit, 12 of them over 10 times it: a
	// condition of 5, then args constraints, which share the budget.
	var total strings.Builder
	total.WriteString("version: 1\nrules:\n  - \"a::b\"\n")
	var ors []string
	for range 5 {
		ors = append(ors, fmt.Sprintf(`args.s.matches("%s")`, repeats(9)))
	}
	fmt.Fprintf(&total, "  - {function: x::y, when: '%s', action: deny}\n", strings.Join(ors, " || "))
	total.WriteString("  - {function: x::z, action: deny, args: {")
	for i := range 7 {
		fmt.Fprintf(&total, "k%d: {matches: '%s'}, ", i, repeats(9))
	}
	total.WriteString("}}\n")
	tests := []struct {
		name string
		doc  string
		opts []Option
		rule int    // want ParseError.Rule, or -1 for a policy that loads
		want string // in the error
	}{
		{"member matches", whenRule(`args.s.matches("` + repeats(11) + `")`), nil, 1, "compiles to about 11000 instructions; the regex program limit is 10000"},
		{"global matches", whenRule(`matches(args.s, "` + repeats(11) + `")`), nil, 1, "regex program limit is 10000"},
		{"folded conversion", whenRule(`args.s.matches(string("` + repeats(11) + `"))`), nil, 1, "regex program limit is 10000"},
		{"in a comprehension", whenRule(`args.l.exists(x, x.matches("` + repeats(11) + `"))`), nil, 1, "regex program limit is 10000"},
		{"largest pattern of a when", whenRule(`args.s.matches("` + repeats(580) + `")`), nil, 1, "about 580000 instructions"},
		{"args matches", rule(fmt.Sprintf("{function: x::y, args: {cmd: {matches: '%s'}}, action: deny}", repeats(11))), nil, 1, `args "cmd": regex`},
		{"largest args matches", rule(fmt.Sprintf("{function: x::y, args: {cmd: {matches: '%s'}}, action: allow}", repeats(585))), nil, 1, "regex program limit"},
		{"policy total", total.String(), nil, 2, `args "k6": regex ".{1000}.{1000}.{1000}.{1000}.{1000}.{1000}.{1000}.{1000}.{1000}" takes the policy's regexes over 100000 instructions in all`},
		{"option", whenRule(`args.s.matches("a{101}")`), []Option{WithRegexProgramLimit(100)}, 1, "about 101 instructions; the regex program limit is 100"},
		{"under the limit", whenRule(`args.s.matches("` + repeats(9) + `") && matches(args.s, "` + repeats(9) + `")`), nil, -1, ""},
		{"args under the limit", rule(fmt.Sprintf("{function: x::y, args: {cmd: {matches: '%s'}}, action: deny}", repeats(9))), nil, -1, ""},
		{"option under the limit", whenRule(`args.s.matches("a{100}")`), []Option{WithRegexProgramLimit(100)}, -1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			start := time.Now()
			alloc := allocOf(func() { _, err = Parse([]byte(tc.doc), tc.opts...) })
			el := time.Since(start)
			if tc.rule < 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Rule != tc.rule || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want rules[%d] and %q", err, tc.rule, tc.want)
			}
			if len(err.Error()) > 400 {
				t.Errorf("error of %d bytes: %s", len(err.Error()), err)
			}
			if alloc > 64<<20 || el > 2*time.Second {
				t.Errorf("refusing it took %v and %d MiB", el, alloc>>20)
			}
		})
	}
}

// A pattern a condition takes from args is sized before it compiles:
// one over the limit errors, so a deny rule denies and an allow rule does
// not allow. Its charge counts the text and the pattern, so against a
// short text a pattern compiling to hundreds of MiB was charged nothing,
// and compiled on every check.
func TestRegexProgramLimitFromArgs(t *testing.T) {
	t.Parallel()
	doc := `version: 1
rules:
  - {id: deny-re, function: d::x, when: '"".matches(args.re)', action: deny}
  - {id: allow-re, function: a::x, when: '!matches("", args.re)', action: allow}
  - {id: rest, function: "*", action: needs_approval}
`
	p := mustParse(t, doc, WithMaxArgsBytes(1<<20))
	for _, tc := range []struct {
		name, re   string
		deny, allw string // the rule ids that decide
	}{
		{"over", repeats(3000), "deny-re", "rest"},
		{"just over", repeats(11), "deny-re", "rest"},
		{"under", repeats(9), "rest", "allow-re"},
		{"invalid", "(", "deny-re", "rest"}, // the compiler's own error
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := map[string]any{"re": tc.re}
			start := time.Now()
			d := p.Check("d::x", args)
			if d.RuleID != tc.deny {
				t.Errorf("deny rule: %+v, want %s", d, tc.deny)
			}
			if tc.deny == "deny-re" && tc.name != "invalid" && !strings.Contains(d.Reason, "regex program limit") {
				t.Errorf("reason %q", d.Reason)
			}
			if d := p.Check("a::x", args); d.RuleID != tc.allw {
				t.Errorf("allow rule: %+v, want %s", d, tc.allw)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("took %v", el)
			}
		})
	}
}

// A watched file with a regex over the limit is rejected whole: the
// previous policy stays in force.
func TestWatcherRejectsRegexOverLimit(t *testing.T) {
	t.Parallel()
	good := "version: 1\nrules:\n  - \"!shell::exec\"\n"
	w, path := startFastWatcher(t, good)
	bad := fmt.Sprintf("version: 1\nrules:\n  - {function: shell::exec, when: 'args.cmd.matches(\"%s\")', action: allow}\n", repeats(20))
	writeAtomic(t, path, bad)
	st := waitStatus(t, w, func(st Status) error {
		if st.LastError == "" {
			return fmt.Errorf("no error yet: %+v", st)
		}
		return nil
	})
	if !strings.Contains(st.LastError, "rules[0]") || !strings.Contains(st.LastError, "regex program limit") {
		t.Fatalf("last error %q", st.LastError)
	}
	if d := w.Check(context.Background(), "shell::exec", map[string]any{"cmd": "ls"}); d.Decision != Deny {
		t.Fatalf("the previous policy is not in force: %+v", d)
	}
}

// regexSize bounds the program regexp compiles from above, less the four
// instructions every program has (fail, the capture of the whole match,
// match), so a pattern under the limit compiles to no more than it.
func FuzzRegexSize(f *testing.F) {
	for _, s := range []string{
		"", "a", "abc", "(?i)abc", ".", "[a-z]", `\pL`, "a|b|c", "(a)", "(?:a)",
		"a*", "a+", "a?", "a*?", "a{3}", "a{2,5}", "a{2,}", "a{0,}", "a{0}", "a{1000}",
		`(a{10}|b){10}`, `(?s).{1000}`, `^$\b\B\A\z`, `[^a]`, `x{2}{3}`, `(a+)+`,
		`(?:ab){2,}c|d*`, `((((a))))`, `.{1000}.{1000}`, `\d{1,3}(\.\d{1,3}){3}`, "[a-f0-9]{64}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		if len(pattern) > 256 {
			return
		}
		re, err := syntax.Parse(pattern, syntax.Perl)
		if err != nil {
			if _, err := regexSize(pattern); err == nil {
				t.Fatalf("%q: regexSize accepted what Parse refused", pattern)
			}
			return
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			return
		}
		n, err := regexSize(pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := int64(len(prog.Inst)); got > n+4 {
			t.Fatalf("%q compiles to %d instructions; regexSize says %d", pattern, got, n)
		}
	})
}

// A match that could take more than the regex match budget does not run,
// and fails closed: a deny rule denies, an allow rule does not allow. Go's
// regexp cannot be interrupted, and a pattern under the program limit
// (`.*w.{1000}…`, about 9,000 instructions) took 15 s of CPU and more on
// one 256 KiB argument, in an args constraint or a CEL matches alike (a
// search stops at its first match, so the pattern here matches nowhere).
func TestRegexMatchBudget(t *testing.T) {
	t.Parallel()
	slow := `.*w` + repeats(9) + `x`
	doc := fmt.Sprintf(`version: 1
rules:
  - {id: deny-arg, function: d::arg, args: {cmd: {matches: '%[1]s'}}, action: deny}
  - {id: allow-arg, function: a::arg, args: {cmd: {matches: '%[1]s'}}, action: allow}
  - {id: deny-cel, function: d::cel, when: 'args.cmd.matches("%[1]s")', action: deny}
  - {id: allow-cel, function: a::cel, when: 'matches(args.cmd, "%[1]s")', action: allow}
  - {id: deny-dyn, function: d::dyn, when: 'args.cmd.matches(args.re)', action: deny}
  - {id: allow-dyn, function: a::dyn, when: 'matches(args.cmd, args.re)', action: allow}
  - {id: rest, function: "*", action: needs_approval}
`, slow)
	p := mustParse(t, doc)
	args := map[string]any{"cmd": strings.Repeat("w", 250<<10), "re": slow}
	for _, tc := range []struct{ fn, want string }{
		{"d::arg", "deny-arg"}, {"a::arg", "rest"},
		{"d::cel", "deny-cel"}, {"a::cel", "rest"},
		{"d::dyn", "deny-dyn"}, {"a::dyn", "rest"},
	} {
		t.Run(tc.fn, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := p.Check(tc.fn, args)
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("took %v", el)
			}
			if d.RuleID != tc.want {
				t.Fatalf("%+v, want %s", d, tc.want)
			}
			if tc.want != "rest" && !strings.Contains(d.Reason, "regex match budget") {
				t.Errorf("reason %q", d.Reason)
			}
		})
	}
}

// A match within the budget runs as before, to the byte: the text whose
// bytes times the program's instructions reach the budget is matched, one
// byte more is not, in each kind of match. The program counts as
// regexp compiles it, or for a pattern from args as regexSize bounds it.
func TestRegexMatchBudgetEdge(t *testing.T) {
	t.Parallel()
	const budget = 1 << 16
	doc := `version: 1
rules:
  - {id: deny-arg, function: d::arg, args: {cmd: {matches: '.*w.{10}'}}, action: deny}
  - {id: allow-arg, function: a::arg, args: {cmd: {matches: '.*w.{10}'}}, action: allow}
  - {id: deny-cel, function: d::cel, when: 'args.cmd.matches("w.{10}$")', action: deny}
  - {id: allow-cel, function: a::cel, when: 'matches(args.cmd, "w.{10}$")', action: allow}
  - {id: deny-dyn, function: d::dyn, when: 'args.cmd.matches(args.re)', action: deny}
  - {id: allow-dyn, function: a::dyn, when: 'matches(args.cmd, args.re)', action: allow}
  - {id: rest, function: "*", action: needs_approval}
`
	p := mustParse(t, doc, WithRegexMatchBudget(budget))
	celInsts, err := progInsts("w.{10}$")
	if err != nil {
		t.Fatal(err)
	}
	dynSize, err := regexSize("w.{10}$")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		fn, rule string
		insts    uint64
	}{
		{"d::arg", "deny-arg", p.rules[0].constraints[0].re.insts},
		{"a::arg", "allow-arg", p.rules[1].constraints[0].re.insts},
		{"d::cel", "deny-cel", celInsts},
		{"a::cel", "allow-cel", celInsts},
		{"d::dyn", "deny-dyn", uint64(dynSize) + 4},
		{"a::dyn", "allow-dyn", uint64(dynSize) + 4},
	} {
		t.Run(tc.fn, func(t *testing.T) {
			t.Parallel()
			n := int(budget / tc.insts)
			in := strings.Repeat("x", n-11) + "w" + strings.Repeat("x", 10)
			d := p.Check(tc.fn, map[string]any{"cmd": in, "re": "w.{10}$"})
			if d.RuleID != tc.rule || d.Reason != "" {
				t.Errorf("%d bytes (%d instructions): %+v, want %s", n, tc.insts, d, tc.rule)
			}
			d = p.Check(tc.fn, map[string]any{"cmd": "x" + in, "re": "w.{10}$"})
			want := tc.rule
			if strings.HasPrefix(tc.rule, "allow") {
				want = "rest"
			}
			if d.RuleID != want {
				t.Errorf("%d bytes: %+v, want %s", n+1, d, want)
			}
			if want != "rest" && !strings.Contains(d.Reason, "regex match budget") {
				t.Errorf("reason %q", d.Reason)
			}
		})
	}
}
