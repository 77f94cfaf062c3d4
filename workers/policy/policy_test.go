package policy

import (
	"errors"
	"strings"
	"testing"
)

func mustParse(t testing.TB, doc string, opts ...Option) *Policy {
	t.Helper()
	p, err := Parse([]byte(doc), opts...)
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, doc)
	}
	return p
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	big := "version: 1\nrules:\n" + strings.Repeat("  - \"fs::read\"\n", MaxFileBytes/15+1)
	tests := []struct {
		name string
		doc  string
		rule int    // want ParseError.Rule
		want string // substring of the message
	}{
		{"empty file", "", -1, "empty"},
		{"only a comment", "# nothing\n", -1, "empty"},
		{"not a mapping", "- fs::read\n", -1, "must be a mapping"},
		{"version missing", "rules: []\n", -1, "version is missing"},
		{"version 2", "version: 2\nrules: []\n", -1, "not supported"},
		{"version string", "version: \"1\"\nrules: []\n", -1, "must be the integer 1"},
		{"version float", "version: 1.0\nrules: []\n", -1, "must be the integer 1"},
		{"version hex", "version: 0x1\nrules: []\n", -1, "not supported"},
		{"rules missing", "version: 1\n", -1, "rules is missing"},
		{"rules null", "version: 1\nrules:\n", -1, "rules must be a list, not null"},
		{"rules mapping", "version: 1\nrules: {a: b}\n", -1, "rules must be a list"},
		{"unknown top key", "version: 1\nrules: []\nrule: []\n", -1, `unknown key "rule"`},
		{"duplicate top key", "version: 1\nrules: []\nrules: []\n", -1, "twice"},
		{"two documents", "version: 1\nrules: []\n---\nversion: 1\nrules: []\n", -1, "more than one YAML document"},
		{"bad yaml", "version: 1\nrules: [\n", -1, ""},
		{"tab indent", "version: 1\nrules:\n\t- fs::read\n", -1, ""},
		{"invalid utf8", "version: 1\nrules: [\"fs::\xff\"]\n", -1, "UTF-8"},
		{"too large", big, -1, "limit"},
		{"empty pattern", "version: 1\nrules: [\"\"]\n", 0, "empty function pattern"},
		{"bare bang", "version: 1\nrules: [\"!\"]\n", 0, "empty function pattern"},
		{"double bang", "version: 1\nrules: [\"!!fs::read\"]\n", 0, "starts with '!'"},
		{"empty segment", "version: 1\nrules: [\"fs::\"]\n", 0, "empty segment"},
		{"leading separator", "version: 1\nrules: [\"::*\"]\n", 0, "empty segment"},
		{"whitespace", "version: 1\nrules: [\"fs read\"]\n", 0, "whitespace"},
		{"newline", "version: 1\nrules: [\"fs::read\\n\"]\n", 0, "whitespace"},
		{"control char", "version: 1\nrules: [\"fs::read\\u0000\"]\n", 0, "control"},
		{"unquoted bang is a tag", "version: 1\nrules:\n  - fs::read\n  - !state::set\n", 1, "quote it"},
		{"number rule", "version: 1\nrules: [123]\n", 0, "not a number"},
		{"null rule", "version: 1\nrules: [null]\n", 0, "not null"},
		{"list rule", "version: 1\nrules: [[a]]\n", 0, "not a list"},
		{"binary tag", "version: 1\nrules: [!!binary Zm9v]\n", 0, "!!binary"},
		{"anchor", "version: 1\nrules:\n  - &a \"fs::read\"\n  - *a\n", 0, "anchors"},
		{"alias", "version: 1\nx: &a 1\nrules: []\n", -1, "anchors"},
		{"third rule named", "version: 1\nrules:\n  - fs::read\n  - fs::ls\n  - \"fs:: x\"\n", 2, "whitespace"},
		{"function missing", "version: 1\nrules:\n  - action: allow\n", 0, "function is missing"},
		{"action missing", "version: 1\nrules:\n  - function: fs::read\n", 0, "action is missing"},
		{"action unknown", "version: 1\nrules:\n  - {function: fs::read, action: maybe}\n", 0, "not allow, deny or needs_approval"},
		{"action case", "version: 1\nrules:\n  - {function: fs::read, action: Allow}\n", 0, "not allow"},
		{"action null", "version: 1\nrules:\n  - {function: fs::read, action: }\n", 0, "action must be a string, not null"},
		{"unknown rule key", "version: 1\nrules:\n  - {fuction: fs::read, action: allow}\n", 0, `unknown key "fuction"`},
		{"duplicate rule key", "version: 1\nrules:\n  - {function: fs::read, function: fs::ls, action: allow}\n", 0, "twice"},
		{"function not string", "version: 1\nrules:\n  - {function: 1, action: allow}\n", 0, "function must be a string"},
		{"function with bang", "version: 1\nrules:\n  - {function: \"!fs::read\", action: allow}\n", 0, "starts with '!'"},
		{"args list", "version: 1\nrules:\n  - {function: fs::read, args: [path], action: allow}\n", 0, "args must be a mapping"},
		{"args null", "version: 1\nrules:\n  - function: fs::read\n    args:\n    action: allow\n", 0, "args must be a mapping, not null"},
		{"constraint empty", "version: 1\nrules:\n  - {function: fs::read, args: {path: {}}, action: allow}\n", 0, "neither equals nor matches"},
		{"constraint scalar", "version: 1\nrules:\n  - {function: fs::read, args: {path: /tmp}, action: allow}\n", 0, "must be a mapping"},
		{"constraint unknown test", "version: 1\nrules:\n  - {function: fs::read, args: {path: {contains: x}}, action: allow}\n", 0, `unknown test "contains"`},
		{"constraint empty segment", "version: 1\nrules:\n  - {function: fs::read, args: {a..b: {equals: 1}}, action: allow}\n", 0, "empty segment"},
		{"constraint trailing dot", "version: 1\nrules:\n  - {function: fs::read, args: {\"a.\": {equals: 1}}, action: allow}\n", 0, "empty segment"},
		{"equals null", "version: 1\nrules:\n  - {function: fs::read, args: {p: {equals: null}}, action: allow}\n", 0, "not null"},
		{"equals list", "version: 1\nrules:\n  - {function: fs::read, args: {p: {equals: [1]}}, action: allow}\n", 0, "not a list"},
		{"equals nan", "version: 1\nrules:\n  - {function: fs::read, args: {p: {equals: .nan}}, action: allow}\n", 0, "finite"},
		{"equals inf", "version: 1\nrules:\n  - {function: fs::read, args: {p: {equals: .inf}}, action: allow}\n", 0, "finite"},
		{"matches empty", "version: 1\nrules:\n  - {function: fs::read, args: {p: {matches: \"\"}}, action: allow}\n", 0, "matches is empty"},
		{"matches number", "version: 1\nrules:\n  - {function: fs::read, args: {p: {matches: 1}}, action: allow}\n", 0, "matches must be a string"},
		{"matches bad", "version: 1\nrules:\n  - {function: fs::read, args: {p: {matches: \"(\"}}, action: allow}\n", 0, "does not compile"},
		{"matches escapes group", "version: 1\nrules:\n  - {function: fs::read, args: {p: {matches: \"a)|(b\"}}, action: allow}\n", 0, "does not compile"},
		{"matches escapes with alternation", "version: 1\nrules:\n  - {function: fs::read, args: {p: {matches: \"x)|.*|(y\"}}, action: allow}\n", 0, "does not compile"},
		{"matches unterminated quote", "version: 1\nrules:\n  - {function: fs::read, args: {p: {matches: \"\\\\Qabc\"}}, action: allow}\n", 0, "does not compile"},
		{"matches backreference", "version: 1\nrules:\n  - {function: fs::read, args: {p: {matches: \"(a)\\\\1\"}}, action: allow}\n", 0, "does not compile"},
		{"matches lookahead", "version: 1\nrules:\n  - {function: fs::read, args: {p: {matches: \"(?=a)\"}}, action: allow}\n", 0, "does not compile"},
		{"when empty", "version: 1\nrules:\n  - {function: fs::read, when: \"\", action: allow}\n", 0, "when is empty"},
		{"when null", "version: 1\nrules:\n  - function: fs::read\n    when:\n    action: allow\n", 0, "when must be a string"},
		{"when syntax", "version: 1\nrules:\n  - {function: fs::read, when: \"args.\", action: allow}\n", 0, "does not compile"},
		{"when not bool", "version: 1\nrules:\n  - {function: fs::read, when: \"args.path\", action: allow}\n", 0, "must be a bool"},
		{"when string", "version: 1\nrules:\n  - {function: fs::read, when: \"'yes'\", action: allow}\n", 0, "must be a bool"},
		{"when int", "version: 1\nrules:\n  - {function: fs::read, when: \"1\", action: allow}\n", 0, "must be a bool"},
		{"when unknown variable", "version: 1\nrules:\n  - {function: fs::read, when: \"user == 'root'\", action: allow}\n", 0, "does not compile"},
		{"when type error", "version: 1\nrules:\n  - {function: fs::read, when: \"function_id + 1 == 2\", action: allow}\n", 0, "does not compile"},
		{"when too long", "version: 1\nrules:\n  - {function: fs::read, when: \"" + strings.Repeat("true && ", 600) + "true\", action: allow}\n", 0, "limit"},
		{"id bad", "version: 1\nrules:\n  - {id: \"has space\", function: fs::read, action: allow}\n", 0, "must be 1 to 64"},
		{"id automatic", "version: 1\nrules:\n  - {id: rule-3, function: fs::read, action: allow}\n", 0, "automatic"},
		{"id reserved", "version: 1\nrules:\n  - {id: invalid_function_id, function: fs::read, action: allow}\n", 0, "reserved"},
		{"id duplicate", "version: 1\nrules:\n  - {id: a, function: fs::read, action: allow}\n  - {id: a, function: fs::ls, action: allow}\n", 1, "already the id of rules[0]"},
		{"reason number", "version: 1\nrules:\n  - {function: fs::read, reason: 1, action: deny}\n", 0, "reason must be a string"},
		{"reason too long", "version: 1\nrules:\n  - {function: fs::read, reason: \"" + strings.Repeat("x", MaxReasonLen+1) + "\", action: deny}\n", 0, "limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse accepted it: %d rules", p.Len())
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("error %v is not ErrInvalidPolicy", err)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError", err)
			}
			if pe.Rule != tc.rule {
				t.Errorf("Rule = %d, want %d (%v)", pe.Rule, tc.rule, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if tc.rule >= 0 && !strings.Contains(err.Error(), "rules[") {
				t.Errorf("error %q does not name the rule", err)
			}
		})
	}
}

