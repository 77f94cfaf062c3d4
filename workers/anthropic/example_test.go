package anthropic_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/anthropic"
)

// exampleStream is the Messages API's documented answer to "Hello".
const exampleStream = `event: message_start
data: {"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-opus-4-20250514", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}

event: content_block_start
data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 0}

event: message_delta
data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence":null}, "usage": {"output_tokens": 15}}

event: message_stop
data: {"type": "message_stop"}

`

// Example streams Claude's answer through a channel, as the orchestrator
// reads it. A local server stands in for api.anthropic.com, and the key
// comes from the environment because no auth worker runs.
func Example() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, exampleStream)
	}))
	defer api.Close()

	x := enginetest.StartExample()
	defer x.Close()
	e := x.Engine
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The provider worker.
	p, err := anthropic.New(
		anthropic.WithBaseURL(api.URL),
		anthropic.WithEnvLookup(func(string) (string, bool) { return "sk-ant-example", true }),
		anthropic.WithCoalesce(0), // one event per delta, for a stable output
		anthropic.WithClock(func() time.Time { return time.UnixMilli(0) }),
	)
	if err != nil {
		panic(err)
	}
	w := anthropic.NewWorker(p)
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
		req := anthropic.StreamRequest{
			Channel:  r.ID(),
			Model:    "claude-opus-4-0",
			Messages: []agent.Message{agent.UserText("Hello", 0)},
		}
		_ = e.Trigger(ctx, anthropic.StreamFunction, req, nil)
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
		case agent.ModelTextDelta:
			fmt.Printf("%s %d %q\n", ev.Type, ev.Index, ev.Delta)
		case agent.ModelUsage:
			fmt.Println(ev.Type, ev.Usage.InputTokens, ev.Usage.OutputTokens)
		case agent.ModelStop:
			fmt.Println(ev.Type, ev.StopReason)
		case agent.ModelDone:
			fmt.Println(ev.Type, ev.Message.Model, ev.Message.Content[0].Text)
		default:
			fmt.Println(ev.Type, ev.Index)
		}
	}
	// Output:
	// start 0
	// usage 25 1
	// text_start 0
	// text_delta 0 "Hello"
	// text_delta 0 "!"
	// text_end 0
	// usage 25 15
	// stop end
	// done claude-opus-4-20250514 Hello!
	// end
}
