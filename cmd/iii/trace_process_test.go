package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/traces"
)

// One turn across three processes — the node with the orchestrator and
// the trace store, the scripted provider (`iii worker run
// provider-scripted`), the web tool (`iii worker run web`) — with a call
// that waits for a human's approval, is one trace in the trace store:
// every span's parent is there, and the provider's and the tool's spans,
// exported by their own processes, hang under run::start.
func TestTraceAcrossProcesses(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "iii")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	start := func(args ...string) *bufio.Scanner {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "III_HOME="+enginetest.NodeHome(t))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return bufio.NewScanner(out)
	}
	sc := start("up", "--listen", "127.0.0.1:0", "--http", "", "--log-level", "error",
		"--workers", "policy,approval,hooks,directory,traces,session,orchestrator")
	urls := make(chan string, 1)
	go func() {
		for sc.Scan() {
			if url, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "nats:  "); ok {
				urls <- url
			}
		}
	}()
	var url string
	select {
	case url = <-urls:
	case <-time.After(30 * time.Second):
		t.Fatal("iii up did not print its URL in 30s")
	}
	start("worker", "run", "provider-scripted", "--nats", url, "--log-level", "error")
	start("worker", "run", "web", "--nats", url, "--log-level", "error")

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	e, err := engine.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	enginetest.Eventually(t, 30*time.Second, func() error {
		fns, err := e.FunctionsList(ctx)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, f := range fns {
			seen[f.ID] = true
		}
		if !seen["provider::scripted::stream"] || !seen["web::fetch"] || !seen["run::start"] {
			return fmt.Errorf("not all three processes serve yet")
		}
		return nil
	})

	const sid = "xproc"
	var res orchestrator.HarnessResult
	if err := e.Trigger(ctx, "harness::trigger", orchestrator.HarnessTrigger{SessionID: sid, MessageID: "m-x", Payload: agent.RunStart{
		SessionID: sid, Provider: "scripted", Model: "echo",
		Messages: []agent.Message{agent.UserText(`/call web::fetch {"url":"http://127.0.0.1:9/nothing"}`, time.Now().UnixMilli())},
	}}, &res); err != nil || !res.Body.Started {
		t.Fatalf("harness::trigger = %+v, %v", res, err)
	}
	// The shipped policy asks a human about web::fetch.
	enginetest.Eventually(t, 30*time.Second, func() error {
		var view *agent.TurnView
		if err := e.Trigger(ctx, "turn::get_state", map[string]string{"session_id": sid}, &view); err != nil {
			return err
		}
		if view == nil || len(view.AwaitingApproval) != 1 {
			return fmt.Errorf("turn %+v", view)
		}
		return e.Trigger(ctx, "approval::resolve", map[string]any{"session_id": sid,
			"function_call_id": view.AwaitingApproval[0].FunctionCallID, "decision": "allow"}, nil)
	})
	enginetest.Eventually(t, 30*time.Second, func() error {
		var view *agent.TurnView
		if err := e.Trigger(ctx, "turn::get_state", map[string]string{"session_id": sid}, &view); err != nil {
			return err
		}
		if view == nil || view.State != agent.StateStopped {
			return fmt.Errorf("turn %+v", view)
		}
		return nil
	})

	// The store holds the turn's trace, from all three processes.
	enginetest.Eventually(t, 30*time.Second, func() error {
		var groups traces.GroupByResponse
		if err := e.Trigger(ctx, traces.GroupByFunction, map[string]any{"attribute": "iii.message.id"}, &groups); err != nil {
			return err
		}
		for _, g := range groups.Groups {
			if g.Value != "m-x" {
				continue
			}
			var errs []string
			for _, id := range g.TraceIDs {
				var tree traces.TreeResponse
				if err := e.Trigger(ctx, traces.TreeFunction, map[string]string{"trace_id": id}, &tree); err != nil {
					return err
				}
				if err := oneStory(tree); err != nil {
					errs = append(errs, fmt.Sprintf("trace %s: %v", id, err))
					continue
				}
				return nil // the turn's trace
			}
			return fmt.Errorf("no trace of m-x tells the whole turn: %s", strings.Join(errs, "; "))
		}
		return fmt.Errorf("no trace of message m-x yet (%d groups)", len(groups.Groups))
	})
}

// oneStory checks that a trace has one root, harness::trigger, and holds
// the run, the model call, the provider's stream and the tool's call.
func oneStory(tree traces.TreeResponse) error {
	if len(tree.Spans) != 1 || tree.Spans[0].Name != "harness::trigger" {
		var roots []string
		for _, r := range tree.Spans {
			roots = append(roots, r.Name)
		}
		return fmt.Errorf("roots %v, want only harness::trigger", roots)
	}
	names := map[string]bool{}
	var walk func(n *traces.TreeNode)
	walk = func(n *traces.TreeNode) {
		names[n.Name] = true
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(tree.Spans[0])
	for _, want := range []string{"run::start", "chat echo", "provider::scripted::stream", "policy::check_permissions", "web::fetch"} {
		if !names[want] {
			return fmt.Errorf("lacks %s (has %v)", want, names)
		}
	}
	return nil
}