func TestParseLineNumbers(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("version: 1\nrules:\n  - fs::read\n\n  - function: fs::write\n    args:\n      path: {matches: \"[\"}\n    action: allow\n"))
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v", err)
	}
	if pe.Rule != 1 || pe.Line != 7 {
		t.Fatalf("Rule, Line = %d, %d; want 1, 7 (%v)", pe.Rule, pe.Line, err)
	}
	if !strings.HasPrefix(err.Error(), "policy: invalid policy: rules[1] (line 7): ") {
		t.Fatalf("err = %q", err)
	}
}

func TestParseAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		ids  []string
	}{
		{"empty rules", "version: 1\nrules: []\n", []string{}},
		{"spec example", specExample, []string{"rule-0", "rule-1", "rule-2", "rule-3"}},
		{"explicit ids", "version: 1\nrules:\n  - fs::read\n  - {id: no-shell, function: \"shell::*\", action: deny}\n  - {id: ask.fs, function: \"fs::*\", action: needs_approval}\n", []string{"rule-0", "no-shell", "ask.fs"}},
		{"flow style", "{version: 1, rules: [\"fs::read\", \"!fs::write\"]}", []string{"rule-0", "rule-1"}},
		{"document marker", "---\nversion: 1\nrules: []\n...\n", []string{}},
		{"comments", "# c\nversion: 1 # v\nrules: # r\n  - fs::read # allow\n", []string{"rule-0"}},
		{"non-specific tag", "version: 1\nrules: [! fs::read]\n", []string{"rule-0"}},
		{"str tag", "version: 1\nrules: [!!str fs::read]\n", []string{"rule-0"}},
		{"literal glob chars", "version: 1\nrules: [\"a::[b]?\", \"x::(y)+\"]\n", []string{"rule-0", "rule-1"}},
		{"equals kinds", "version: 1\nrules:\n  - function: x::y\n    args: {a: {equals: \"0\"}, b: {equals: 0}, c: {equals: 1.5}, d: {equals: true}, e.f: {equals: -3}, g: {equals: 18446744073709551615}}\n    action: allow\n", []string{"rule-0"}},
		{"both tests", "version: 1\nrules:\n  - {function: x::y, args: {a: {equals: ab, matches: \"a.\"}}, action: allow}\n", []string{"rule-0"}},
		{"when and args", "version: 1\nrules:\n  - {function: x::y, args: {a: {equals: 1}}, when: \"args.a > 0\", action: deny, reason: no}\n", []string{"rule-0"}},
		{"default policy", string(defaultYAML), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := mustParse(t, tc.doc)
			if tc.ids == nil {
				return
			}
			got := p.RuleIDs()
			if strings.Join(got, ",") != strings.Join(tc.ids, ",") {
				t.Fatalf("ids = %v, want %v", got, tc.ids)
			}
		})
	}
}

