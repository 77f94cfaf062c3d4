package e2e_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/compaction"
	"github.com/iii-on-nats/iii/workers/models"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/policy"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// A long conversation with a small-window model crosses the window again
// and again: the session is compacted (after a turn that filled the
// window, or before a call that would overflow it), later summaries fold
// in the earlier ones, the model never receives more than its window, and
// no turn fails.
func TestLongConversationIsCompacted(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		auto bool // the compaction worker's turn_end trigger
	}{
		{"after turns and before calls", true},
		{"only before calls that would overflow", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			longConversation(t, tt.auto)
		})
	}
}

func longConversation(t *testing.T, auto bool) {
	const window = 4000 // tokens; usable 3000
	ns := enginetest.RunServer(t)
	n := newNode(t, ns)
	env := workers.Env{Home: t.TempDir()}

	var (
		mu        sync.Mutex
		maxNeed   int
		summaries int
	)
	marker := regexp.MustCompile(`SUMMARY-\d+`)
	p, err := scripted.New(scripted.WithScript("tiny", func(req scripted.StreamRequest) (scripted.Reply, error) {
		need := agent.EstimateTokens(req.Messages) + (len(req.SystemPrompt)+3)/4
		mu.Lock()
		defer mu.Unlock()
		maxNeed = max(maxNeed, need)
		if need > window {
			return scripted.Reply{Fail: agent.ErrorContextOverflow, FailMessage: fmt.Sprintf("%d tokens do not fit %d", need, window)}, nil
		}
		if req.SystemPrompt == compaction.SystemPrompt {
			// The summarizer: a new marker, and every marker it was shown
			// (the previous summary is in its input).
			summaries++
			var seen []string
			for _, m := range req.Messages {
				for _, c := range m.Content {
					seen = append(seen, marker.FindAllString(c.Text, -1)...)
				}
			}
			return scripted.Reply{Text: fmt.Sprintf("## Goal\nSUMMARY-%d (folds in: %s)\n## Progress\nlong answers were given.", summaries, strings.Join(seen, ", "))}, nil
		}
		return scripted.Reply{Text: strings.Repeat("long answer ", 400)}, nil // 4,800 bytes: 1,200 tokens
	}))
	if err != nil {
		t.Fatal(err)
	}
	tiny := agent.Model{ID: "tiny", Provider: "scripted", DisplayName: "tiny window", ContextWindow: window, MaxOutputTokens: 1000, SupportsTools: true}
	n.start(policy.NewWorker("", policy.WithFallback([]byte(allowAll))), env)
	n.start(models.NewWorker(models.WithCatalog([]agent.Model{tiny})), env)
	n.start(sessiontree.NewWorker(), env)
	n.start(compaction.NewWorker(compaction.WithAuto(auto)), env)
	n.start(scripted.NewWorker(p), env)
	n.start(orchestrator.New(), env)

	const sid, runs = "long1", 10
	done := 0 // compaction_done events: compactions before a call
	for i := 1; i <= runs; i++ {
		var res orchestrator.RunStartResult
		if err := n.e.Trigger(context.Background(), "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "tiny", ToolMode: agent.ToolsNone,
			Messages: []agent.Message{userText(fmt.Sprintf("question %d: tell me more", i))}}, &res); err != nil || !res.Started {
			t.Fatalf("run %d: run::start = %+v, %v", i, res, err)
		}
		evs := n.eventsUntil(sid, i, 60*time.Second)
		if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
			t.Fatalf("run %d ended %q", i, last.StopReason)
		}
		for _, ev := range evs {
			if ev.Type == agent.EventCompactionDone {
				if ev.Compaction == nil || ev.Compaction.TokensAfter >= ev.Compaction.TokensBefore {
					t.Fatalf("run %d: compaction_done %+v", i, ev.Compaction)
				}
				done++
			}
		}
	}

	var entries struct {
		Entries []struct {
			Type    string `json:"type"`
			Summary string `json:"summary"`
		} `json:"entries"`
	}
	if err := n.e.Trigger(context.Background(), "session::entries", map[string]string{"session_id": sid}, &entries); err != nil {
		t.Fatal(err)
	}
	var sums []string
	for _, e := range entries.Entries {
		if e.Type == "compaction" {
			sums = append(sums, e.Summary)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d compactions on the path (%d before a call), %d summaries written, largest request %d tokens", len(sums), done, summaries, maxNeed)
	if !auto && done < 2 {
		t.Fatalf("%d compactions before a call, want at least 2 with the turn_end trigger off", done)
	}
	if len(sums) < 2 {
		t.Fatalf("%d compactions on the path, want at least 2", len(sums))
	}
	if last := sums[len(sums)-1]; !strings.Contains(last, "SUMMARY-1") {
		t.Fatalf("the last summary does not fold in the first: %q", last)
	}
	if maxNeed > window {
		t.Fatalf("the model received %d tokens, over its window of %d", maxNeed, window)
	}
}
