package turn

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current machine")

type scenario struct {
	name     string
	maxTurns int
	inputs   []Input
}

var (
	readTmp   = call("c1", "fs::read", map[string]any{"path": "/tmp"})
	readEtc   = call("c2", "fs::read", map[string]any{"path": "/etc"})
	rmTmp     = call("c1", "shell::exec", map[string]any{"command": "rm -rf /tmp/cache"})
	listFiles = agent.TextResult("a.txt\nb.txt")
)

func idempotentReads(fn string) bool { return fn == "fs::read" }

var scenarios = []scenario{
	{name: "plain_answer", inputs: []Input{
		Provisioned{},
		ModelDone{answer("/tmp holds a.txt and b.txt.")},
		SteeringDrained{},
	}},
	{name: "one_call", inputs: []Input{
		Provisioned{},
		ModelDone{answer("Let me look.", readTmp)},
		CallsStarted{IDs: []string{"c1"}},
		CallDone{ID: "c1", Result: listFiles},
		SteeringDrained{},
		ModelDone{answer("Two files: a.txt and b.txt.")},
		SteeringDrained{},
	}},
	{name: "parallel_out_of_order", inputs: []Input{
		Provisioned{},
		ModelDone{answer("", readTmp, readEtc)},
		CallsStarted{IDs: []string{"c1", "c2"}},
		CallDone{ID: "c2", Result: agent.TextResult("hosts\npasswd")},
		CallDone{ID: "c1", Result: listFiles},
		SteeringDrained{},
		ModelDone{answer("Done.")},
		SteeringDrained{},
	}},
	{name: "approval_allow", inputs: []Input{
		Provisioned{},
		ModelDone{answer("", rmTmp)},
		CallParked{ID: "c1", ArgsHash: "sha256:9f2c"},
		ApprovalResolved{ID: "c1", Decision: DecisionAllow},
		CallsStarted{IDs: []string{"c1"}},
		CallDone{ID: "c1", Result: agent.TextResult("")},
		SteeringDrained{},
		ModelDone{answer("Cache cleared.")},
		SteeringDrained{},
	}},
	{name: "approval_deny", inputs: []Input{
		Provisioned{},
		ModelDone{answer("", rmTmp)},
		CallParked{ID: "c1", ArgsHash: "sha256:9f2c"},
		ApprovalResolved{ID: "c1", Decision: DecisionDeny, Reason: "not today"},
		SteeringDrained{},
		ModelDone{answer("Understood, I left the cache alone.")},
		SteeringDrained{},
	}},
	{name: "abort_mid_stream", inputs: []Input{
		Provisioned{},
		Abort{Reason: "user pressed stop", Partial: &agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{
			agent.Text("/tmp holds"), call("c1", "fs::read", nil),
		}}},
	}},
	{name: "abort_while_parked", inputs: []Input{
		Provisioned{},
		ModelDone{answer("", rmTmp, readEtc)},
		CallParked{ID: "c1", ArgsHash: "sha256:9f2c"},
		CallsStarted{IDs: []string{"c2"}},
		CallDone{ID: "c2", Result: listFiles},
		Abort{Reason: "user pressed stop"},
	}},
	{name: "abort_mid_batch", inputs: []Input{
		Provisioned{},
		ModelDone{answer("", rmTmp, readEtc)},
		CallParked{ID: "c1", ArgsHash: "sha256:9f2c"},
		CallsStarted{IDs: []string{"c2"}},
		Abort{},
	}},
	{name: "provider_error", inputs: []Input{
		Provisioned{},
		ModelFailed{Kind: agent.ErrorRateLimited, Message: "429 too many requests", Partial: &agent.Message{
			Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("/tmp")},
		}},
	}},
	{name: "unstorable_mid_batch", inputs: []Input{
		Provisioned{},
		ModelDone{answer("", rmTmp, readEtc)},
		CallParked{ID: "c1", ArgsHash: "sha256:9f2c"},
		CallsStarted{IDs: []string{"c2"}},
		Fail{Message: "the run could not be stored: the turn record is 1100000 bytes, and the server takes 1048576 in a message"},
	}},
	{name: "provision_failed", inputs: []Input{
		ProvisionFailed{Kind: agent.ErrorAuthExpired, Message: "no credential for scripted"},
	}},
	{name: "budget_exceeded", inputs: []Input{
		Provisioned{},
		ModelDone{answer("", readTmp)},
		CallsStarted{IDs: []string{"c1"}},
		CallDone{ID: "c1", Result: listFiles},
		SteeringDrained{},
		BudgetExceeded{Message: "workspace ws1 reached its daily ceiling of $5.00"},
	}},
	{name: "max_turns", maxTurns: 2, inputs: []Input{
		Provisioned{},
		ModelDone{answer("", readTmp)},
		CallsStarted{IDs: []string{"c1"}},
		CallDone{ID: "c1", Result: listFiles},
		SteeringDrained{},
		ModelDone{answer("", readEtc)},
		CallsStarted{IDs: []string{"c2"}},
		CallDone{ID: "c2", Result: agent.TextResult("hosts")},
	}},
	{name: "steering_during_execution", inputs: []Input{
		Provisioned{},
		ModelDone{answer("", readTmp)},
		CallsStarted{IDs: []string{"c1"}},
		CallDone{ID: "c1", Result: listFiles},
		SteeringDrained{
			Steering:  []agent.Message{user("only .txt files please")},
			Followups: []agent.Message{user("then summarize them")},
		},
		ModelDone{answer("a.txt and b.txt are both .txt files.")},
		SteeringDrained{},
		ModelDone{answer("Summary: two text files.")},
		SteeringDrained{},
	}},
	{name: "followup_at_end", inputs: []Input{
		Provisioned{},
		ModelDone{answer("/tmp holds a.txt and b.txt.")},
		SteeringDrained{Followups: []agent.Message{user("and /etc?")}},
		ModelDone{answer("/etc holds hosts.")},
		SteeringDrained{},
	}},
	{name: "crash_recovery", inputs: []Input{
		Provisioned{},
		ModelDone{answer("", rmTmp, readEtc)},
		CallsStarted{IDs: []string{"c1", "c2"}},
		// The activation dies here; a new one finds both calls started.
		Recover{Idempotent: idempotentReads},
		CallsStarted{IDs: []string{"c2"}},
		CallDone{ID: "c2", Result: agent.TextResult("hosts")},
		SteeringDrained{},
		ModelDone{answer("The delete may or may not have run; /etc holds hosts.")},
		SteeringDrained{},
	}},
	{name: "terminate", inputs: []Input{
		Provisioned{},
		ModelDone{answer("", readTmp, readEtc)},
		CallsStarted{IDs: []string{"c1", "c2"}},
		CallDone{ID: "c1", Result: agent.FunctionResult{Content: []agent.Content{agent.Text("handed off")}, Terminate: true}},
		CallDone{ID: "c2", Result: agent.TextResult("hosts")},
	}},
}

