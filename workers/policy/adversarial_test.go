package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/subjects"
)

// The adversarial suite: crafted function ids and args must never get an
// allow they should not, slip past a deny, or make the gate fail open.

type attempt struct {
	name string
	id   string
	args any
}

func expectNot(t *testing.T, p *Policy, not Action, attempts []attempt) {
	t.Helper()
	for _, a := range attempts {
		if d := p.Check(a.id, a.args); d.Decision == not {
			t.Errorf("%s: Check(%q, %#v) = %+v; must not be %s", a.name, a.id, a.args, d, not)
		}
	}
}

func expect(t *testing.T, p *Policy, want Action, attempts []attempt) {
	t.Helper()
	for _, a := range attempts {
		if d := p.Check(a.id, a.args); d.Decision != want {
			t.Errorf("%s: Check(%q, %#v) = %+v; want %s", a.name, a.id, a.args, d, want)
		}
	}
}

func TestAdversarialRuleOrder(t *testing.T) {
	t.Parallel()
	denyFirst := mustParse(t, "version: 1\nrules: [\"!state::set\", \"state::*\"]\n")
	expect(t, denyFirst, Deny, []attempt{{"deny before glob", "state::set", map[string]any{"scope": "s", "key": "k", "value": 1}}})
	expect(t, denyFirst, Allow, []attempt{{"glob after deny", "state::get", nil}, {"glob deep", "state::set::x", nil}})
	// First match wins: an allow glob before a deny makes the deny dead.
	allowFirst := mustParse(t, "version: 1\nrules: [\"state::*\", \"!state::set\"]\n")
	if d := allowFirst.Check("state::set", nil); d.Decision != Allow || d.RuleID != "rule-0" {
		t.Fatalf("first match must win: %+v", d)
	}
}

func TestAdversarialGlobAnchoring(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "version: 1\nrules: [\"fs::read\", \"!state::set\", \"models::*\"]\n")
	expectNot(t, p, Allow, []attempt{
		{"prefix", "xfs::read", nil},
		{"suffix segment", "fs::read::evil", nil},
		{"suffix chars", "fs::readx", nil},
		{"shorter", "fs::rea", nil},
		{"case", "FS::READ", nil},
		{"triple colon", "fs:::read", nil},
		{"dot", "fs.read", nil},
		{"zero width space", "fs::read\u200b", nil},
		{"leading zero width", "\u200bfs::read", nil},
		{"cyrillic a", "fs::re\u0430d", nil},
		{"fullwidth", "\uff46\uff53::read", nil},
		{"combining", "fs::re\u0301ad", nil},
		{"models prefix glob does not cross", "xmodels::list", nil},
		{"models needs the separator", "models", nil},
		{"models without separator", "modelsx::list", nil},
	})
	expect(t, p, Allow, []attempt{{"models glob spans segments", "models::a::b", nil}})
}

// Every id a deny rule should catch is caught, and every variant that is not
// caught routes to another subject: no spelling reaches state::set's
// endpoint past "!state::set".
func TestAdversarialDenyEvasionByID(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "version: 1\nrules: [\"!state::set\", \"*\"]\n")
	target := subjects.MustFunctionSubject("state::set")
	variants := []string{
		"state::set", "state::set ", " state::set", "state::set\n", "\nstate::set", "state::set\r", "state::set\x00",
		"state::set\t", "state::set\u2028", "state::set\u0085", "state::set\u00a0", "state::set\u200b", "State::Set",
		"STATE::SET", "state::Set", "state:: set", "state::::set", "state.set", "state::set::", "::state::set",
		"st\u0430te::set", "state::set\xff", "state::set\u202e", "state::se\u0074", "state::set*", "state::se*",
		"state%3A%3Aset", "state~3A~3Aset", "state::set/", "state::set.", "state::set>", "state::*",
	}
	for _, id := range variants {
		d := p.Check(id, nil)
		if d.Decision == Deny {
			continue
		}
		if subj, err := subjects.FunctionSubject(id); err == nil && subj == target {
			t.Errorf("%q routes to %s and got %+v past the deny", id, target, d)
		}
		if subjects.ValidateFunctionID(id) != nil {
			t.Errorf("invalid id %q was not denied: %+v", id, d)
		}
	}
}

