package scripted_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/scripted"
)

// Example streams an answer of the echo model through a channel, as the
// orchestrator reads it.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	e := x.Engine
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The provider worker.
	p, err := scripted.New(scripted.WithClock(func() time.Time { return time.UnixMilli(0) }))
	if err != nil {
		panic(err)
	}
	w := scripted.NewWorker(p)
	if err := w.Start(ctx, e); err != nil {
		panic(err)
	}
	defer w.Close(ctx)

	// The orchestrator: open a channel, ask for a stream into it, read.
	r, err := channel.Open(ctx, e)
	if err != nil {
		panic(err)
	}
	defer r.Close()
	go func() {
		req := scripted.StreamRequest{
			Channel:  r.ID(),
			Model:    scripted.EchoModel,
			Messages: []agent.Message{agent.UserText("Hello, world!\n/call fs::read {\"path\":\"/etc/hosts\"}", 0)},
		}
		_ = e.Trigger(ctx, scripted.StreamFunction, req, nil)
	}()
	for {
		f, err := r.Next(ctx)
		if errors.Is(err, channel.ErrEnd) {
			fmt.Println("end")
			return
		}
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		var ev agent.ModelEvent
		if err := f.Decode(&ev); err != nil {
			panic(err)
		}
		switch ev.Type {
		case agent.ModelTextDelta, agent.ModelFunctionCallDelta:
			fmt.Printf("%s %d %q\n", ev.Type, ev.Index, ev.Delta)
		case agent.ModelFunctionCallStart:
			fmt.Println(ev.Type, ev.Index, ev.ID, ev.FunctionID)
		case agent.ModelUsage:
			fmt.Println(ev.Type, ev.Usage.InputTokens, ev.Usage.OutputTokens)
		case agent.ModelStop:
			fmt.Println(ev.Type, ev.StopReason)
		case agent.ModelDone:
			fmt.Println(ev.Type, len(ev.Message.Content), "blocks")
		default:
			fmt.Println(ev.Type, ev.Index)
		}
	}
	// Output:
	// start 0
	// text_start 0
	// text_delta 0 "Hello, w"
	// text_delta 0 "orld!"
	// text_end 0
	// functioncall_start 1 call_8d21a4054927_1 fs::read
	// functioncall_delta 1 "{\"path\":"
	// functioncall_delta 1 "\"/etc/ho"
	// functioncall_delta 1 "sts\"}"
	// functioncall_end 1
	// usage 13 11
	// stop function_call
	// done 2 blocks
	// end
}
