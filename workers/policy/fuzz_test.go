package policy

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/subjects"
)

func FuzzParse(f *testing.F) {
	f.Add(defaultYAML)
	f.Add([]byte(specExample))
	f.Add([]byte("version: 1\nrules: []\n"))
	f.Add([]byte("version: 1\nrules:\n  - !state::set\n"))
	f.Add([]byte("version: 1\nrules:\n  - {id: a, function: \"x::*\", args: {a.b: {equals: 1, matches: \"x\"}}, when: 'args.a > 1', action: deny, reason: r}\n"))
	f.Add([]byte("version: 1\nrules: [&a x, *a]\n"))
	f.Add([]byte("{version: 1, rules: [\"*\"]}\n---\n"))
	f.Add([]byte("version: 1\nrules:\n  - {function: a::b, args: {p: {matches: \"a)|(b\"}}, action: allow}\n"))
	probes := []struct {
		id   string
		args any
	}{
		{"state::set", nil},
		{"shell::exec", map[string]any{"command": "rm -rf /", "a": map[string]any{"b": 1.0}}},
		{"fs::write", map[string]any{"path": "/workspace/x", "n": 1.0}},
		{"x::y", []any{1.0, "a"}},
		{"bad id", nil},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("error %v is not ErrInvalidPolicy", err)
			}
			return
		}
		for _, pr := range probes {
			d := p.Check(pr.id, pr.args)
			switch d.Decision {
			case Allow, Deny, NeedsApproval:
			default:
				t.Fatalf("decision %q", d.Decision)
			}
			if subjects.ValidateFunctionID(pr.id) != nil && d.Decision != Deny {
				t.Fatalf("invalid id %q: %+v", pr.id, d)
			}
		}
	})
}

// fuzzPolicy has an oracle: allowed says, from the Go side, whether a call
// may be allowed at all.
const fuzzPolicy = `version: 1
rules:
  - "!*::secret*"
  - function: "fs::write"
    args: {path: {matches: "/workspace/[a-z0-9_/]+"}}
    action: allow
  - function: "fs::read"
    when: 'args.path.startsWith("/workspace/")'
    action: allow
  - function: "num::*"
    args: {n: {equals: 1}}
    action: allow
  - function: "shell::exec"
    args: {command: {matches: "rm .*"}}
    action: deny
  - "shell::exec"
  - "models::*"
`

var workspacePath = regexp.MustCompile(`^/workspace/[a-z0-9_/]+$`)

func allowedByOracle(id string, args any) bool {
	if subjects.ValidateFunctionID(id) != nil || strings.Contains(id, "::secret") {
		return false
	}
	m, _ := args.(map[string]any)
	switch {
	case id == "fs::write":
		s, ok := m["path"].(string)
		return ok && workspacePath.MatchString(s)
	case id == "fs::read":
		s, ok := m["path"].(string)
		return ok && strings.HasPrefix(s, "/workspace/")
	case strings.HasPrefix(id, "num::"):
		n, ok := m["n"].(float64)
		return ok && n == 1
	case id == "shell::exec":
		if args == nil {
			return true
		}
		if m == nil {
			return false // a non-object meets the deny rule's constraint: fail closed
		}
		for k, v := range m {
			if !strings.EqualFold(k, "command") || v == nil {
				continue
			}
			s, ok := v.(string)
			if !ok || strings.HasPrefix(s, "rm ") {
				return false
			}
		}
		return true
	case strings.HasPrefix(id, "models::"):
		return true
	}
	return false
}

func FuzzCheck(f *testing.F) {
	p, err := Parse([]byte(fuzzPolicy))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][2]string{
		{"fs::write", `{"path":"/workspace/a"}`},
		{"fs::write", `{"path":"/workspace/a\n/etc"}`},
		{"fs::write", `{"Path":"/workspace/a"}`},
		{"fs::read", `{"path":"/workspace/../x"}`},
		{"fs::read", `{"path":1}`},
		{"num::x", `{"n":1.0}`},
		{"num::x", `{"n":"1"}`},
		{"shell::exec", `{"command":"rm -rf /"}`},
		{"shell::exec", `{"COMMAND":"rm -rf /"}`},
		{"shell::exec", `{"command":["rm"]}`},
		{"shell::exec", `"rm -rf /"`},
		{"shell::exec", `{"command":"ls","Command":"rm -rf /"}`},
		{"fs::secret", `{}`},
		{"models::list\n", `{}`},
		{"models::x", `not json`},
		{"a::b", `{"__proto__":{"path":"/workspace/a"}}`},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, id string, raw []byte) {
		var args any
		if err := json.Unmarshal(raw, &args); err != nil {
			// An undecodable payload reaches the gate as an opaque string.
			args = string(raw)
		}
		d := p.Check(id, args)
		if again := p.Check(id, args); again != d {
			t.Fatalf("not deterministic: %+v then %+v", d, again)
		}
		if subjects.ValidateFunctionID(id) != nil {
			if d.Decision != Deny || d.RuleID != RuleInvalidFunctionID {
				t.Fatalf("invalid id %q: %+v", id, d)
			}
			return
		}
		if strings.Contains(id, "::secret") && d.Decision != Deny {
			t.Fatalf("%q escaped the deny: %+v", id, d)
		}
		if d.Decision == Allow && !allowedByOracle(id, args) {
			t.Fatalf("Check(%q, %s) = %+v; the oracle says no", id, raw, d)
		}
	})
}