// describe names an input and the ids it refers to, for the golden log.
func describe(in Input) string {
	switch in := in.(type) {
	case CallsStarted:
		return "CallsStarted " + strings.Join(in.IDs, ",")
	case CallDone:
		return "CallDone " + in.ID
	case CallParked:
		return "CallParked " + in.ID
	case ApprovalResolved:
		return fmt.Sprintf("ApprovalResolved %s %s", in.ID, in.Decision)
	}
	return InputName(in)
}

// replay runs a scenario on the test clock and renders its log: one
// header line per input ({"input", "step", "state"}) followed by the JSON of
// each effect it produced. Timestamps come from the test clock (t0 + 10 ms
// per input), so the log does not depend on the wall clock.
func replay(t *testing.T, sc scenario) []byte {
	t.Helper()
	var buf bytes.Buffer
	line := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	header := func(input string, rec Record) {
		line(struct {
			Input string          `json:"input"`
			Step  uint64          `json:"step"`
			State agent.TurnState `json:"state"`
		}{input, rec.Step, rec.State})
	}
	rec, effects, err := New(runStart(sc.maxTurns), testRun, t0)
	if err != nil {
		t.Fatal(err)
	}
	header("New", rec)
	for _, e := range effects {
		line(e)
	}
	now := t0
	for _, in := range sc.inputs {
		rec = Delivered(rec)
		now += 10
		if rec, effects, err = Apply(rec, in, now); err != nil {
			t.Fatalf("Apply(%s) in %s: %v", describe(in), rec.State, err)
		}
		header(describe(in), rec)
		for _, e := range effects {
			line(e)
		}
	}
	if !rec.State.Terminal() {
		t.Fatalf("scenario ends in %s, not a terminal state", rec.State)
	}
	return buf.Bytes()
}

func TestGolden(t *testing.T) {
	t.Parallel()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			got := replay(t, sc)
			path := filepath.Join("testdata", sc.name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
				for i := range max(len(gl), len(wl)) {
					var g, w string
					if i < len(gl) {
						g = gl[i]
					}
					if i < len(wl) {
						w = wl[i]
					}
					if g != w {
						t.Fatalf("%s differs at line %d:\n got %s\nwant %s\n(run go test -run TestGolden -update if the change is intended)", path, i+1, g, w)
					}
				}
			}
		})
	}
}
