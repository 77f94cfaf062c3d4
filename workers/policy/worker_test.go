package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

func startWorker(t *testing.T, e *engine.Engine, w *Worker) {
	t.Helper()
	if err := w.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
}

func TestWorkerOverNATS(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	path := filepath.Join(t.TempDir(), DefaultFileName)
	writeAtomic(t, path, specExample)
	w := NewWorker(path, WithPollInterval(5*time.Millisecond))
	startWorker(t, e, w)
	if err := w.Start(context.Background(), e); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v", err)
	}
	ctx := context.Background()

	// msgpack, from a Go engine.
	tests := []struct {
		req  CheckRequest
		want Decision
	}{
		{CheckRequest{FunctionID: "models::list"}, Decision{Decision: Allow, RuleID: "rule-0"}},
		{CheckRequest{FunctionID: "state::set", Args: map[string]any{"scope": "s"}}, Decision{Decision: Deny, RuleID: "rule-1"}},
		{CheckRequest{FunctionID: "shell::exec", Args: map[string]any{"command": "rm -rf /"}}, Decision{Decision: Deny, RuleID: "rule-2", MatchedConstraint: `args.command matches "rm .*"`}},
		{CheckRequest{FunctionID: "shell::exec", Args: map[string]any{"command": []byte("rm -rf /")}}, Decision{Decision: Deny, RuleID: "rule-2", MatchedConstraint: `args.command matches "rm .*"`}},
		{CheckRequest{FunctionID: "fs::write", Args: map[string]any{"path": "/workspace/x"}}, Decision{Decision: Allow, RuleID: "rule-3", MatchedConstraint: `when: args.path.startsWith("/workspace/")`}},
		{CheckRequest{FunctionID: "fs::write", Args: map[string]any{"path": "/etc/x"}}, Decision{Decision: NeedsApproval, Reason: "no rule matches"}},
		{CheckRequest{FunctionID: "fs::read\n"}, Decision{Decision: Deny, RuleID: RuleInvalidFunctionID}},
		{CheckRequest{FunctionID: ""}, Decision{Decision: Deny, RuleID: RuleInvalidFunctionID}},
	}
	for _, tc := range tests {
		got, err := engine.Call[Decision](ctx, e, CheckFunction, tc.req)
		if err != nil {
			t.Fatalf("%+v: %v", tc.req, err)
		}
		if got.Decision != tc.want.Decision || got.RuleID != tc.want.RuleID || got.MatchedConstraint != tc.want.MatchedConstraint ||
			(tc.want.Reason != "" && got.Reason != tc.want.Reason) {
			t.Errorf("%+v: got %+v, want %+v", tc.req, got, tc.want)
		}
	}

	// JSON from a plain nats client with no content type: what `nats req` sends.
	nc := enginetest.Connect(t, ns)
	for body, want := range map[string]string{
		`{"function_id":"state::set","args":{"scope":"s","key":"k","value":1}}`: `{"decision":"deny","rule_id":"rule-1"}`,
		`{"function_id":"models::get"}`:                                         `{"decision":"allow","rule_id":"rule-0"}`,
		`{"function_id":"shell::exec","args":{"command":"ls","Command":"rm"}}`:  `"rule_id":"ambiguous_args"`,
		`{"function_id":"fs::write","args":"not an object"}`:                    `{"decision":"needs_approval","reason":"no rule matches"}`,
		`{"function_id":"fs::write","args":{"path":"/workspace/a","n":1}}`:      `"decision":"allow"`,
	} {
		m, err := nc.Request("iii.fn.policy.check_permissions", []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if we := wire.Decode(m); we != nil {
			t.Fatalf("%s: %v", body, we)
		}
		if ct := m.Header.Get(wire.HeaderContentType); ct != wire.ContentJSON {
			t.Errorf("reply content type %q", ct)
		}
		if !strings.Contains(string(m.Data), want) {
			t.Errorf("%s: reply %s, want %s", body, m.Data, want)
		}
	}
	// Payload errors are coded; the caller denies on them.
	for _, body := range []string{`{"function_id":5}`, `[1,2]`, `{"function_id":"x"`, "\xff"} {
		m, err := nc.Request("iii.fn.policy.check_permissions", []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if we := wire.Decode(m); we == nil || !errors.Is(we, wire.ErrInvalidPayload) {
			t.Errorf("%q: %v, want invalid_payload", body, we)
		}
	}

	// Status, then a broken file through reload: the error is reported and
	// the last good policy keeps deciding.
	st, err := engine.Call[Status](ctx, e, StatusFunction, struct{}{})
	if err != nil || st.Source != SourceFile || st.Rules != 4 || st.File != path || st.LastError != "" {
		t.Fatalf("status %+v, %v", st, err)
	}
	writeAtomic(t, path, "version: 1\nrules:\n  - function: x::y\n    when: 'args.'\n    action: allow\n")
	st, err = engine.Call[Status](ctx, e, ReloadFunction, struct{}{})
	if err != nil || st.Rules != 4 || !strings.Contains(st.LastError, "rules[0]") {
		t.Fatalf("reload of a broken file: %+v, %v", st, err)
	}
	m, err := nc.Request("iii.fn.policy.status", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var js map[string]any
	if err := json.Unmarshal(m.Data, &js); err != nil || js["last_error"] == nil || js["rules"] != 4.0 || js["loaded_at"] == nil {
		t.Fatalf("JSON status %s, %v", m.Data, err)
	}
	if d, _ := engine.Call[Decision](ctx, e, CheckFunction, CheckRequest{FunctionID: "state::set"}); d.Decision != Deny {
		t.Fatalf("last good policy lost: %+v", d)
	}
	// Fixed: the watch picks it up without a reload.
	writeAtomic(t, path, "version: 1\nrules: [\"!*\"]\n")
	enginetest.Eventually(t, 5*time.Second, func() error {
		st, err := engine.Call[Status](ctx, e, StatusFunction, nil)
		if err != nil || st.Rules != 1 || st.LastError != "" {
			return fmt.Errorf("%+v, %v", st, err)
		}
		return nil
	})
	if d, _ := engine.Call[Decision](ctx, e, CheckFunction, CheckRequest{FunctionID: "models::list"}); d.Decision != Deny {
		t.Fatalf("new policy not in force: %+v", d)
	}
}

func TestModuleLifecycle(t *testing.T) {
	t.Parallel()
	m, err := workers.Global().Module(WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	reg := workers.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	e := enginetest.Engine(t)
	ctx := context.Background()
	home := t.TempDir()
	env := workers.Env{Home: home, Settings: map[string]map[string]string{WorkerName: {SettingPollInterval: "5ms"}}}

	// No file in the home: the shipped default, watched at the default path.
	run, err := reg.Start(ctx, e, env, WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Close(context.Background()) })
	st, err := engine.Call[Status](ctx, e, StatusFunction, nil)
	if err != nil || st.Source != SourceDefault || st.File != filepath.Join(home, DefaultFileName) {
		t.Fatalf("status %+v, %v", st, err)
	}
	if d, _ := engine.Call[Decision](ctx, e, CheckFunction, CheckRequest{FunctionID: "approval::resolve"}); d.Decision != Deny {
		t.Fatalf("default policy: %+v", d)
	}
	writeAtomic(t, filepath.Join(home, DefaultFileName), "version: 1\nrules: [\"approval::*\"]\n")
	enginetest.Eventually(t, 5*time.Second, func() error {
		d, err := engine.Call[Decision](ctx, e, CheckFunction, CheckRequest{FunctionID: "approval::resolve"})
		if err != nil || d.Decision != Allow {
			return fmt.Errorf("%+v, %v", d, err)
		}
		return nil
	})
	if err := run.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Call[Status](ctx, e, StatusFunction, nil); !errors.Is(err, wire.ErrFunctionNotFound) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestModuleSettings(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeAtomic(t, filepath.Join(home, "custom.yaml"), "version: 1\nrules: []\n")
	writeAtomic(t, filepath.Join(home, "broken.yaml"), "version: 1\nrules: [\"fs::read\", 7]\n")
	tests := []struct {
		name     string
		settings map[string]string
		err      string
		rules    int
	}{
		{"relative file", map[string]string{SettingFile: "custom.yaml"}, "", 0},
		{"absolute file", map[string]string{SettingFile: filepath.Join(home, "custom.yaml")}, "", 0},
		{"broken file stops the node", map[string]string{SettingFile: "broken.yaml"}, "rules[1]", 0},
		{"unknown setting", map[string]string{"fiel": "x"}, `no setting "fiel"`, 0},
		{"empty file setting", map[string]string{SettingFile: ""}, "empty", 0},
		{"bad interval", map[string]string{SettingPollInterval: "soon"}, "not a duration", 0},
		{"interval out of range", map[string]string{SettingPollInterval: "0s"}, "poll interval", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := &Worker{}
			err := w.Provision(context.Background(), workers.Env{Home: home, Settings: map[string]map[string]string{WorkerName: tc.settings}})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Provision = %v, want %q", err, tc.err)
				}
				if w.Validate() == nil {
					t.Fatal("Validate passed without a policy")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Validate(); err != nil {
				t.Fatal(err)
			}
			if n := w.Watcher().Policy().Len(); n != tc.rules {
				t.Fatalf("rules = %d, want %d", n, tc.rules)
			}
		})
	}
}

func TestWorkerWithoutProvision(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	w := NewWorker("")
	startWorker(t, e, w)
	d, err := engine.Call[Decision](context.Background(), e, CheckFunction, CheckRequest{FunctionID: "run::start"})
	if err != nil || d.Decision != Deny {
		t.Fatalf("default policy over the bus: %+v, %v", d, err)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background(), e); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
	// A broken file given to NewWorker fails Start (nothing provisioned).
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte("version: 2\nrules: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := NewWorker(path).Start(context.Background(), e); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("Start with a broken file = %v", err)
	}
}

// TestCheckOverJSONExactNumbers: a JSON caller's integers past 2^53 reach
// the rules exactly, as they reach a Go handler that decodes them into an
// int64; rounded to a float64, 1234567890123456789 became
// 1234567890123456768 and slipped past the deny rules that name it.
func TestCheckOverJSONExactNumbers(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	path := filepath.Join(t.TempDir(), DefaultFileName)
	writeAtomic(t, path, `version: 1
rules:
  - id: by-equals
    function: pay::send
    args: {account: {equals: 1234567890123456789}}
    action: deny
  - id: by-when
    function: pay::send
    when: 'has(args.to) && args.to == 9007199254740993'
    action: deny
  - id: small
    function: pay::send
    args: {amount: {equals: 100}}
    action: deny
  - "pay::*"
`)
	startWorker(t, e, NewWorker(path))
	nc := enginetest.Connect(t, ns)
	for args, want := range map[string]string{
		`{"account":1234567890123456789}`: `{"decision":"deny","rule_id":"by-equals"`,
		`{"account":1234567890123456788}`: `{"decision":"allow","rule_id":"rule-3"}`,
		`{"to":9007199254740993}`:         `{"decision":"deny","rule_id":"by-when"`,
		`{"amount":1e2}`:                  `{"decision":"deny","rule_id":"small"`,
		`{"amount":100.0}`:                `{"decision":"deny","rule_id":"small"`,
		`{"amount":100.5}`:                `{"decision":"allow","rule_id":"rule-3"}`,
	} {
		body := `{"function_id":"pay::send","args":` + args + `}`
		m, err := nc.Request("iii.fn.policy.check_permissions", []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if we := wire.Decode(m); we != nil {
			t.Fatalf("%s: %v", body, we)
		}
		if !strings.HasPrefix(string(m.Data), want) {
			t.Errorf("%s: reply %s, want %s…", args, m.Data, want)
		}
	}
}
