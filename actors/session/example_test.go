package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// Example runs one turn through the grains the orchestrator hosts, with the
// offline scripted model, and prints the events of the run.
func Example() {
	dir, _ := os.MkdirTemp("", "iii-session-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(5 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	ctx := context.Background()
	e, _ := engine.New(nc)
	defer e.Close(ctx)

	p, _ := scripted.New()
	model := scripted.NewWorker(p)
	_ = model.Start(ctx, e)
	defer model.Close(ctx)
	sessions := sessiontree.NewWorker() // the transcript
	_ = sessions.Start(ctx, e)
	defer sessions.Close(ctx)
	orch := orchestrator.New()
	_ = orch.Start(ctx, e)
	defer orch.Close(ctx)

	sub, _ := nc.SubscribeSync("iii.events.demo")
	_ = e.Trigger(ctx, "run::start", agent.RunStart{
		SessionID: "demo", Provider: "scripted", Model: "echo",
		Messages: []agent.Message{agent.UserText("hello", time.Now().UnixMilli())},
	}, nil)
	for {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			fmt.Println(err)
			return
		}
		var ev agent.Event
		_ = json.Unmarshal(m.Data, &ev)
		switch ev.Type {
		case agent.EventTurnStateChanged:
			fmt.Println(ev.Type, ev.State)
		case agent.EventAgentEnd:
			fmt.Println(ev.Type, ev.StopReason)
			return
		}
	}
	// Output:
	// turn_state_changed provisioning
	// turn_state_changed assistant_streaming
	// turn_state_changed steering_check
	// turn_state_changed stopped
	// agent_end end
}
