package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/std"
)

// startTestApp runs a whole node in-process on a random port.
func startTestApp(t *testing.T) *app {
	t.Helper()
	return startTestAppWith(t, upConfig{httpAddr: "127.0.0.1:0"})
}

// startTestAppWith runs a node configured by cfg, in a temporary home, on
// a random port, with logs discarded unless cfg has a logger.
func startTestAppWith(t *testing.T, cfg upConfig) *app {
	t.Helper()
	cfg.home, cfg.listen = t.TempDir(), "127.0.0.1:0"
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	a, err := startApp(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := a.close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return a
}

// runIII runs the iii command tree in-process with args.
func runIII(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// runNATS runs the nats CLI against url (enginetest.RunNATS).
func runNATS(t *testing.T, url string, args ...string) string {
	return enginetest.RunNATS(t, url, args...)
}

func TestNATSCLI(t *testing.T) {
	a := startTestApp(t)
	url := a.node.ClientURL()

	out := runNATS(t, url, "req", "iii.fn.engine.functions.list", "{}", "--raw")
	var fl struct {
		Functions []struct {
			ID string `json:"id"`
		} `json:"functions"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &fl); err != nil {
		t.Fatalf("functions list via nats CLI: %v\n%s", err, out)
	}
	ids := map[string]bool{}
	for _, f := range fl.Functions {
		ids[f.ID] = true
	}
	for _, want := range wantFunctions {
		if !ids[want] {
			t.Errorf("catalog via nats CLI lacks %s", want)
		}
	}

	out = runNATS(t, url, "req", "iii.fn.state.set", `{"scope":"demo","key":"greeting","value":"hello"}`, "--raw")
	if !strings.Contains(out, `"new_value":"hello"`) {
		t.Fatalf("state::set via nats CLI: %s", out)
	}
	out = runNATS(t, url, "req", "iii.fn.state.get", `{"scope":"demo","key":"greeting"}`, "--raw")
	if !strings.Contains(out, `"value":"hello"`) {
		t.Fatalf("state::get via nats CLI: %s", out)
	}
	out = runNATS(t, url, "micro", "ls")
	if !strings.Contains(out, "engine") || !strings.Contains(out, "state") {
		t.Fatalf("nats micro ls: %s", out)
	}
}

func TestCommands(t *testing.T) {
	a := startTestApp(t)
	url := a.node.ClientURL()
	out, err := runIII(t, "functions", "--nats", url)
	if err != nil || !strings.Contains(out, "engine::functions::list") {
		t.Fatalf("iii functions: %v\n%s", err, out)
	}
	out, err = runIII(t, "trigger", "engine::workers::list", "{}", "--nats", url)
	if err != nil || !strings.Contains(out, `"workers"`) {
		t.Fatalf("iii trigger: %v\n%s", err, out)
	}
	if _, err := runIII(t, "trigger", "nope::nothing", "--nats", url); err == nil || !strings.Contains(err.Error(), "function_not_found") {
		t.Fatalf("unknown function: %v", err)
	}
	if _, err := runIII(t, "trigger", "engine::workers::list", "{not json", "--nats", url); err == nil || !strings.Contains(err.Error(), "invalid_payload") {
		t.Fatalf("bad JSON: %v", err)
	}
	if _, err := runIII(t, "functions", "--nats", "nats://127.0.0.1:1"); err == nil {
		t.Fatal("no server: want an error")
	}
}

// The node consumes the default queue: an enqueued call runs.
func TestDefaultQueue(t *testing.T) {
	a := startTestApp(t)
	url := a.node.ClientURL()
	out, err := runIII(t, "trigger", "queue::enqueue",
		`{"queue":"default","function_id":"state::set","data":{"scope":"demo","key":"queued","value":42}}`, "--nats", url)
	if err != nil {
		t.Fatalf("enqueue: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err = runIII(t, "trigger", "state::get", `{"scope":"demo","key":"queued"}`, "--nats", url)
		if err == nil && strings.Contains(out, `"value": 42`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queued state::set never ran: %v\n%s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The node serves the HTTP trigger gateway; routes are added over the bus.
func TestHTTPGateway(t *testing.T) {
	a := startTestApp(t)
	w, err := a.e.Worker("hello")
	if err != nil {
		t.Fatal(err)
	}
	type httpReq struct {
		PathParams map[string]string `json:"path_params"`
	}
	type httpResp struct {
		StatusCode int    `json:"status_code"`
		Body       string `json:"body"`
	}
	if err := w.Register(engine.Function{ID: "hello::http", Handler: engine.Typed(func(_ context.Context, r httpReq) (httpResp, error) {
		return httpResp{StatusCode: 200, Body: "hello " + r.PathParams["name"]}, nil
	})}); err != nil {
		t.Fatal(err)
	}
	url := a.node.ClientURL()
	if out, err := runIII(t, "trigger", "http::add_route", `{"method":"GET","path":"/hello/:name","function_id":"hello::http"}`, "--nats", url); err != nil {
		t.Fatalf("add route: %v\n%s", err, out)
	}
	var body string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + a.httpLn.Addr().String() + "/hello/ada")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		if resp.StatusCode == 200 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if body != "hello ada" {
		t.Fatalf("GET /hello/ada = %q", body)
	}
}

// iii chat -m runs one turn against a running node and prints it.
func TestChatOneShot(t *testing.T) {
	a := startTestApp(t)
	events, err := a.e.JetStream().Stream(context.Background(), subjects.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	// The clients' consumers, not the workers' durable ones.
	consumers := func() (n int) {
		for name := range events.ConsumerNames(context.Background()).Name() {
			if name != subjects.CompactionConsumer {
				t.Log("consumer", name)
				n++
			}
		}
		return n
	}
	out, err := runIII(t, "chat", "--nats", a.node.ClientURL(), "-m", `/call state::get {"scope":"demo","key":"chat"}`)
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, out)
	}
	for _, want := range []string{"→ state::get", "← call_", "function state::get returned"} {
		if !strings.Contains(out, want) {
			t.Fatalf("chat output lacks %q:\n%s", want, out)
		}
	}
	// A call without arguments shows them as the function gets them: {}.
	out, err = runIII(t, "chat", "--nats", a.node.ClientURL(), "-m", `/call state::get {}`)
	if err != nil || !strings.Contains(out, "→ state::get {}\n") {
		t.Fatalf("chat with no arguments: %v\n%s", err, out)
	}
	// The shipped policy denies state writes to the model.
	out, err = runIII(t, "chat", "--nats", a.node.ClientURL(), "-m", `/call state::set {"scope":"demo","key":"chat","value":1}`)
	if err != nil || !strings.Contains(out, "denied (permissions)") {
		t.Fatalf("chat with a denied call: %v\n%s", err, out)
	}
	// A failed model call says why, and fails the command.
	out, err = runIII(t, "chat", "--nats", a.node.ClientURL(), "-m", "/fail permanent")
	if err == nil || !strings.Contains(err.Error(), `stop_reason "error"`) || !strings.Contains(out, "error: ") || !strings.Contains(out, "[error]") {
		t.Fatalf("chat with a failing model: %v\n%s", err, out)
	}
	out, err = runIII(t, "chat", "--nats", a.node.ClientURL(), "-m", "hello there")
	if err != nil || !strings.Contains(out, "hello there") {
		t.Fatalf("chat echo: %v\n%s", err, out)
	}
	// Each turn's event consumer went with it.
	if n := consumers(); n != 0 {
		t.Fatalf("the event stream has %d client consumers after four chats", n)
	}
}

// iii worker run starts a module against a running node: a second
// scripted provider replica joins the first.
func TestWorkerRun(t *testing.T) {
	a := startTestApp(t)
	url := a.node.ClientURL()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"worker", "run", "provider-scripted", "--nats", url, "--home", t.TempDir(), "--log-level", "error"})
	go func() { done <- cmd.ExecuteContext(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := runIII(t, "workers", "--nats", url)
		if err == nil && strings.Count(res, "provider-scripted") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second provider-scripted never appeared:\n%s", res)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("worker run did not stop")
	}
	if out, err := runIII(t, "worker", "run", "no-such-worker", "--nats", url); err == nil {
		t.Fatalf("unknown module accepted:\n%s", out)
	}
}

// TestWorkerRunLocalCalls: the modules of one `iii worker run` process
// call each other without the bus, as a node's own do (here the
// orchestrator and the scripted provider, which the node leaves out);
// with --local-calls=false their calls and frames travel over it.
func TestWorkerRunLocalCalls(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
		bus   bool // provider calls and frames seen on the bus
	}{
		{"default", nil, false},
		{"local-calls=false", []string{"--local-calls=false"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			mods := slices.DeleteFunc(slices.Clone(std.Default), func(m string) bool { return m == "orchestrator" || m == "provider-scripted" })
			a := startTestAppWith(t, upConfig{modules: mods})
			url := a.node.ClientURL()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			cmd := newRootCmd()
			cmd.SetOut(io.Discard)
			cmd.SetArgs(append([]string{"worker", "run", "orchestrator", "provider-scripted", "--nats", url, "--home", t.TempDir(), "--log-level", "error"}, c.flags...))
			go func() { done <- cmd.ExecuteContext(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("worker run: %v", err)
				}
			}()
			enginetest.Eventually(t, 10*time.Second, func() error {
				res, err := runIII(t, "workers", "--nats", url)
				if err != nil || !strings.Contains(res, "orchestrator") || !strings.Contains(res, "provider-scripted") {
					return fmt.Errorf("workers: %v\n%s", err, res)
				}
				return nil
			})
			got := busCallCounts(t, a, map[string]int{"provider::scripted::stream": 0, "iii.ch.*": 0})
			if bus := got["provider::scripted::stream"] > 0 && got["iii.ch.*"] > 0; bus != c.bus {
				t.Fatalf("over the bus: %v (want some: %v)", got, c.bus)
			}
		})
	}
}

// The node serves the permission gate with the shipped default policy.
func TestPolicyDefault(t *testing.T) {
	a := startTestApp(t)
	url := a.node.ClientURL()
	for fn, want := range map[string]string{
		"state::set":              `"decision": "deny"`,
		"engine::functions::list": `"decision": "allow"`,
		"shell::exec":             `"decision": "needs_approval"`,
	} {
		out, err := runIII(t, "trigger", "policy::check_permissions", `{"function_id":"`+fn+`","args":{}}`, "--nats", url)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("%s: %v\n%s", fn, err, out)
		}
	}
}

// iii chat shows a call that needs approval with the command that decides
// it, and finishes once a human has.
func TestChatApproval(t *testing.T) {
	a := startTestApp(t)
	url := a.node.ClientURL()
	var out enginetest.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"chat", "--nats", url, "--session", "chat_ap", "-m", `/call fs::write {"path":"/tmp/x","content":"hi"}`})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(context.Background()) }()
	var resolveReq string
	enginetest.Eventually(t, 20*time.Second, func() error {
		s := out.String()
		i := strings.Index(s, "iii trigger approval::resolve '")
		if i < 0 {
			return fmt.Errorf("no approval prompt yet: %q", s)
		}
		rest := s[i+len("iii trigger approval::resolve '"):]
		resolveReq = rest[:strings.Index(rest, "'")]
		return nil
	})
	if !strings.Contains(out.String(), "fs::write") {
		t.Fatalf("prompt does not name the function: %s", out.String())
	}
	deny := strings.Replace(resolveReq, `"allow"`, `"deny"`, 1)
	if res, err := runIII(t, "trigger", "--nats", url, "approval::resolve", deny); err != nil || !strings.Contains(res, "true") {
		t.Fatalf("resolve: %v %s", err, res)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("chat did not finish after the decision:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "denied by the user") {
		t.Fatalf("chat output lacks the denial:\n%s", out.String())
	}
}

// The model catalog reconciles with the scripted provider over the bus.
func TestModelsReconcileScripted(t *testing.T) {
	a := startTestApp(t)
	out, err := runIII(t, "trigger", "--nats", a.node.ClientURL(), "models::reconcile", `{"provider":"scripted"}`)
	if err != nil || !strings.Contains(out, `"echo"`) {
		t.Fatalf("reconcile: %v %s", err, out)
	}
}

// In interactive mode iii chat asks about a parked call and records the
// answer itself.
func TestChatAsksForApproval(t *testing.T) {
	a := startTestApp(t)
	var out enginetest.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader("/call fs::write {\"path\":\"/tmp/x\"}\nn\n"))
	cmd.SetArgs([]string{"chat", "--nats", a.node.ClientURL(), "--session", "chat_ask"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("chat: %v\n%s", err, out.String())
	}
	for _, want := range []string{"needs approval. Allow?", "denied by the user: decided in iii chat"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("chat output lacks %q:\n%s", want, out.String())
		}
	}
	// A call without arguments is put to the user as it runs: with {}.
	var out2 enginetest.Buffer
	cmd = newRootCmd()
	cmd.SetOut(&out2)
	cmd.SetErr(&out2)
	cmd.SetIn(strings.NewReader("/call fs::write {}\nn\n"))
	cmd.SetArgs([]string{"chat", "--nats", a.node.ClientURL(), "--session", "chat_ask"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("chat: %v\n%s", err, out2.String())
	}
	if want := "? fs::write {} needs approval"; !strings.Contains(out2.String(), want) {
		t.Fatalf("chat output lacks %q:\n%s", want, out2.String())
	}
}

// A node exports its spans to the trace store: after a chat turn, `iii
// traces` lists the session and `iii traces show` prints a trace of it.
func TestTraces(t *testing.T) {
	a := startTestApp(t)
	url := a.node.ClientURL()
	out, err := runIII(t, "chat", "--nats", url, "--session", "traced1", "-m", "hello traces")
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, out)
	}
	var newest string
	enginetest.Eventually(t, 10*time.Second, func() error {
		out, err := runIII(t, "traces", "--nats", url)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 6 && f[0] == "traced1" {
				newest = f[5]
				return nil
			}
		}
		return fmt.Errorf("no traced1 row:\n%s", out)
	})
	out, err = runIII(t, "traces", "show", "--nats", url, newest)
	if err != nil || !strings.Contains(out, "trace "+newest) || !strings.Contains(out, "session=traced1") {
		t.Fatalf("traces show: %v\n%s", err, out)
	}
	if _, err := runIII(t, "traces", "show", "--nats", url, "nothex"); err == nil {
		t.Fatal("traces show of a malformed id did not fail")
	}
}

// iii up --metrics serves the node's metrics to Prometheus: after a chat
// turn with a function call, turns, function latencies, policy decisions,
// tokens and active grains are there.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	a, err := startApp(ctx, upConfig{
		home: t.TempDir(), listen: "127.0.0.1:0", metricsAddr: "127.0.0.1:0",
		logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = a.close(ctx)
	})
	out, err := runIII(t, "chat", "--nats", a.node.ClientURL(), "-m", `/call state::get {"scope":"demo","key":"m"}`)
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, out)
	}
	url := "http://" + a.metricsLn.Addr().String() + "/metrics"
	enginetest.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body := string(b)
		for _, want := range []string{
			"iii_turns_started_total 1",
			`iii_turns_finished_total{stop_reason="end"} 1`,
			`iii_turn_duration_seconds_count{stop_reason="end"} 1`,
			`iii_function_duration_seconds_count{iii_function_id="state::get",outcome="ok"}`,
			`iii_policy_decisions_total{decision="allow"}`,
			`iii_model_tokens_total{model="echo",provider="scripted",type="output"}`,
			"iii_grains_active",
			"iii_approvals_pending",
			`iii_turn_step_duration_seconds_count{state="assistant_streaming"}`,
			`iii_turn_step_duration_seconds_count{state="function_execute"}`,
			"iii_queue_pending{",
		} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("metrics lack %q", want)
			}
		}
		return nil
	})
}