func TestAdversarialInvalidIDs(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "version: 1\nrules: [\"*\"]\n")
	for _, id := range []string{
		"", " ", "\n", "fs::read\n", "\nfs::read", "fs::\nread", "fs::read\r\n", "fs::read\t", "fs::read\x00",
		"fs::read\x7f", "fs::read\u2028", "fs::read\u0085", "fs::read\u00a0", "fs::read\xff", "fs::read\xc0\xaf",
		"fs::", "::fs", "fs::::read", strings.Repeat("a", subjects.MaxFunctionIDLen+1),
	} {
		d := p.Check(id, nil)
		if d.Decision != Deny || d.RuleID != RuleInvalidFunctionID {
			t.Errorf("Check(%q) = %+v, want deny by %s", id, d, RuleInvalidFunctionID)
		}
		if strings.ContainsAny(d.Reason, "\n\r") {
			t.Errorf("reason for %q carries a raw newline: %q", id, d.Reason)
		}
	}
}

func TestAdversarialRegexAnchoring(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `version: 1
rules:
  - function: shell::exec
    args: {command: {matches: "ls( [-a-z./]+)*"}}
    action: allow
  - function: echo::say
    args: {text: {matches: ".*"}}
    action: allow
  - function: alt::x
    args: {v: {matches: "ls|"}}
    action: allow
`)
	var attempts []attempt
	for _, cmd := range []string{
		"ls; rm -rf /", "ls\nrm -rf /", "ls -la\n", "ls\n", "rm -rf / #ls", "ls && rm -rf /", "ls $(rm -rf /)",
		"ls `rm -rf /`", "ls\x00rm", "ls -la /tmp\r\nrm -rf /", " ls", "lsx", "xls", "ls | sh", "LS",
		"ls\u2028rm -rf /",
	} {
		attempts = append(attempts, attempt{"shell " + fmt.Sprintf("%q", cmd), "shell::exec", map[string]any{"command": cmd}})
	}
	attempts = append(attempts,
		attempt{"dot does not cross lines in allow rules", "echo::say", map[string]any{"text": "hi\nrm -rf /"}},
		attempt{"alternation stays anchored", "alt::x", map[string]any{"v": "xls"}},
		attempt{"alternation stays anchored 2", "alt::x", map[string]any{"v": "lsx"}},
	)
	expectNot(t, p, Allow, attempts)
	expect(t, p, Allow, []attempt{
		{"plain ls", "shell::exec", map[string]any{"command": "ls -la /tmp"}},
		{"empty alternative", "alt::x", map[string]any{"v": ""}},
		{"one line", "echo::say", map[string]any{"text": "hi"}},
	})
}

func TestAdversarialDenyRegex(t *testing.T) {
	t.Parallel()
	// matches is anchored: "^rm " (the spec's example) is exactly "rm ".
	exact := mustParse(t, "version: 1\nrules:\n  - {function: shell::exec, args: {command: {matches: \"^rm \"}}, action: deny}\n  - shell::exec\n")
	expect(t, exact, Deny, []attempt{{"exact", "shell::exec", map[string]any{"command": "rm "}}})
	expect(t, exact, Allow, []attempt{{"anchored both ends", "shell::exec", map[string]any{"command": "rm -rf /"}}})

	// "rm .*" in a deny rule: '.' crosses newlines, so a second line cannot
	// hide the match; it still only catches commands that start with rm.
	prefix := mustParse(t, "version: 1\nrules:\n  - {function: shell::exec, args: {command: {matches: \"rm .*\"}}, action: deny}\n  - shell::exec\n")
	expect(t, prefix, Deny, []attempt{
		{"plain", "shell::exec", map[string]any{"command": "rm -rf /"}},
		{"second line", "shell::exec", map[string]any{"command": "rm -rf /\necho done"}},
		{"crlf", "shell::exec", map[string]any{"command": "rm -rf /\r\n"}},
		{"msgpack bin", "shell::exec", map[string]any{"command": []byte("rm -rf /")}},
		{"list instead of string", "shell::exec", map[string]any{"command": []any{"rm", "-rf", "/"}}},
		{"object instead of string", "shell::exec", map[string]any{"command": map[string]any{"0": "rm -rf /"}}},
		{"number instead of string", "shell::exec", map[string]any{"command": 1}},
		{"args not an object", "shell::exec", "rm -rf /"},
		{"args a list", "shell::exec", []any{"rm -rf /"}},
		{"key case", "shell::exec", map[string]any{"Command": "rm -rf /"}},
		{"key upper", "shell::exec", map[string]any{"COMMAND": "rm -rf /"}},
	})
	expect(t, prefix, Allow, []attempt{
		{"leading newline is another command", "shell::exec", map[string]any{"command": "\nrm -rf /"}},
		{"missing key", "shell::exec", map[string]any{}},
		{"null", "shell::exec", map[string]any{"command": nil}},
	})

	// The pattern to write for a deny anywhere in the text.
	anywhere := mustParse(t, "version: 1\nrules:\n  - {function: shell::exec, args: {command: {matches: '.*\\brm\\b.*'}}, action: deny}\n  - shell::exec\n")
	expect(t, anywhere, Deny, []attempt{
		{"leading newline", "shell::exec", map[string]any{"command": "\nrm -rf /"}},
		{"after ;", "shell::exec", map[string]any{"command": "ls; rm -rf /"}},
		{"after newline", "shell::exec", map[string]any{"command": "ls\nrm -rf /"}},
		{"leading space", "shell::exec", map[string]any{"command": " rm -rf /"}},
		{"subshell", "shell::exec", map[string]any{"command": "echo $(rm -rf /)"}},
	})
	expect(t, anywhere, Allow, []attempt{{"harmless", "shell::exec", map[string]any{"command": "ls -la"}}})
}

