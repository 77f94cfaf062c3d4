package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/openai"
)

// transcript exercises every mapping rule: system prompt, images, thinking
// left out, parallel calls, an error result with an image, a call without
// a result, a result without a call, an assistant message with nothing to
// send back, and tool names that need sanitizing.
func transcript() agent.ProviderRequest {
	return agent.ProviderRequest{
		SystemPrompt: "You are terse.",
		Model:        "gpt-4o",
		MaxTokens:    1024,
		Tools: []agent.Tool{
			weatherTools[0],
			weatherTools[1],
			{FunctionID: "fs::read/v2", Description: "Read a file."},
			{FunctionID: "x::y"},
			{FunctionID: "x__y"},
		},
		Messages: []agent.Message{
			{Role: agent.RoleUser, Timestamp: 1, Content: []agent.Content{
				agent.Text("Weather in Paris, and 1+2? See the picture."),
				{Type: agent.ContentImage, Mime: "image/png", Data: "iVBORw0KGgo="},
			}},
			{Role: agent.RoleAssistant, Timestamp: 2, StopReason: agent.StopFunctionCall, Content: []agent.Content{
				{Type: agent.ContentThinking, Text: "two tools"},
				agent.Text("Checking."),
				{Type: agent.ContentFunctionCall, ID: "call_1", FunctionID: "weather::get", Arguments: map[string]any{"city": "Paris"}},
				{Type: agent.ContentFunctionCall, ID: "call_2", FunctionID: "math::add", Arguments: map[string]any{"a": 1, "b": 2}},
				{Type: agent.ContentFunctionCall, ID: "call_3", FunctionID: "fs::read/v2"},
			}},
			agent.TextResult("18°C, sunny").Message("call_1", "weather::get", 3),
			{Role: agent.RoleFunctionResult, FunctionCallID: "call_2", FunctionID: "math::add", IsError: true, Timestamp: 4, Content: []agent.Content{
				agent.Text("overflow"), {Type: agent.ContentImage, Mime: "image/jpeg", Data: "/9j/4AAQ"},
			}},
			agent.UserText("and now?", 5),
			agent.TextResult("late result").Message("call_9", "x::y", 6),
			{Role: agent.RoleAssistant, Timestamp: 7, StopReason: agent.StopEnd, Content: []agent.Content{{Type: agent.ContentThinking, Text: "nothing to say"}}},
			agent.UserText("go on", 8),
		},
	}
}

// TestRequestMapping checks the body and headers the server receives.
func TestRequestMapping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		opts   []openai.Option
		modify func(*agent.ProviderRequest)
	}{
		{name: "request.json", opts: []openai.Option{openai.WithHeader("OpenAI-Organization", "org-test-123")}},
		{name: "request_reasoning.json", modify: func(r *agent.ProviderRequest) {
			r.Model, r.ThinkingLevel, r.Tools = "o3-mini", "high", nil
			r.Messages = r.Messages[:1]
		}},
		{name: "request_compat.json", opts: []openai.Option{openai.WithMaxTokensField(openai.MaxTokens), openai.WithReasoningEffort(openai.ReasoningAlways)},
			modify: func(r *agent.ProviderRequest) {
				r.Model, r.ThinkingLevel, r.Tools, r.SystemPrompt = "qwen3:8b", "low", nil, ""
				r.Messages = r.Messages[len(r.Messages)-1:]
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := setup(t, sse(t, "text.sse"), config{opts: tc.opts})
			req := transcript()
			if tc.modify != nil {
				tc.modify(&req)
			}
			res := ev.stream(t, req)
			if res.err != nil || !isEnd(res.end) {
				t.Fatalf("call err %v, stream end %v", res.err, res.end)
			}
			r := ev.api.requests()[0]
			var body any
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatalf("body %s: %v", r.Body, err)
			}
			golden(t, tc.name, body)
			if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Authorization") != "Bearer "+testKey {
				t.Errorf("headers %v", r.Header)
			}
			if tc.name == "request.json" && r.Header.Get("OpenAI-Organization") != "org-test-123" {
				t.Errorf("configured header missing: %v", r.Header)
			}
		})
	}
}

