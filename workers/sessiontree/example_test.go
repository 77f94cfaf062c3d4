package sessiontree_test

import (
	"context"
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// A conversation, a branch off its first answer, and a fork that goes on
// from there, all through the bus.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := x.Engine
	w := sessiontree.NewWorker()
	if err := w.Start(ctx, e); err != nil {
		panic(err)
	}
	defer w.Close(ctx)

	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	_, err := engine.Call[sessiontree.CreateResponse](ctx, e, sessiontree.CreateFunction, sessiontree.CreateRequest{SessionID: "demo"})
	must(err)
	batch, err := engine.Call[sessiontree.AppendBatchResponse](ctx, e, sessiontree.AppendBatchFunction, sessiontree.AppendBatchRequest{
		SessionID: "demo",
		Messages: []agent.Message{
			agent.UserText("What is NATS?", 1),
			{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("A messaging system.")}, StopReason: agent.StopEnd},
			agent.UserText("Shorter, please.", 1),
		},
	})
	must(err)
	// Branch: a different follow-up to the first answer.
	other := agent.UserText("And JetStream?", 1)
	_, err = engine.Call[sessiontree.AppendResponse](ctx, e, sessiontree.AppendFunction, sessiontree.AppendRequest{
		SessionID: "demo", ParentID: batch.EntryIDs[1], Message: &other,
	})
	must(err)
	// Fork at the first answer: shared history, separate future.
	fork, err := engine.Call[sessiontree.CreateResponse](ctx, e, sessiontree.ForkFunction, sessiontree.ForkRequest{
		SessionID: "demo", FromEntryID: batch.EntryIDs[1], NewSessionID: "demo-fork",
	})
	must(err)

	show := func(sid, leaf string) {
		r, err := engine.Call[sessiontree.MessagesResponse](ctx, e, sessiontree.MessagesFunction, sessiontree.ReadRequest{SessionID: sid, Leaf: leaf})
		must(err)
		fmt.Printf("%s:", sid)
		for _, m := range r.Messages {
			fmt.Printf(" [%s] %s", m.Message.Role, m.Message.Content[0].Text)
		}
		fmt.Println()
	}
	show("demo", "")                // the active path: the branch
	show("demo", batch.EntryIDs[2]) // the first path
	show(fork.SessionID, "")        // the fork

	tree, err := engine.Call[sessiontree.TreeResponse](ctx, e, sessiontree.TreeFunction, sessiontree.SessionRequest{SessionID: "demo"})
	must(err)
	for _, n := range tree.Nodes {
		fmt.Printf("%s under %-4q children %d  %s\n", n.EntryID, n.ParentID, n.ChildrenCount, n.Summary)
	}
	// Output:
	// demo: [user] What is NATS? [assistant] A messaging system. [user] And JetStream?
	// demo: [user] What is NATS? [assistant] A messaging system. [user] Shorter, please.
	// demo-fork: [user] What is NATS? [assistant] A messaging system.
	// e1 under ""   children 1  user: What is NATS?
	// e2 under "e1" children 2  assistant: A messaging system.
	// e3 under "e2" children 0  user: Shorter, please.
	// e4 under "e2" children 0  user: And JetStream?
}
