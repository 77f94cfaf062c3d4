package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// Example starts a run, shows what a second start of the same session
// answers while the turn is in flight (busy, or a no-op when it retries
// the first with its idempotency key), waits for the run's end and reads
// the turn record.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	e := x.Engine
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	p, err := scripted.New()
	if err != nil {
		panic(err)
	}
	model := scripted.NewWorker(p) // the offline model
	if err := model.Start(ctx, e); err != nil {
		panic(err)
	}
	defer model.Close(ctx)
	sessions := sessiontree.NewWorker() // the transcript
	if err := sessions.Start(ctx, e); err != nil {
		panic(err)
	}
	defer sessions.Close(ctx)
	orch := orchestrator.New()
	if err := orch.Start(ctx, e); err != nil {
		panic(err)
	}
	defer orch.Close(ctx)

	sub, err := x.Conn.SubscribeSync("iii.events.demo")
	if err != nil {
		panic(err)
	}
	start := func(text, key string) orchestrator.RunStartResult {
		var res orchestrator.RunStartResult
		if err := e.Trigger(ctx, "run::start", agent.RunStart{
			SessionID: "demo", Provider: "scripted", Model: scripted.EchoModel, IdempotencyKey: key,
			Messages: []agent.Message{agent.UserText(text, time.Now().UnixMilli())},
		}, &res); err != nil {
			panic(err)
		}
		return res
	}
	first := start("/sleep 300\nhello", "k1") // the model waits 300 ms before answering
	fmt.Println("first start:", first.Started)
	retry := start("/sleep 300\nhello", "k1") // a retry of the same start
	fmt.Println("retried start:", retry.Started, "same run:", retry.RunID == first.RunID)
	other := start("another", "k2") // a second run while the first is in flight
	fmt.Println("another start:", other.Started, other.Reason)

	for {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			panic(err)
		}
		var ev agent.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			panic(err)
		}
		if ev.Type == agent.EventAgentEnd {
			fmt.Println("agent_end", ev.StopReason)
			break
		}
	}
	var view agent.TurnView
	if err := e.Trigger(ctx, "turn::get_state", orchestrator.SessionRequest{SessionID: "demo"}, &view); err != nil {
		panic(err)
	}
	fmt.Println("turn::get_state:", view.State)
	// Output:
	// first start: true
	// retried start: true same run: true
	// another start: false session_busy
	// agent_end end
	// turn::get_state: stopped
}
