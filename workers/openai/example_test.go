package openai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/openai"
)

// exampleStream is what a local OpenAI-compatible server (ollama) streams
// for a question that needs a tool.
const exampleStream = `data: {"id":"chatcmpl-7","object":"chat.completion.chunk","created":1754500000,"model":"llama3.2","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"Let me add."},"finish_reason":null}]}

data: {"id":"chatcmpl-7","object":"chat.completion.chunk","created":1754500000,"model":"llama3.2","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"id":"call_u1","index":0,"type":"function","function":{"name":"math__add","arguments":"{\"a\":1,\"b\":2}"}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-7","object":"chat.completion.chunk","created":1754500000,"model":"llama3.2","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"tool_calls"}]}

data: {"id":"chatcmpl-7","object":"chat.completion.chunk","created":1754500000,"model":"llama3.2","system_fingerprint":"fp_ollama","choices":[],"usage":{"prompt_tokens":61,"completion_tokens":24,"total_tokens":85}}

data: [DONE]

`

// Example serves a local OpenAI-compatible server as provider "ollama" and
// streams an answer through a channel, as the orchestrator reads it.
func Example() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, exampleStream)
	}))
	defer api.Close()

	x := enginetest.StartExample()
	defer x.Close()
	e := x.Engine
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The provider worker: no auth worker runs and the server needs no key.
	p, err := openai.New(
		openai.WithName("ollama"),
		openai.WithBaseURL(api.URL+"/v1"),
		openai.WithRequireKey(false),
		openai.WithLookupEnv(func(string) (string, bool) { return "", false }),
	)
	if err != nil {
		panic(err)
	}
	w := openai.NewWorker(p)
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
		req := agent.ProviderRequest{
			Channel:  r.ID(),
			Model:    "llama3.2",
			Messages: []agent.Message{agent.UserText("What is 1+2?", 0)},
			Tools:    []agent.Tool{{FunctionID: "math::add", Description: "Add two numbers."}},
		}
		_ = e.Trigger(ctx, "provider::ollama::stream", req, nil)
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
			fmt.Println(ev.Type, ev.Message.Provider, len(ev.Message.Content), "blocks")
		default:
			fmt.Println(ev.Type, ev.Index)
		}
	}
	// Output:
	// start 0
	// text_start 0
	// text_delta 0 "Let me add."
	// text_end 0
	// functioncall_start 1 call_u1 math::add
	// functioncall_delta 1 "{\"a\":1,\"b\":2}"
	// functioncall_end 1
	// usage 61 24
	// stop function_call
	// done ollama 2 blocks
	// end
}