// TestConnectionPerModule: every worker module of `iii up` has its own
// connection, named after it; --shared-conn runs them all on the node's
// one, and a turn runs either way.
func TestConnectionPerModule(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			a := startTestAppWith(t, upConfig{sharedConn: shared})
			cz, err := a.node.Server().Connz(&server.ConnzOptions{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			for _, c := range cz.Conns {
				names[c.Name] = true
			}
			for _, m := range modules(upConfig{}) {
				if names["iii-"+m] == shared {
					t.Errorf("connection iii-%s present = %v with shared=%v (connections %v)", m, names["iii-"+m], shared, names)
				}
			}
			out, err := runIII(t, "chat", "--nats", a.node.ClientURL(), "-m", "hello there", "--log-level", "error")
			if err != nil || !strings.Contains(out, "hello there") {
				t.Fatalf("chat: %v\n%s", err, out)
			}
		})
	}
}

// TestUpLocalCalls: by default `iii up` runs a turn whose calls between
// the node's own workers skip the bus (harness::trigger's run::start, the
// policy check), and so do the model's stream frames (the orchestrator's
// channel and the provider's writer), while the chat client's
// harness::trigger, from another engine without local calls, still comes
// over it; with `--local-calls=false` every call and frame comes over the
// bus.
func TestUpLocalCalls(t *testing.T) {
	for _, c := range []struct {
		name     string
		busCalls bool
		want     map[string]int // calls seen on the bus; frames: -1 for some
	}{
		{"default", false, map[string]int{"harness::trigger": 1, "run::start": 0, "policy::check_permissions": 0, "iii.ch.>": 0}},
		{"local-calls=false", true, map[string]int{"harness::trigger": 1, "run::start": 1, "policy::check_permissions": 1, "iii.ch.>": -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := startTestAppWith(t, upConfig{busCalls: c.busCalls})
			got := busCallCounts(t, a, c.want)
			if c.want["iii.ch.>"] < 0 && got["iii.ch.>"] > 0 {
				got["iii.ch.>"] = -1
			}
			if !maps.Equal(got, c.want) {
				t.Errorf("calls over the bus %v, want %v", got, c.want)
			}
		})
	}
}