func TestAdversarialTypeConfusion(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `version: 1
rules:
  - {function: "a::str", args: {v: {equals: "0"}}, action: allow}
  - {function: "a::num", args: {v: {equals: 0}}, action: allow}
  - {function: "a::bool", args: {v: {equals: false}}, action: allow}
  - {function: "a::one", args: {v: {equals: 1}}, action: allow}
  - {function: "a::big", args: {v: {equals: 9007199254740993}}, action: allow}
  - {function: "a::frac", args: {v: {equals: 0.5}}, action: allow}
`)
	expectNot(t, p, Allow, []attempt{
		{"number for string", "a::str", map[string]any{"v": 0}},
		{"float for string", "a::str", map[string]any{"v": 0.0}},
		{"bool for string", "a::str", map[string]any{"v": false}},
		{"list for string", "a::str", map[string]any{"v": []any{"0"}}},
		{"object for string", "a::str", map[string]any{"v": map[string]any{"0": "0"}}},
		{"null for string", "a::str", map[string]any{"v": nil}},
		{"missing", "a::str", map[string]any{}},
		{"padded string", "a::str", map[string]any{"v": "0 "}},
		{"string for number", "a::num", map[string]any{"v": "0"}},
		{"bool for number", "a::num", map[string]any{"v": false}},
		{"null for number", "a::num", map[string]any{"v": nil}},
		{"empty list for number", "a::num", map[string]any{"v": []any{}}},
		{"string for bool", "a::bool", map[string]any{"v": "false"}},
		{"number for bool", "a::bool", map[string]any{"v": 0}},
		{"true for one", "a::one", map[string]any{"v": true}},
		{"near one", "a::one", map[string]any{"v": 1.0000000000000002}},
		{"nan", "a::one", map[string]any{"v": math.NaN()}},
		{"inf", "a::one", map[string]any{"v": math.Inf(1)}},
		{"2^53+1 as float rounds", "a::big", map[string]any{"v": float64(9007199254740993)}},
		{"json number string", "a::one", map[string]any{"v": "1"}},
		{"half as string", "a::frac", map[string]any{"v": "0.5"}},
		{"args not an object", "a::one", 1},
		{"args a list", "a::one", []any{1}},
		{"args a string", "a::str", "0"},
	})
	expect(t, p, Allow, []attempt{
		{"string", "a::str", map[string]any{"v": "0"}},
		{"int", "a::num", map[string]any{"v": 0}},
		{"negative zero", "a::num", map[string]any{"v": math.Copysign(0, -1)}},
		{"float zero", "a::num", map[string]any{"v": 0.0}},
		{"uint8 zero", "a::num", map[string]any{"v": uint8(0)}},
		{"json number", "a::num", map[string]any{"v": json.Number("0")}},
		{"json number float", "a::one", map[string]any{"v": json.Number("1.0")}},
		{"json number exp", "a::one", map[string]any{"v": json.Number("1e0")}},
		{"1 == 1.0", "a::one", map[string]any{"v": 1.0}},
		{"int8", "a::one", map[string]any{"v": int8(1)}},
		{"uint64", "a::one", map[string]any{"v": uint64(1)}},
		{"float32", "a::one", map[string]any{"v": float32(1)}},
		{"bool", "a::bool", map[string]any{"v": false}},
		{"exact big int", "a::big", map[string]any{"v": int64(9007199254740993)}},
		{"big json number", "a::big", map[string]any{"v": json.Number("9007199254740993")}},
		{"frac", "a::frac", map[string]any{"v": 0.5}},
		{"frac float32", "a::frac", map[string]any{"v": float32(0.5)}},
	})

	// A deny rule whose constraint meets another type denies (fail closed).
	deny := mustParse(t, "version: 1\nrules:\n  - {function: \"a::*\", args: {v: {equals: 0}}, action: deny}\n  - \"a::*\"\n")
	expect(t, deny, Deny, []attempt{
		{"equal", "a::x", map[string]any{"v": 0}},
		{"string zero", "a::x", map[string]any{"v": "0"}},
		{"bool", "a::x", map[string]any{"v": false}},
		{"list", "a::x", map[string]any{"v": []any{0}}},
		{"nested where a value is expected", "a::x", map[string]any{"v": map[string]any{}}},
	})
	expect(t, deny, Allow, []attempt{
		{"other number", "a::x", map[string]any{"v": 1}},
		{"missing", "a::x", map[string]any{"w": 0}},
		{"null", "a::x", map[string]any{"v": nil}},
	})
}

