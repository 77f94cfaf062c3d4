// Package policy is the permission gate: it decides whether a function
// call the model asks for may run (allow), must not (deny), or waits for a
// human (needs_approval), by the rules of iii-permissions.yaml.
//
// It has three layers:
//
//   - [Parse] and [Policy.Check]: a pure evaluator of a rules file, with no
//     I/O, safe for concurrent use.
//   - [Watcher]: keeps a file loaded and reloads it when it changes.
//   - [Worker]: the "policy" module, serving policy::check_permissions,
//     policy::status and policy::reload on the bus.
//
// # Policy file
//
//	version: 1
//	rules:
//	  - "models::*"              # allow
//	  - "!state::set"            # deny
//	  - function: "shell::exec"  # object rule
//	    args: { command: { matches: "rm .*" } }
//	    action: deny
//	  - id: workspace-writes     # optional; default rule-<index>
//	    function: "fs::write"
//	    when: 'args.path.startsWith("/workspace/") && !args.path.contains("..")'
//	    reason: writes inside the workspace are fine
//	    action: allow
//
// A string rule "fn" allows and "!fn" denies (quote it: an unquoted !fn is
// a YAML tag, and is refused as such). An object rule has a function
// pattern and an action (allow, deny or needs_approval), and optionally an
// id, args constraints, a when condition and a reason (returned in the
// decision). Put action last: a file cut short by a partial write then
// fails to parse instead of losing a constraint.
//
// Parsing is strict and all-or-nothing: an unknown key, a wrong type, a
// version other than 1, an empty or malformed pattern, a regex or CEL
// condition that does not compile or is not a bool, a regex over the
// regex program limit (see "Regex size"), a duplicate or reserved id, YAML
// anchors, aliases or tags, or a second document is a [*ParseError]
// naming the rule index (0-based) and line.
//
// # Matching
//
// Rules are tried in order and the first that matches decides; when none
// matches the call needs approval, so an empty rules list sends every call
// to a human. A pattern is a function id in which '*' matches any run of
// characters, "::" included; it is the only metacharacter ('?', '[' and
// regex characters are literal) and the pattern is anchored: "fs::read"
// matches neither "xfs::read" nor "fs::read::evil". Rule ids are
// "rule-<index>" unless the rule names one.
//
// Before any rule, the gate denies on its own (with these rule ids):
// invalid_function_id for an id that subjects.ValidateFunctionID refuses
// (whitespace, newlines, control characters, bad UTF-8, empty segments);
// args_too_large for args over 256 KiB of JSON ([WithMaxArgsBytes]) and
// args_too_deep for nesting over 64 levels — the gate does not allow what
// it will not inspect, and needs_approval would become allow in a session
// that auto-approves; ambiguous_args when an object holds two keys equal
// up to case ("path" and "Path"; Go's encoding/json matches keys without
// case, so a handler could read either); invalid_args for values that are
// not JSON.
//
// # Args constraints
//
// args maps a key of the call's args to tests: equals (a string, number or
// bool) and matches (an RE2 regex); with both, both must hold, and all
// constraints of a rule must hold. A key with dots is a path into nested
// objects ("options.mode"); a key that itself contains a dot cannot be
// named (use when: args["a.b"]).
//
// equals is type-strict: "0" is not 0 and false is not 0, but numbers
// compare as numbers whatever their encoding, so 1 == 1.0 == int8(1).
// policy::check_permissions reads a JSON caller's numbers exactly, as a Go
// handler decoding into an int64 does: 1234567890123456789 is not rounded
// to a float64 (and so past a rule that names it).
//
// matches must match the whole value: the regex is compiled as ^(?:re)$
// and $ is the end of the text, never before a trailing newline. It only
// tests strings (msgpack binary counts as a string). In deny and
// needs_approval rules '.' also matches a newline, so "rm .*" catches
// "rm -rf /\necho"; in allow rules it does not, so ".*" does not allow a
// second line. Note that anchoring makes "^rm " match the string "rm " and
// nothing else; a deny list meant to catch a word anywhere reads
// '.*\brm\b.*'. A regex deny list is a speed bump, not a sandbox: prefer
// allow rules for what the model may do.
//
// # Regex size
//
// A regex costs memory and time in proportion to its compiled program,
// about one instruction per character or class it matches; a bounded
// repeat is written out, so `.{1000}` is 1000 instructions from six bytes.
// Every regex is sized from its syntax before it compiles: an args matches
// regex, or the constant pattern of a CEL matches (both compile when the
// policy loads), over the regex program limit ([WithRegexProgramLimit],
// default [DefaultRegexProgramLimit] instructions) is a [*ParseError], as
// is a policy whose regexes together come to more than 10 times the limit:
//
//	policy: invalid policy: rules[3] (line 12): when: regex ".{1000}.{1000}…" compiles to about 11000 instructions; the regex program limit is 10000
//
// A pattern a condition takes from args (args.cmd.matches(args.re)) is
// sized when it runs; over the limit, the call errors and the condition
// fails closed.
//
// # Regex matching time
//
// A match takes up to the program's instructions times the text's bytes
// in steps, the model chooses the text, and nothing interrupts Go's
// regexp once it runs (neither ctx nor the CEL timeout): `.*w.{1000}…`,
// about 9,000 instructions, takes tens of seconds of CPU on a 256 KiB
// argument. So every match is bounded before it runs — an args matches,
// a CEL matches with a constant pattern or with one from args: when
// instructions times bytes pass the regex match budget
// ([WithRegexMatchBudget], default [DefaultRegexMatchBudget] = 2^26, up
// to about a second of CPU), the match does not run and its outcome is
// unknown, which fails closed (see "Failing closed"): the args constraint
// makes a deny or needs_approval rule match, with the reason
//
//	args.cmd: regex ".*w.{1000}.{1000}…" on 262124 bytes passes the regex match budget (9007 instructions times 262124 bytes, over 67108864) (fail closed)
//
// and an allow rule not match; a CEL matches errors, so its condition
// fails closed unless the rest of it decides without it (false && …).
// A regex of up to 256 instructions matches any string the default args
// limit lets through; one at the program limit, strings up to 6.5 KiB.
//
// # Failing closed
//
// A value whose type is not what a test expects proves nothing either way.
// Allow rules need every test to hold for certain; deny and needs_approval
// rules match unless a test certainly fails:
//
//	value at the key          allow rule     deny / needs_approval rule
//	missing or null           no match       no match
//	right type, passes        match          match
//	right type, fails         no match       no match
//	other type (or args, or   no match       match
//	a step of the path, is
//	not an object)
//	a string too long for     no match       match
//	its regex's match budget
//
// Deny and needs_approval rules also read a key spelled with another case
// when the exact key is absent ("Command" for command), as a Go handler
// would; allow rules read the key exactly as written.
//
// # When conditions
//
// when is a CEL expression (cel.dev/cel-go, with the ext strings library)
// over function_id (string) and args (map of string to dyn; absent args
// are {}), and must be of type bool. Numbers arrive as int when integral,
// so args.n + 1 works whichever codec carried the call, and comparisons
// across int, uint and double work. CEL's own matches() searches (it is
// not anchored). Field access is case-exact in allow rules; in deny and
// needs_approval rules a key (args.cmd, has(args.cmd), "cmd" in args, at
// any depth) falls back to one spelled with another case, as their args
// constraints do, so has(args.cmd) sees {"Cmd": …}. An evaluation error — a
// missing key (use has(args.x)), a type error, a matches over the regex
// match budget, the cost limit ([WithCELCostLimit]) or the time limit for
// all conditions of one check ([WithCELTimeout], and the caller's ctx) —
// makes an allow rule not match, and makes a deny or needs_approval rule match: an erroring deny
// denies, with the error in the reason. The time limit counts wall time,
// so a check that runs out of it is given it once more before its
// condition fails closed: on a loaded node a cheap condition may only
// have waited for a core, and an allowed call should not park for
// approval because the node was busy.
//
// The cost limit counts what a condition builds as well as its steps:
// the strings made by +, format, strings.quote, replace and join and the
// parts made by split are charged by their size. A call whose own charge
// would pass the limit — replace, join, format or split building more
// than the limit, or contains, indexOf, lastIndexOf or a matches whose
// pattern is not a constant searching for longer than it allows — stops
// the condition before the call runs, as the limit does (|| cannot absorb
// it): "cost limit exceeded: replace would cost at least …" (a matches
// pattern from args is also sized, see "Regex size"). So
// args.s.replace("", args.s) on a large argument fails at once instead of
// building len(s)² bytes. A condition at the default limit allocates tens
// of MiB at most.
//
// # Shipped default policy
//
// [DefaultYAML] (default-permissions.yaml) allows read-only introspection:
// engine::functions::list, engine::workers::list, models::list, models::get,
// models::supports, directory::skills::*, state::get, state::list,
// turn::get_state, fs::read, fs::ls, fs::glob, fs::grep. It denies the
// harness's own control surface: approval::*, state::* (the writes),
// provider::*, run::*, harness::*, agent::*, turn::*, session::*,
// policy::*, hooks::*, queue::*, topic::*, cron::*, http::*, auth::*,
// budget::*, the rest of engine::* and sandbox::* (the run's sandbox is
// made for it; its commands go through shell::exec). Everything else
// (fs::write, shell::exec, other workers' functions) needs approval;
// there is no catch-all rule.
//
// # Worker
//
// The module "policy" reads its settings "file" (default
// <home>/iii-permissions.yaml; relative paths are taken from the home) and
// "poll_interval" (default 500ms). Its lifecycle:
//
//  1. Provision loads the file. A missing file puts the shipped default in
//     force (nothing is written to disk: copy [DefaultYAML] there to start
//     editing); a file that does not parse stops the node with the error.
//  2. Start polls the file (read and hash every interval; a new version is
//     applied once two consecutive reads agree) and registers:
//     policy::check_permissions {function_id, args} → [Decision]
//     ({decision, rule_id?, matched_constraint?, reason?});
//     policy::status {} → [Status] ({file, source, loaded_at, rules, sha256,
//     last_error?}); policy::reload {} → [Status], reading the file at once.
//  3. A new version that does not parse is rejected whole: the last good
//     policy stays in force, the error is logged once at Error level and
//     shown as last_error until the file is fixed. A file deleted after it
//     was loaded keeps the last good policy the same way.
//  4. Close stops the endpoints and the watch.
//
// Callers give the check 5 s and deny on a timeout, no responders or any
// error (denied_by "gate_unavailable"), so the gate fails closed end to
// end.
//
// # Example
//
//	p, err := policy.Parse(doc)
//	if err != nil {
//		return err // *policy.ParseError: rules[2] (line 9): ...
//	}
//	switch d := p.Check("shell::exec", args); d.Decision {
//	case policy.Allow:
//		// run it
//	case policy.Deny:
//		// refuse, citing d.RuleID and d.Reason
//	case policy.NeedsApproval:
//		// ask a human
//	}
package policy
