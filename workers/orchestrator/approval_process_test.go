package orchestrator_test

// The approval gate with real processes: a node without an orchestrator
// (`iii up --workers ...`), the orchestrator as its own process
// (`iii worker run orchestrator`), decisions from the real nats CLI.

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// orchestratorProc is `iii worker run orchestrator` as a child process.
type orchestratorProc struct {
	t    *testing.T
	node *crashNode
	cmd  *exec.Cmd
	done chan error
	logs enginetest.Buffer
}

func startOrchestratorProc(t *testing.T, n *crashNode) *orchestratorProc {
	t.Helper()
	p := &orchestratorProc{t: t, node: n}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("orchestrator stderr:\n%s", p.logs.String())
		}
	})
	p.start()
	return p
}

func (p *orchestratorProc) start() {
	p.t.Helper()
	cmd := exec.Command(p.node.bin, "worker", "run", "orchestrator", "--nats", p.node.url(), "--home", p.t.TempDir(),
		"--log-level", "warn", "--set", "orchestrator.ack_wait=2s")
	cmd.Stdout = &p.logs
	cmd.Stderr = &p.logs
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.cmd, p.done = cmd, make(chan error, 1)
	go func(done chan error) { done <- cmd.Wait() }(p.done)
}

// kill sends SIGKILL.
func (p *orchestratorProc) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// A turn parks on approval; the orchestrator process is killed; a human
// allows the call with the nats CLI while no orchestrator runs; a new
// orchestrator process completes the turn and the call runs once.
func TestApprovalAcrossOrchestratorKill(t *testing.T) {
	t.Parallel()
	n := startCrashNodeWith(t, "version: 1\nrules: []\n", []string{"--workers", "policy,approval,hooks,session,provider-scripted"})
	tl := newCrashTools(t, n.url())
	orch := startOrchestratorProc(t, n)
	js := tl.e.JetStream()
	const sid = "proc_ap"
	enginetest.Eventually(t, 30*time.Second, func() error {
		_, err := crashTurnState(tl.e, sid)
		return err // function_not_found until the orchestrator is up
	})
	crashStartRun(t, tl.e, sid, `/call crash::fast {"tag":"ap","n":1}`)
	var view *agent.TurnView
	enginetest.Eventually(t, 15*time.Second, func() error {
		v, err := crashTurnState(tl.e, sid)
		if err != nil {
			return err
		}
		if v == nil || v.State != agent.StateFunctionAwaitingApproval {
			return fmt.Errorf("turn %+v: not parked yet", v)
		}
		view = v
		return nil
	})
	orch.kill()

	// list_pending and resolve from the real nats CLI, while no
	// orchestrator runs.
	out := enginetest.RunNATS(t, n.url(), "req", "iii.fn.approval.list_pending", `{"session_id":"`+sid+`"}`, "--raw")
	var list struct {
		Pending []struct {
			FunctionCallID string `json:"function_call_id"`
			FunctionID     string `json:"function_id"`
			ArgsHash       string `json:"args_hash"`
		} `json:"pending"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &list); err != nil || len(list.Pending) != 1 || list.Pending[0].FunctionID != "crash::fast" {
		t.Fatalf("list_pending: %v %q", err, out)
	}
	p := list.Pending[0]
	if p.FunctionCallID != view.AwaitingApproval[0].FunctionCallID || p.ArgsHash != view.AwaitingApproval[0].ArgsHash {
		t.Fatalf("pending %+v, parked %+v", p, view.AwaitingApproval[0])
	}
	req := fmt.Sprintf(`{"session_id":%q,"function_call_id":%q,"decision":"allow","args_hash":%q}`, sid, p.FunctionCallID, p.ArgsHash)
	if out := enginetest.RunNATS(t, n.url(), "req", "iii.fn.approval.resolve", req, "--raw"); !strings.Contains(out, `"ok":true`) {
		t.Fatalf("resolve: %q", out)
	}
	if c := tl.count("crash::fast", "ap", 1); c != 0 {
		t.Fatalf("the call ran %d times before the orchestrator came back", c)
	}

	orch.start()
	evs := crashWaitAgentEnds(t, js, sid, 1, 30*time.Second)
	if r := crashStopReason(evs); r != agent.StopEnd {
		t.Fatalf("stop reason %q: %s", r, crashTypes(evs))
	}
	if c := tl.count("crash::fast", "ap", 1); c != 1 {
		t.Fatalf("the approved call ran %d times", c)
	}
	// The decision was consumed: the same one again (a retry after a
	// lost reply) is answered as recorded, another is refused, and the
	// call does not run again.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if out, err := resolve(ctx, tl.nc, map[string]any{"session_id": sid, "function_call_id": p.FunctionCallID, "decision": "allow"}); err != nil || out["already_decided"] != true {
		t.Fatalf("the same decision again: %v, %v", out, err)
	}
	if _, err := resolve(ctx, tl.nc, map[string]any{"session_id": sid, "function_call_id": p.FunctionCallID, "decision": "deny"}); err == nil {
		t.Fatal("a consumed decision was changed")
	}
	time.Sleep(200 * time.Millisecond)
	if c := tl.count("crash::fast", "ap", 1); c != 1 {
		t.Fatalf("the approved call ran %d times", c)
	}
}