func TestAdversarialPrototypeKeys(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `version: 1
rules:
  - {function: fs::write, args: {path: {matches: "/workspace/[a-z0-9_./-]*"}}, action: allow}
  - {function: proto::x, args: {__proto__: {equals: "ok"}}, action: allow}
  - {function: proto::cel, when: 'args.__proto__ == "ok"', action: allow}
  - {function: proto::ctor, args: {constructor.name: {equals: "Object"}}, action: allow}
`)
	expectNot(t, p, Allow, []attempt{
		{"path under __proto__", "fs::write", map[string]any{"__proto__": map[string]any{"path": "/workspace/a"}, "path": "/etc/passwd"}},
		{"path only under __proto__", "fs::write", map[string]any{"__proto__": map[string]any{"path": "/workspace/a"}}},
		{"path under constructor.prototype", "fs::write", map[string]any{"constructor": map[string]any{"prototype": map[string]any{"path": "/workspace/a"}}}},
		{"toString", "fs::write", map[string]any{"toString": "/workspace/a"}},
		{"hasOwnProperty", "fs::write", map[string]any{"hasOwnProperty": "path", "path": 1}},
		{"__proto__ wrong value", "proto::x", map[string]any{"__proto__": "evil"}},
		{"__proto__ object", "proto::x", map[string]any{"__proto__": map[string]any{"ok": true}}},
		{"__proto__ missing", "proto::x", map[string]any{"constructor": "ok"}},
		{"cel __proto__ missing", "proto::cel", map[string]any{}},
		{"constructor missing", "proto::ctor", map[string]any{}},
		{"constructor flat key", "proto::ctor", map[string]any{"constructor.name": "Object"}},
		{"traversal outside", "fs::write", map[string]any{"path": "/etc/../workspace"}},
		{"lookalike dir", "fs::write", map[string]any{"path": "/w\u043erkspace/a"}},
		{"newline after path", "fs::write", map[string]any{"path": "/workspace/a\n/etc/passwd"}},
	})
	expect(t, p, Allow, []attempt{
		{"literal __proto__", "proto::x", map[string]any{"__proto__": "ok"}},
		{"cel literal __proto__", "proto::cel", map[string]any{"__proto__": "ok"}},
		{"nested constructor", "proto::ctor", map[string]any{"constructor": map[string]any{"name": "Object"}}},
	})
}

func TestAdversarialCaseFoldedKeys(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `version: 1
rules:
  - {function: shell::exec, args: {command: {matches: "rm .*"}}, action: deny}
  - {function: kv::put, args: {key: {equals: "secret"}}, action: deny}
  - {function: size::x, args: {size: {equals: 1}}, action: deny}
  - {function: fs::write, args: {path: {matches: "/workspace/.*"}}, action: allow}
  - shell::exec
  - kv::put
  - size::x
`)
	expect(t, p, Deny, []attempt{
		{"title case", "shell::exec", map[string]any{"Command": "rm -rf /"}},
		{"kelvin sign", "kv::put", map[string]any{"\u212aey": "secret"}},
		{"long s", "size::x", map[string]any{"\u017fize": 1}},
	})
	ambiguous := []attempt{
		{"two spellings", "shell::exec", map[string]any{"command": "ls", "Command": "rm -rf /"}},
		{"kelvin collision", "kv::put", map[string]any{"key": "public", "\u212aey": "secret"}},
		{"nested collision", "fs::write", map[string]any{"path": "/workspace/a", "opts": map[string]any{"mode": "a", "MODE": "b"}}},
		{"collision in a list", "fs::write", map[string]any{"path": "/workspace/a", "l": []any{map[string]any{"x": 1, "X": 2}}}},
	}
	wide := map[string]any{"path": "/workspace/a"}
	for i := range 40 {
		wide[fmt.Sprintf("k%d", i)] = i
	}
	wide["PATH"] = "/etc/passwd"
	ambiguous = append(ambiguous, attempt{"collision in a wide object", "fs::write", wide})
	for _, a := range ambiguous {
		if d := p.Check(a.id, a.args); d.Decision != Deny || d.RuleID != RuleAmbiguousArgs {
			t.Errorf("%s: %+v, want deny by %s", a.name, d, RuleAmbiguousArgs)
		}
	}
	// Allow rules read the key as written.
	expectNot(t, p, Allow, []attempt{{"allow needs the exact key", "fs::write", map[string]any{"Path": "/workspace/a"}}})
}