const specExample = `version: 1
rules:
  - "models::*"              # allow
  - "!state::set"            # deny
  - function: "shell::exec"  # object rule
    action: deny
    args: { command: { matches: "rm .*" } }
  - function: "fs::write"
    action: allow
    when: 'args.path.startsWith("/workspace/")'   # CEL condition
`

func TestCheck(t *testing.T) {
	t.Parallel()
	p := mustParse(t, specExample+`
  - function: "shell::exec"
    args: { command: { matches: "ls( [-a-z./]+)*" } }
    action: allow
  - function: "num::*"
    args: { n: { equals: 1 }, s: { equals: "0" } }
    action: allow
  - function: "deep::*"
    args: { options.mode: { equals: "ro" } }
    action: allow
  - id: ask-net
    function: "net::*"
    action: needs_approval
    reason: network access is reviewed
  - "*::read"
  - "!*"
`)
	tests := []struct {
		id       string
		args     any
		decision Action
		rule     string
	}{
		{"models::list", nil, Allow, "rule-0"},
		{"models::provider::anthropic", nil, Allow, "rule-0"},
		{"state::set", map[string]any{"scope": "x"}, Deny, "rule-1"},
		{"shell::exec", map[string]any{"command": "rm -rf /"}, Deny, "rule-2"},
		{"shell::exec", map[string]any{"command": "ls -la /tmp"}, Allow, "rule-4"},
		{"shell::exec", map[string]any{"command": "cat /etc/passwd"}, Deny, "rule-9"},
		{"fs::write", map[string]any{"path": "/workspace/a.txt"}, Allow, "rule-3"},
		{"fs::write", map[string]any{"path": "/etc/passwd"}, Deny, "rule-9"},
		{"fs::write", map[string]any{}, Deny, "rule-9"},
		{"num::x", map[string]any{"n": 1.0, "s": "0"}, Allow, "rule-5"},
		{"num::x", map[string]any{"n": int64(1), "s": "0"}, Allow, "rule-5"},
		{"num::x", map[string]any{"n": uint8(1), "s": "0"}, Allow, "rule-5"},
		{"num::x", map[string]any{"n": "1", "s": "0"}, Deny, "rule-9"},
		{"num::x", map[string]any{"n": 1, "s": 0}, Deny, "rule-9"},
		{"num::x", map[string]any{"n": 1.5, "s": "0"}, Deny, "rule-9"},
		{"deep::x", map[string]any{"options": map[string]any{"mode": "ro"}}, Allow, "rule-6"},
		{"deep::x", map[string]any{"options": map[string]any{"mode": "rw"}}, Deny, "rule-9"},
		{"deep::x", map[string]any{"options.mode": "ro"}, Deny, "rule-9"},
		{"net::fetch", nil, NeedsApproval, "ask-net"},
		{"fs::read", nil, Allow, "rule-8"},
		{"other::thing", nil, Deny, "rule-9"},
		{"bad id", nil, Deny, RuleInvalidFunctionID},
	}
	for _, tc := range tests {
		d := p.Check(tc.id, tc.args)
		if d.Decision != tc.decision || d.RuleID != tc.rule {
			t.Errorf("Check(%q, %v) = %+v, want %s by %s", tc.id, tc.args, d, tc.decision, tc.rule)
		}
	}
	d := p.Check("shell::exec", map[string]any{"command": "rm -rf /"})
	if d.MatchedConstraint != `args.command matches "rm .*"` {
		t.Errorf("MatchedConstraint = %q", d.MatchedConstraint)
	}
	if d := p.Check("net::fetch", nil); d.Reason != "network access is reviewed" {
		t.Errorf("Reason = %q", d.Reason)
	}
}

