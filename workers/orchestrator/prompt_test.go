package orchestrator

import (
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

func TestAssemblePrompt(t *testing.T) {
	t.Parallel()
	sb := &sandboxCreated{Workdir: "/w/s1"}
	tests := []struct {
		name    string
		parts   promptParts
		want    []string // in this order
		notWant []string
	}{
		{"bare", promptParts{}, []string{identityPreamble, "Mode: agent."}, []string{"# Skills", "workspace"}},
		{"ask", promptParts{Mode: agent.ModeAsk}, []string{"Mode: ask."}, []string{"Mode: agent."}},
		{"everything", promptParts{Mode: agent.ModePlan, Index: "# Skills\n\n- [A](iii://w/a): a\n", Sandbox: sb,
			Skills: []skillDoc{{ID: "w/a", Link: "iii://w/a", Body: "  use a  "}, {ID: "w/b", Title: "B", Body: "use b"}}},
			[]string{identityPreamble, "Mode: plan.", "/w/s1", "Network access is off", "# Skills\n\n- [A](iii://w/a): a", "# Skills for this run", "## w/a (iii://w/a)\n\nuse a", "## B\n\nuse b"}, nil},
		{"blank index", promptParts{Index: " \n "}, nil, []string{"# Skills"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := assemblePrompt(tt.parts)
			at := 0
			for _, w := range tt.want {
				i := strings.Index(got[at:], w)
				if i < 0 {
					t.Fatalf("lacks %q after offset %d:\n%s", w, at, got)
				}
				at += i + len(w)
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Fatalf("has %q:\n%s", w, got)
				}
			}
		})
	}
}

func TestOfferedIndex(t *testing.T) {
	t.Parallel()
	md := "# Skills\n\nEach line links a skill document.\n\n" +
		"## approval\n- [approval::resolve](iii://approval/approval::resolve): decide\n\n" +
		"## sandbox\n[Sandboxes](iii://sandbox/overview): run commands\n- [shell::exec](iii://sandbox/shell::exec): run one\n- [sandbox::create](iii://sandbox/sandbox::create): make one\n\n" +
		"## directory\n- [get](iii://directory/directory::skills::get): a skill"
	got := offeredIndex(md, agent.RunStart{}, nil)
	for _, want := range []string{"# Skills", "Each line links", "## sandbox", "(iii://sandbox/overview)", "shell::exec", "## directory", "directory::skills::get"} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"## approval", "approval::resolve", "sandbox::create"} {
		if strings.Contains(got, not) {
			t.Errorf("has %q (not offered):\n%s", not, got)
		}
	}
	if got := offeredIndex(md, agent.RunStart{ToolMode: agent.ToolsNone}, nil); got != "" {
		t.Errorf("a run with no tools got an index:\n%s", got)
	}
	if got := offeredIndex(md, agent.RunStart{Tools: []string{"shell::*"}}, nil); strings.Contains(got, "directory") || !strings.Contains(got, "shell::exec") {
		t.Errorf("tools [shell::*]:\n%s", got)
	}
	// A function no worker serves any more (its skill stays published)
	// is left out, and so is its worker's section when nothing is left.
	live := func(fn string) bool { return fn == "directory::skills::get" }
	if got := offeredIndex(md, agent.RunStart{}, live); strings.Contains(got, "sandbox") || !strings.Contains(got, "directory::skills::get") {
		t.Errorf("only directory::skills::get registered:\n%s", got)
	}
}