func TestAdversarialHugeAndDeepArgs(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "version: 1\nrules: [\"*\"]\n")
	huge := strings.Repeat("a", DefaultMaxArgsBytes)
	many := map[string]any{}
	for i := range 20000 {
		many[fmt.Sprintf("key-%06d", i)] = i
	}
	wide := make([]any, 100000)
	for i := range wide {
		wide[i] = i
	}
	type blob struct{ Data string }
	cases := []struct {
		name string
		args any
		rule string
	}{
		{"one huge string", map[string]any{"content": huge}, RuleArgsTooLarge},
		{"huge bytes", map[string]any{"content": []byte(huge)}, RuleArgsTooLarge},
		{"huge key", map[string]any{huge: 1}, RuleArgsTooLarge},
		{"many keys", many, RuleArgsTooLarge},
		{"wide list", map[string]any{"l": wide}, RuleArgsTooLarge},
		{"huge top-level string", huge + "x", RuleArgsTooLarge},
		{"huge struct", blob{Data: huge}, RuleArgsTooLarge},
		{"deep objects", nest(DefaultMaxArgsDepth+1, false), RuleArgsTooDeep},
		{"deep lists", nest(1000, true), RuleArgsTooDeep},
		{"unsupported", map[string]any{"ch": make(chan int)}, RuleInvalidArgs},
		{"func", func() {}, RuleInvalidArgs},
	}
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	cases = append(cases, struct {
		name string
		args any
		rule string
	}{"cycle", cyclic, RuleArgsTooDeep})
	for _, tc := range cases {
		start := time.Now()
		d := p.Check("fs::write", tc.args)
		if d.Decision != Deny || d.RuleID != tc.rule {
			t.Errorf("%s: %+v, want deny by %s", tc.name, d, tc.rule)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("%s took %v", tc.name, el)
		}
	}
	if d := p.Check("fs::write", nest(DefaultMaxArgsDepth-1, false)); d.Decision != Allow {
		t.Errorf("nesting under the limit: %+v", d)
	}
	if d := p.Check("fs::write", map[string]any{"content": strings.Repeat("a", DefaultMaxArgsBytes-64)}); d.Decision != Allow {
		t.Errorf("args under the limit: %+v", d)
	}
	small := mustParse(t, "version: 1\nrules: [\"*\"]\n", WithMaxArgsBytes(1024), WithMaxArgsDepth(2))
	if d := small.Check("x", map[string]any{"a": strings.Repeat("b", 1100)}); d.RuleID != RuleArgsTooLarge {
		t.Errorf("WithMaxArgsBytes: %+v", d)
	}
	if d := small.Check("x", nest(3, false)); d.RuleID != RuleArgsTooDeep {
		t.Errorf("WithMaxArgsDepth: %+v", d)
	}
}

// nest builds n levels of objects (or lists) around a string.
func nest(n int, lists bool) any {
	var v any = "leaf"
	for range n {
		if lists {
			v = []any{v}
		} else {
			v = map[string]any{"a": v}
		}
	}
	return v
}

func TestAdversarialNonObjectArgs(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `version: 1
rules:
  - {function: "c::allow", args: {x: {equals: 1}}, action: allow}
  - {function: "w::allow", when: 'args.x == 1', action: allow}
  - {function: "c::deny", args: {x: {equals: 1}}, action: deny}
  - {function: "w::deny", when: 'args.x == 1', action: deny}
  - "*"
`)
	for _, args := range []any{"x", 1, 1.5, true, []any{}, []any{map[string]any{"x": 1}}, []byte("x")} {
		for _, id := range []string{"c::allow", "w::allow"} {
			if d := p.Check(id, args); d.Decision == Allow && d.RuleID != "rule-4" {
				t.Errorf("%s with %#v allowed by %s", id, args, d.RuleID)
			}
		}
		for _, id := range []string{"c::deny", "w::deny"} {
			if d := p.Check(id, args); d.Decision != Deny {
				t.Errorf("%s with %#v = %+v, want deny (fail closed)", id, args, d)
			}
		}
	}
	// A rule without constraints does not look at args.
	if d := mustParse(t, "version: 1\nrules: [fs::read]\n").Check("fs::read", []any{1, 2}); d.Decision != Allow {
		t.Errorf("unconstrained rule with list args: %+v", d)
	}
	// Absent args are the empty object.
	if d := p.Check("w::allow", nil); d.RuleID != "rule-4" {
		t.Errorf("nil args: %+v", d)
	}
}