// busCallCounts runs one chat turn on a and counts the calls of each of
// the functions in ids that came over the bus (or the messages on a
// subject, for a key with a dot).
func busCallCounts(t *testing.T, a *app, ids map[string]int) map[string]int {
	t.Helper()
	nc := enginetest.Connect(t, a.node.Server())
	counts := map[string]*int{}
	for id := range ids {
		subj, err := id, error(nil)
		if !strings.Contains(id, ".") {
			subj, err = subjects.FunctionSubject(id)
		}
		if err != nil {
			t.Fatal(err)
		}
		n := new(int)
		counts[id] = n
		if _, err := nc.Subscribe(subj, func(*nats.Msg) { *n++ }); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	out, err := runIII(t, "chat", "--nats", a.node.ClientURL(), "-m", `/call state::get {"scope":"demo","key":"chat"}`, "--log-level", "error")
	if err != nil || !strings.Contains(out, "function state::get returned") {
		t.Fatalf("chat: %v\n%s", err, out)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	// The subscriptions' callbacks run on one goroutine; Drain waits for it.
	if err := nc.Drain(); err != nil {
		t.Fatal(err)
	}
	for !nc.IsClosed() {
		time.Sleep(time.Millisecond)
	}
	got := map[string]int{}
	for id, n := range counts {
		got[id] = *n
	}
	return got
}
