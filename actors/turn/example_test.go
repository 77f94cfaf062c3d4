package turn_test

import (
	"fmt"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
)

// A plain turn: the user asks, the model answers without calling a
// function, nothing is queued, the run stops. The loop is the grain's: ask
// Next what to do, do it, Apply the outcome, (write the record), deliver
// the outbox.
func Example() {
	now := int64(1_700_000_000_000)
	rec, _, err := turn.New(agent.RunStart{
		SessionID: "s1", Provider: "scripted", Model: "echo-1",
		Messages: []agent.Message{agent.UserText("hello", now)},
	}, "run1", now)
	if err != nil {
		fmt.Println(err)
		return
	}
	for {
		act := turn.Next(rec)
		var in turn.Input
		switch act.Kind {
		case turn.ActionDeliver:
			for _, e := range rec.Outbox {
				switch e.Kind {
				case turn.EffectEmit:
					ev := e.Event
					switch {
					case ev.State != "":
						fmt.Println("event", ev.Type, ev.State)
					case ev.StopReason != "":
						fmt.Println("event", ev.Type, ev.StopReason)
					default:
						fmt.Println("event", ev.Type)
					}
				case turn.EffectAppendHistory:
					fmt.Println("append", len(e.Messages), "message(s) to the transcript")
				case turn.EffectFinish:
					fmt.Println("finish", e.Finish.StopReason)
				}
			}
			rec = turn.Delivered(rec)
			continue
		case turn.ActionProvision:
			in = turn.Provisioned{}
		case turn.ActionStreamModel:
			in = turn.ModelDone{Message: agent.Message{
				Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("hi!")}, StopReason: agent.StopEnd,
			}}
		case turn.ActionCheckSteering:
			in = turn.SteeringDrained{} // both inboxes empty
		case turn.ActionNone:
			fmt.Println("done:", rec.State, rec.StopReason, "after", rec.TurnCount, "model call(s), step", rec.Step)
			return
		}
		now += 5
		next, _, err := turn.Apply(rec, in, now)
		if err != nil {
			fmt.Println(err)
			return
		}
		// The grain CAS-writes next here, before acting on it.
		rec = next
	}
	// Output:
	// event turn_state_changed provisioning
	// append 1 message(s) to the transcript
	// event message_complete
	// event turn_state_changed assistant_streaming
	// append 1 message(s) to the transcript
	// event message_complete
	// event turn_end
	// event turn_state_changed steering_check
	// event turn_state_changed stopped
	// event agent_end end
	// finish end
	// done: stopped end after 1 model call(s), step 4
}