func TestAdversarialCEL(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `version: 1
rules:
  - {function: fs::write, when: 'args.path.startsWith("/workspace/") && !args.path.contains("..")', action: allow}
  - {function: shell::exec, when: 'args.cmd.contains("rm")', action: deny}
  - {function: net::get, when: 'args.url.startsWith("https://")', action: needs_approval}
  - {function: n::x, when: 'args.n > 5', action: allow}
  - {function: has::x, when: '!has(args.force)', action: allow}
  - {function: "*", when: 'function_id.startsWith("ro::")', action: allow}
  - {function: m::x, when: 'args.cmd.matches("^ls$")', action: allow}
  - {function: z::x, when: 'args.v == 0', action: allow}
  - "*::*"
`)
	tests := []struct {
		name string
		id   string
		args any
		want Action
		rule string
	}{
		{"allow holds", "fs::write", map[string]any{"path": "/workspace/a"}, Allow, "rule-0"},
		{"allow traversal", "fs::write", map[string]any{"path": "/workspace/../etc/passwd"}, Allow, "rule-8"},
		{"allow missing key errors, no match", "fs::write", map[string]any{}, Allow, "rule-8"},
		{"allow wrong type errors, no match", "fs::write", map[string]any{"path": 1}, Allow, "rule-8"},
		{"deny missing key errors, denies", "shell::exec", map[string]any{}, Deny, "rule-1"},
		{"deny wrong type errors, denies", "shell::exec", map[string]any{"cmd": []any{"rm"}}, Deny, "rule-1"},
		{"deny key case errors, denies", "shell::exec", map[string]any{"Cmd": "rm -rf /"}, Deny, "rule-1"},
		{"deny holds", "shell::exec", map[string]any{"cmd": "rm -rf /"}, Deny, "rule-1"},
		{"deny false", "shell::exec", map[string]any{"cmd": "ls"}, Allow, "rule-8"},
		{"needs_approval errors, asks", "net::get", map[string]any{}, NeedsApproval, "rule-2"},
		{"string compared to int errors", "n::x", map[string]any{"n": "10"}, Allow, "rule-8"},
		{"number from JSON", "n::x", map[string]any{"n": 10.0}, Allow, "rule-3"},
		{"number from msgpack", "n::x", map[string]any{"n": int8(10)}, Allow, "rule-3"},
		{"has without key", "has::x", map[string]any{}, Allow, "rule-4"},
		{"has with key", "has::x", map[string]any{"force": false}, Allow, "rule-8"},
		{"function_id", "ro::thing", nil, Allow, "rule-5"},
		{"cel matches is a search", "m::x", map[string]any{"cmd": "ls"}, Allow, "rule-6"},
		{"cel matches anchors when written", "m::x", map[string]any{"cmd": "ls; rm"}, Allow, "rule-8"},
		{"cel heterogeneous equality is false", "z::x", map[string]any{"v": "0"}, Allow, "rule-8"},
		{"cel number equality", "z::x", map[string]any{"v": 0.0}, Allow, "rule-7"},
	}
	for _, tc := range tests {
		d := p.Check(tc.id, tc.args)
		if d.Decision != tc.want || d.RuleID != tc.rule {
			t.Errorf("%s: Check(%q, %#v) = %+v, want %s by %s", tc.name, tc.id, tc.args, d, tc.want, tc.rule)
		}
	}
	if d := p.Check("shell::exec", map[string]any{}); !strings.Contains(d.Reason, "fail closed") || d.MatchedConstraint == "" {
		t.Errorf("erroring deny explains itself: %+v", d)
	}
}

