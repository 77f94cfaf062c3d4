package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/approval"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/policy"
	"github.com/iii-on-nats/iii/workers/sandbox"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// One turn of an agent that works: under the shipped default policy the
// model writes a file and reads it back with a shell command, a human
// approves each call through approval::resolve, the command runs in the
// run's bubblewrap sandbox and returns the file's content, and the sandbox
// is gone when the run ends.
func TestSandboxedTurnWithApprovals(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	n := newNode(t, ns)
	env := workers.Env{Home: enginetest.NodeHome(t)}
	p, err := scripted.New()
	if err != nil {
		t.Fatal(err)
	}
	sb := sandbox.NewWorker()
	n.start(policy.NewWorker("", policy.WithFallback(policy.DefaultYAML())), env)
	n.start(approval.NewWorker(), env)
	n.start(sessiontree.NewWorker(), env)
	n.start(sb, env)
	n.start(scripted.NewWorker(p), env)
	n.start(orchestrator.New(), env)
	if mode, why := sb.Isolation(); mode != "bwrap" {
		t.Fatalf("the sandbox worker has no isolation (%q: %s): install bubblewrap (go tool task bubblewrap)", mode, why)
	}
	ctx := context.Background()
	const sid = "worker1"
	prompt := "/call fs::write {\"path\":\"notes/hello.txt\",\"content\":\"hello from the sandbox\\n\"}\n" +
		"/call shell::exec {\"command\":\"cat notes/hello.txt && id -u\"}"
	var res orchestrator.RunStartResult
	if err := n.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", Sandbox: true,
		Messages: []agent.Message{userText(prompt)}}, &res); err != nil || !res.Started {
		t.Fatalf("run::start = %+v, %v", res, err)
	}
	// Both calls need a human (the default policy); approve the write,
	// wait until it ran, then approve the command.
	parked := func(want int) map[string]agent.PendingApproval {
		t.Helper()
		out := map[string]agent.PendingApproval{}
		enginetest.Eventually(t, 20*time.Second, func() error {
			var view *agent.TurnView
			if err := n.e.Trigger(ctx, "turn::get_state", map[string]string{"session_id": sid}, &view); err != nil {
				return err
			}
			if view == nil || view.State != agent.StateFunctionAwaitingApproval || len(view.AwaitingApproval) != want {
				return fmt.Errorf("turn %+v, want %d parked", view, want)
			}
			for _, pa := range view.AwaitingApproval {
				out[pa.FunctionID] = pa
			}
			return nil
		})
		return out
	}
	allow := func(pa agent.PendingApproval) {
		t.Helper()
		if err := n.e.Trigger(ctx, "approval::resolve", map[string]any{"session_id": sid, "function_call_id": pa.FunctionCallID,
			"decision": "allow", "args_hash": pa.ArgsHash}, nil); err != nil {
			t.Fatal(err)
		}
	}
	first := parked(2)
	var list sandbox.ListResponse
	if err := n.e.Trigger(ctx, "sandbox::list", map[string]string{"session_id": sid}, &list); err != nil || len(list.Sandboxes) != 1 {
		t.Fatalf("sandbox::list = %+v, %v", list, err)
	}
	workdir := list.Sandboxes[0].Workdir
	allow(first["fs::write"])
	exec := parked(1)["shell::exec"]
	if got, err := os.ReadFile(filepath.Join(workdir, "notes", "hello.txt")); err != nil || string(got) != "hello from the sandbox\n" {
		t.Fatalf("the write did not land in the workdir: %q, %v", got, err)
	}
	allow(exec)

	evs := n.events(sid, 30*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
		t.Fatalf("stop reason %q", last.StopReason)
	}
	var out string
	for _, ev := range evs {
		if ev.Type == agent.EventFunctionExecutionEnd && ev.FunctionCallID == exec.FunctionCallID && ev.Result != nil {
			if ev.IsError {
				t.Fatalf("shell::exec failed: %+v", ev.Result)
			}
			for _, c := range ev.Result.Content {
				out += c.Text
			}
		}
	}
	if !strings.Contains(out, "hello from the sandbox") || !strings.Contains(out, "1000") {
		t.Fatalf("shell::exec answered %q; want the file's content, run as the sandbox's uid 1000", out)
	}
	if uid, _ := sb.FileOwner(); os.Geteuid() == 0 && uid != 65534 {
		t.Fatalf("a root node ran bubblewrap as host uid %d, want the unprivileged 65534", uid)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		var list sandbox.ListResponse
		if err := n.e.Trigger(ctx, "sandbox::list", map[string]string{"session_id": sid}, &list); err != nil {
			return err
		}
		if len(list.Sandboxes) != 0 {
			return fmt.Errorf("sandboxes left: %+v", list.Sandboxes)
		}
		if _, err := os.Stat(workdir); !os.IsNotExist(err) {
			return fmt.Errorf("workdir %s still there: %v", workdir, err)
		}
		return nil
	})
}
