package policy_test

import (
	"fmt"

	"github.com/iii-on-nats/iii/workers/policy"
)

func ExampleParse() {
	p, err := policy.Parse([]byte(`version: 1
rules:
  - "models::*"
  - "!state::set"
  - function: "shell::exec"
    args: { command: { matches: "rm .*" } }
    action: deny
  - function: "fs::write"
    when: 'args.path.startsWith("/workspace/")'
    action: allow
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, call := range []struct {
		id   string
		args any
	}{
		{"models::list", nil},
		{"state::set", map[string]any{"scope": "s", "key": "k", "value": 1}},
		{"shell::exec", map[string]any{"command": "rm -rf /"}},
		{"fs::write", map[string]any{"path": "/workspace/notes.md"}},
		{"fs::write", map[string]any{"path": "/etc/passwd"}},
		{"fs::read\n", nil},
	} {
		d := p.Check(call.id, call.args)
		fmt.Printf("%-14q %s", call.id, d.Decision)
		if d.RuleID != "" {
			fmt.Printf(" (%s)", d.RuleID)
		}
		fmt.Println()
	}
	// Output:
	// "models::list" allow (rule-0)
	// "state::set"   deny (rule-1)
	// "shell::exec"  deny (rule-2)
	// "fs::write"    allow (rule-3)
	// "fs::write"    needs_approval
	// "fs::read\n"   deny (invalid_function_id)
}

func ExampleParse_error() {
	_, err := policy.Parse([]byte("version: 1\nrules:\n  - fs::read\n  - !state::set\n"))
	fmt.Println(err)
	// Output:
	// policy: invalid policy: rules[1] (line 4): !state::set is read as a YAML tag; quote it: "!state::set"
}