func TestAdversarialCELLimits(t *testing.T) {
	t.Parallel()
	doc := `version: 1
rules:
  - {function: a::x, when: 'args.l.all(x, args.l.all(y, x != y || true))', action: allow}
  - {function: d::x, when: 'args.l.all(x, args.l.all(y, x != y || true))', action: deny}
  - "*"
`
	l := make([]any, 2000)
	for i := range l {
		l[i] = i
	}
	args := map[string]any{"l": l}
	for name, opts := range map[string][]Option{
		"cost":    {WithCELCostLimit(10_000)},
		"timeout": {WithCELCostLimit(math.MaxUint64), WithCELTimeout(time.Millisecond)},
	} {
		p := mustParse(t, doc, opts...)
		start := time.Now()
		if d := p.Check("a::x", args); d.RuleID == "rule-0" {
			t.Errorf("%s: an allow whose condition ran out was taken: %+v", name, d)
		}
		if d := p.Check("d::x", args); d.Decision != Deny || d.RuleID != "rule-1" {
			t.Errorf("%s: a deny whose condition ran out did not deny: %+v", name, d)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Errorf("%s: limits did not stop the evaluation: %v", name, el)
		}
	}
	// A canceled caller stops conditions too: allow rules miss, deny rules hit.
	p := mustParse(t, doc)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	small := map[string]any{"l": []any{1}}
	if d := p.CheckContext(ctx, "a::x", small); d.RuleID == "rule-0" {
		t.Errorf("canceled: allow taken: %+v", d)
	}
	if d := p.CheckContext(ctx, "d::x", small); d.Decision != Deny {
		t.Errorf("canceled: deny missed: %+v", d)
	}
	if d := p.Check("a::x", small); d.RuleID != "rule-0" {
		t.Errorf("small list: %+v", d)
	}
}

// Go callers may pass typed values; they are read as their JSON.
func TestAdversarialTypedArgs(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "version: 1\nrules:\n  - {function: shell::exec, args: {command: {matches: \"rm .*\"}}, action: deny}\n  - {function: shell::exec, args: {n: {equals: 1}}, action: allow}\n")
	type req struct {
		Command string `json:"command"`
		N       int    `json:"n"`
	}
	expect(t, p, Deny, []attempt{
		{"struct", "shell::exec", req{Command: "rm -rf /"}},
		{"pointer to struct", "shell::exec", &req{Command: "rm -rf /"}},
		{"typed map", "shell::exec", map[string]string{"command": "rm -rf /"}},
		{"typed slice as args", "shell::exec", []string{"rm -rf /"}},
	})
	expect(t, p, Allow, []attempt{
		{"struct allowed", "shell::exec", req{Command: "ls", N: 1}},
		{"typed map allowed", "shell::exec", map[string]int{"n": 1}},
	})
}

func TestDecisionJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(Decision{Decision: NeedsApproval})
	if err != nil || string(b) != `{"decision":"needs_approval"}` {
		t.Fatalf("%s, %v", b, err)
	}
	b, _ = json.Marshal(Decision{Decision: Deny, RuleID: "rule-2", MatchedConstraint: "args.x equals 1"})
	if string(b) != `{"decision":"deny","rule_id":"rule-2","matched_constraint":"args.x equals 1"}` {
		t.Fatalf("%s", b)
	}
	if !(Decision{Decision: Allow}).Allowed() || (Decision{Decision: NeedsApproval}).Allowed() {
		t.Fatal("Allowed")
	}
}

// The CEL timeout counts wall time: a check that runs out of it is given
// it once more (a cheap condition on a loaded node may only have waited
// for a core), and fails closed when it runs out again. The caller's ctx
// is not renewed.
func TestCELTimeoutRenewedOnce(t *testing.T) {
	t.Parallel()
	doc := `version: 1
rules:
  - {function: a::x, when: 'args.n == 1', action: allow}
  - {function: d::x, when: 'args.n == 1', action: deny}
  - {function: "*", action: needs_approval}
`
	args := map[string]any{"n": 1}
	for _, tc := range []struct {
		name      string
		expired   int  // how many of the deadlines made are out at once
		canceled  bool // the caller's ctx is canceled
		allowRule string
		denyFails bool // the deny's reason says it failed closed
		deadlines int  // deadlines made by one check
	}{
		{name: "in time", expired: 0, allowRule: "rule-0", deadlines: 1},
		{name: "out once", expired: 1, allowRule: "rule-0", deadlines: 2},
		{name: "out twice", expired: 2, allowRule: "rule-2", denyFails: true, deadlines: 2},
		{name: "caller canceled", canceled: true, allowRule: "rule-2", denyFails: true, deadlines: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var made atomic.Int32
			deadline := func(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
				if int(made.Add(1)) <= tc.expired {
					return context.WithDeadline(ctx, time.Now().Add(-time.Second))
				}
				return context.WithTimeout(ctx, d)
			}
			p := mustParse(t, doc, func(o *options) error { o.celDeadline = deadline; return nil })
			ctx := context.Background()
			if tc.canceled {
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			}
			d := p.CheckContext(ctx, "a::x", args)
			if got := d.RuleID; got != tc.allowRule {
				t.Errorf("allow rule: got %q (%+v), want %q", got, d, tc.allowRule)
			}
			if n := int(made.Load()); n != tc.deadlines {
				t.Errorf("deadlines made: %d, want %d", n, tc.deadlines)
			}
			made.Store(0)
			d = p.CheckContext(ctx, "d::x", args)
			if d.Decision != Deny || d.RuleID != "rule-1" {
				t.Errorf("deny: %+v", d)
			}
			if got := strings.Contains(d.Reason, "fail closed"); got != tc.denyFails {
				t.Errorf("deny failed closed: %v, want %v (%q)", got, tc.denyFails, d.Reason)
			}
		})
	}
}