// TestToolNamesMapBack checks that a call of a sanitized tool name comes
// back as its function id.
func TestToolNamesMapBack(t *testing.T) {
	t.Parallel()
	body := "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"function\":{\"name\":\"fs__read_v2\",\"arguments\":\"{}\"}}," +
		"{\"index\":1,\"id\":\"call_b\",\"function\":{\"name\":\"x__y_2\",\"arguments\":\"\"}},{\"index\":2,\"function\":{\"name\":\"made up!\",\"arguments\":\"null\"}}]},\"finish_reason\":null}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n"
	ev := setup(t, func(w http.ResponseWriter, r *http.Request, _ int) { serveSSE(w, []byte(body), -1) }, config{})
	res := ev.stream(t, transcript())
	if res.err != nil || !isEnd(res.end) {
		t.Fatalf("call err %v, stream end %v", res.err, res.end)
	}
	calls := last(res.events).Message.FunctionCalls()
	if len(calls) != 3 || calls[0].FunctionID != "fs::read/v2" || calls[1].FunctionID != "x__y" || calls[2].FunctionID != "made_up_" {
		t.Fatalf("calls %+v", calls)
	}
	if calls[2].ID == "" || calls[2].ID == calls[0].ID || len(calls[2].Arguments) != 0 {
		t.Fatalf("generated call %+v", calls[2])
	}
}

// TestInvalidPayload checks that bad requests are refused before anything
// is sent or written.
func TestInvalidPayload(t *testing.T) {
	t.Parallel()
	ev := setup(t, sse(t, "text.sse"), config{})
	good := userReq("hi")
	cases := map[string]func(r *agent.ProviderRequest){
		"no model":         func(r *agent.ProviderRequest) { r.Model = "" },
		"no messages":      func(r *agent.ProviderRequest) { r.Messages = nil },
		"bad message":      func(r *agent.ProviderRequest) { r.Messages = []agent.Message{{Role: "robot"}} },
		"negative max":     func(r *agent.ProviderRequest) { r.MaxTokens = -1 },
		"bad thinking":     func(r *agent.ProviderRequest) { r.ThinkingLevel = "extreme" },
		"bad tool":         func(r *agent.ProviderRequest) { r.Tools = []agent.Tool{{FunctionID: "has space"}} },
		"bad channel":      func(r *agent.ProviderRequest) { r.Channel = "a.b" },
		"bad session id":   func(r *agent.ProviderRequest) { r.SessionID = "s1.>" },
		"session id space": func(r *agent.ProviderRequest) { r.SessionID = "a b" },
		"thinking in user": func(r *agent.ProviderRequest) { r.Messages[0].Content = []agent.Content{{Type: agent.ContentThinking}} },
		"result without id": func(r *agent.ProviderRequest) {
			r.Messages = []agent.Message{{Role: agent.RoleFunctionResult, FunctionID: "a::b"}}
		},
	}
	for name, modify := range cases {
		req := good
		req.Messages = append([]agent.Message(nil), good.Messages...)
		req.Channel = "ch1"
		modify(&req)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := engine.Call[openai.StreamResponse](ctx, ev.e, ev.p.StreamFunction(), req)
		cancel()
		if !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%s: stream error %v, want invalid_payload", name, err)
		}
		if name == "bad channel" {
			continue
		}
		ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
		_, err = engine.Call[openai.CompleteResponse](ctx, ev.e, ev.p.CompleteFunction(), req)
		cancel()
		if !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%s: complete error %v, want invalid_payload", name, err)
		}
	}
	if n := len(ev.api.requests()); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
	// A session homed in a region is a valid session id.
	good.SessionID = "eu-west.s_1"
	if res := ev.stream(t, good); res.err != nil || res.resp.StopReason != agent.StopEnd {
		t.Fatalf("regional session id: reply %+v, err %v", res.resp, res.err)
	}
}