func TestEmptyRulesNeedApproval(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "version: 1\nrules: []\n")
	for _, id := range []string{"state::set", "approval::resolve", "models::list", "x"} {
		if d := p.Check(id, map[string]any{"a": 1}); d.Decision != NeedsApproval || d.RuleID != "" {
			t.Errorf("Check(%q) = %+v, want needs_approval with no rule", id, d)
		}
	}
	if d := p.Check("a b", nil); d.Decision != Deny || d.RuleID != RuleInvalidFunctionID {
		t.Errorf("invalid id on an empty policy = %+v", d)
	}
}

func TestNilPolicyDenies(t *testing.T) {
	t.Parallel()
	var p *Policy
	if d := p.Check("models::list", nil); d.Decision != Deny || d.RuleID != RuleNoPolicy {
		t.Fatalf("nil policy: %+v", d)
	}
	if p.Len() != 0 || p.RuleIDs() != nil {
		t.Fatal("nil policy has rules")
	}
}

func TestDefaultPolicy(t *testing.T) {
	t.Parallel()
	p, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{
		"engine::functions::list", "engine::workers::list", "models::list", "models::get",
		"directory::skills::get", "directory::skills::list", "directory::skills::index",
		"state::get", "state::list", "turn::get_state", "fs::read", "fs::ls", "fs::glob", "fs::grep",
	}
	denied := []string{
		"approval::resolve", "approval::list_pending", "state::set", "state::update", "state::delete",
		"provider::anthropic::stream", "provider::scripted::complete", "run::start", "run::abort",
		"harness::trigger", "agent::trigger", "turn::advance", "session::inbox_push", "session::fork",
		"policy::reload", "policy::status", "policy::check_permissions", "hooks::publish_collect",
		"queue::redrive", "topic::publish", "cron::register", "http::register", "auth::get_token",
		"auth::status", "budget::create", "budget::reserve", "budget::settle", "engine::traces::tree",
		"sandbox::create", "sandbox::exec", "sandbox::destroy", "sandbox::list",
	}
	approval := []string{"fs::write", "fs::edit", "fs::delete", "shell::exec", "web::fetch", "models", "fs::readx", "xfs::read", "fs::read::evil"}
	for _, id := range allowed {
		if d := p.Check(id, map[string]any{}); d.Decision != Allow {
			t.Errorf("default %s = %+v, want allow", id, d)
		}
	}
	for _, id := range denied {
		if d := p.Check(id, map[string]any{}); d.Decision != Deny {
			t.Errorf("default %s = %+v, want deny", id, d)
		}
	}
	for _, id := range approval {
		if d := p.Check(id, map[string]any{}); d.Decision != NeedsApproval {
			t.Errorf("default %s = %+v, want needs_approval", id, d)
		}
	}
	if !strings.Contains(string(DefaultYAML()), "version: 1") {
		t.Fatal("DefaultYAML does not look like a policy")
	}
}