// A deny or needs_approval condition reads a key spelled with another case
// when the exact key is absent, as its args constraints do: a guard such as
// has(args.cmd) must not let {"Cmd": "rm -rf /"} past the deny, since a Go
// handler decoding into a `json:"cmd"` field reads "Cmd". Allow conditions
// stay case-exact.
func TestAdversarialCELKeyCase(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `version: 1
rules:
  - {function: shell::exec, when: 'has(args.cmd) && args.cmd.contains("rm")', action: deny}
  - {function: shell::run, when: '"cmd" in args && args["cmd"].contains("rm")', action: deny}
  - {function: shell::nest, when: 'has(args.opts.mode) && args.opts.mode == "root"', action: needs_approval}
  - {function: shell::list, when: 'has(args.cmds) && args.cmds.exists(c, has(c.cmd) && c.cmd.contains("rm"))', action: deny}
  - {function: fs::write, when: 'has(args.path) && args.path.startsWith("/workspace/")', action: allow}
  - {function: "*", action: allow}
`)
	p2 := mustParse(t, `version: 1
rules:
  - {function: n::x, when: 'has(args.n) && args.n > 5', action: deny}
  - {function: n::x, action: allow}
`)
	for _, tc := range []struct {
		args any
		want Action
	}{
		{map[string]any{"N": int64(6)}, Deny},
		{map[string]any{"N": uint64(math.MaxUint64)}, Deny},
		{map[string]any{"N": 5.5}, Deny},
		{map[string]any{"N": json.Number("6")}, Deny},
		{map[string]any{"N": int64(5)}, Allow},
		{map[string]any{"N": 5.0}, Allow},
	} {
		if d := p2.Check("n::x", tc.args); d.Decision != tc.want {
			t.Errorf("numbers: Check(n::x, %#v) = %+v, want %s", tc.args, d, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		id   string
		args any
		want Action
		rule string
	}{
		{"has guard, exact key", "shell::exec", map[string]any{"cmd": "rm -rf /"}, Deny, "rule-0"},
		{"has guard, other case", "shell::exec", map[string]any{"Cmd": "rm -rf /"}, Deny, "rule-0"},
		{"has guard, upper case", "shell::exec", map[string]any{"CMD": "rm -rf /"}, Deny, "rule-0"},
		{"has guard, harmless other case", "shell::exec", map[string]any{"Cmd": "ls"}, Allow, "rule-5"},
		{"has guard, absent", "shell::exec", map[string]any{}, Allow, "rule-5"},
		{"in and index, other case", "shell::run", map[string]any{"CMD": "rm -rf /"}, Deny, "rule-1"},
		{"nested, other case", "shell::nest", map[string]any{"Opts": map[string]any{"MODE": "root"}}, NeedsApproval, "rule-2"},
		{"nested, other case, harmless", "shell::nest", map[string]any{"Opts": map[string]any{"MODE": "user"}}, Allow, "rule-5"},
		{"inside a list, other case", "shell::list", map[string]any{"Cmds": []any{map[string]any{"ls": 1}, map[string]any{"Cmd": "rm -rf /"}}}, Deny, "rule-3"},
		{"allow stays case-exact", "fs::write", map[string]any{"Path": "/workspace/a"}, Allow, "rule-5"},
		{"allow exact key", "fs::write", map[string]any{"path": "/workspace/a"}, Allow, "rule-4"},
	} {
		d := p.Check(tc.id, tc.args)
		if d.Decision != tc.want || d.RuleID != tc.rule {
			t.Errorf("%s: Check(%q, %#v) = %+v, want %s by %s", tc.name, tc.id, tc.args, d, tc.want, tc.rule)
		}
	}
}
