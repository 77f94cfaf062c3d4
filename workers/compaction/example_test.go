package compaction_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/compaction"
	"github.com/iii-on-nats/iii/workers/models"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// A session that no longer fits a small model's window is compacted: the
// model then sees a summary and the newest messages.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := x.Engine
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}

	// The session's model: "small" (4000 tokens) of the offline provider,
	// whose summaries are canned.
	p, err := scripted.New(scripted.WithScript("small", func(scripted.StreamRequest) (scripted.Reply, error) {
		return scripted.Reply{Text: "## Goal\nTune the parser.\n## Constraints\nNone.\n## Progress\nBenchmarks ran.\n" +
			"## Decisions\nNone.\n## Function calls made\nNone.\n## Next steps\nProfile.\n## Critical context\nNone.\n## Files\nNone."}, nil
	}))
	must(err)
	for _, w := range []interface {
		Start(context.Context, *engine.Engine) error
		Close(context.Context) error
	}{
		sessiontree.NewWorker(),
		models.NewWorker(models.WithCatalog([]agent.Model{{ID: "small", Provider: "scripted", ContextWindow: 4000, MaxOutputTokens: 1000}})),
		scripted.NewWorker(p),
		compaction.NewWorker(compaction.WithAuto(false)),
	} {
		must(w.Start(ctx, e))
		defer w.Close(ctx)
	}

	_, err = engine.Call[sessiontree.CreateResponse](ctx, e, sessiontree.CreateFunction, sessiontree.CreateRequest{SessionID: "demo"})
	must(err)
	var msgs []agent.Message
	for i := range 32 {
		text := fmt.Sprintf("message %d: %s", i, strings.Repeat("lorem ipsum ", 33))
		if i%2 == 0 {
			msgs = append(msgs, agent.UserText(text, 1))
		} else {
			msgs = append(msgs, agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(text)}, StopReason: agent.StopEnd})
		}
	}
	_, err = engine.Call[sessiontree.AppendBatchResponse](ctx, e, sessiontree.AppendBatchFunction,
		sessiontree.AppendBatchRequest{SessionID: "demo", Messages: msgs})
	must(err)

	r, err := engine.Call[compaction.CompactResponse](ctx, e, compaction.CompactFunction, compaction.CompactRequest{
		SessionID: "demo", Provider: "scripted", Model: "small", Reason: compaction.ReasonOverflow, Wait: true,
	})
	must(err)
	fmt.Printf("compacted: %v, %d → %d tokens\n", r.Compacted, r.TokensBefore, r.TokensAfter)

	v, err := engine.Call[sessiontree.MessagesResponse](ctx, e, sessiontree.MessagesFunction, sessiontree.ReadRequest{SessionID: "demo"})
	must(err)
	fmt.Printf("the model now sees %d messages:\n", len(v.Messages))
	for _, m := range v.Messages[:2] {
		text := m.Message.Content[0].Text
		text = strings.TrimPrefix(text, sessiontree.CompactionPrefix)
		fmt.Printf("  %s: %.40s…\n", m.Message.Role, strings.ReplaceAll(text, "\n", " "))
	}
	// Output:
	// compacted: true, 3264 → 659 tokens
	// the model now sees 7 messages:
	//   user: ## Goal Tune the parser. ## Constraints …
	//   user: message 26: lorem ipsum lorem ipsum lore…
}
