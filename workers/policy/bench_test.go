package policy

import (
	"testing"
)

// BenchmarkCheck measures one decision against string rules (the shipped
// default policy), an args constraint, and a CEL condition.
func BenchmarkCheck(b *testing.B) {
	def, err := Default()
	if err != nil {
		b.Fatal(err)
	}
	cons := mustParse(b, `version: 1
rules:
  - "!state::*"
  - function: shell::exec
    args: {command: {matches: "rm .*"}}
    action: deny
  - function: shell::exec
    args: {command: {matches: "ls( [-a-z./]+)*"}, cwd: {equals: "/workspace"}}
    action: allow
`)
	cel := mustParse(b, `version: 1
rules:
  - "!state::*"
  - function: fs::write
    when: 'args.path.startsWith("/workspace/") && !args.path.contains("..") && size(args.content) < 65536'
    action: allow
`)
	// Functions that build strings and search them: each call is checked
	// against the cost limit before it runs (celguard.go).
	strs := mustParse(b, `version: 1
rules:
  - function: fs::write
    when: 'args.path.replace("//", "/").startsWith("/workspace/") && [args.dir, args.name].join("/") == args.dir + "/" + args.name && !args.path.contains("..") && args.path.indexOf("/src/") > 0 && "%s/%s".format([args.dir, args.name]).size() < 4096'
    action: allow
`)
	shellArgs := map[string]any{"command": "ls -la /tmp", "cwd": "/workspace"}
	writeArgs := map[string]any{"path": "/workspace/src/main.go", "content": "package main\n"}
	jsonArgs := map[string]any{"path": "/workspace/src/main.go", "content": "package main\n", "mode": 420.0}
	cases := []struct {
		name string
		p    *Policy
		id   string
		args any
		want Action
	}{
		{"rules=string,match=first", def, "engine::functions::list", nil, Allow},
		{"rules=string,match=deny", def, "budget::reserve", map[string]any{"estimated_usd": 0.5}, Deny},
		{"rules=string,match=none", def, "fs::write", writeArgs, NeedsApproval},
		{"rules=args,match=allow", cons, "shell::exec", shellArgs, Allow},
		{"rules=args,match=deny", cons, "shell::exec", map[string]any{"command": "rm -rf /"}, Deny},
		{"rules=cel,match=allow", cel, "fs::write", writeArgs, Allow},
		{"rules=cel,args=json_numbers", cel, "fs::write", jsonArgs, Allow},
		{"rules=cel,match=none", cel, "fs::write", map[string]any{"path": "/etc/passwd", "content": ""}, NeedsApproval},
		{"rules=cel_strings,match=allow", strs, "fs::write", map[string]any{"path": "/workspace/src/main.go", "dir": "/workspace/src", "name": "main.go"}, Allow},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			if d := tc.p.Check(tc.id, tc.args); d.Decision != tc.want {
				b.Fatalf("%+v, want %s", d, tc.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				tc.p.Check(tc.id, tc.args)
			}
		})
	}
}

// BenchmarkParse measures loading the shipped default policy.
func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(defaultYAML); err != nil {
			b.Fatal(err)
		}
	}
}