func TestGlob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, id string
		want        bool
	}{
		{"fs::read", "fs::read", true},
		{"fs::read", "xfs::read", false},
		{"fs::read", "fs::read::evil", false},
		{"fs::read", "fs::rea", false},
		{"fs::read", "FS::READ", false},
		{"fs::*", "fs::read", true},
		{"fs::*", "fs::read::deep", true},
		{"fs::*", "fs", false},
		{"fs::*", "xfs::read", false},
		{"fs*", "fs::read", true},
		{"fs*", "fsx", true},
		{"*::read", "fs::read", true},
		{"*::read", "a::b::read", true},
		{"*::read", "fs::read::x", false},
		{"*::read", "fs::readx", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXbYcZ", false},
		{"a*b*c", "acb", false},
		{"*", "anything::at::all", true},
		{"**", "x", true},
		{"a::?", "a::?", true},
		{"a::?", "a::b", false},
		{"a::[bc]", "a::b", false},
		{"a::[bc]", "a::[bc]", true},
		{"a::.*", "a::xyz", false},
		{"a::.*", "a::.*", true},
		{"a::b+", "a::bb", false},
		{"*a*a*a*a*a*b", strings.Repeat("a", 200), false},
	}
	for _, tc := range tests {
		g, err := compileGlob(tc.pattern)
		if err != nil {
			t.Fatalf("compileGlob(%q): %v", tc.pattern, err)
		}
		if got := g.match(tc.id); got != tc.want {
			t.Errorf("%q matches %q = %v, want %v", tc.pattern, tc.id, got, tc.want)
		}
		if got := wildcard(tc.pattern, tc.id); got != tc.want {
			t.Errorf("wildcard(%q, %q) = %v, want %v", tc.pattern, tc.id, got, tc.want)
		}
	}
}

func TestParseOptions(t *testing.T) {
	t.Parallel()
	bad := []Option{WithMaxArgsBytes(10), WithMaxArgsDepth(0), WithCELCostLimit(0), WithCELTimeout(0), WithRegexProgramLimit(99), WithRegexProgramLimit(1_000_001), WithRegexMatchBudget(1<<16 - 1), WithRegexMatchBudget(1<<36 + 1), WithPollInterval(0), WithLogger(nil), WithFallback(nil), WithClock(nil)}
	for i, o := range bad {
		if _, err := Parse([]byte("version: 1\nrules: []\n"), o); err == nil {
			t.Errorf("option %d accepted", i)
		}
	}
}
