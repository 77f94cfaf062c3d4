package anthropic_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/workers/anthropic"
)

// loopSignature is the signature thinking_tools.sse streams, in two
// signature_deltas.
const loopSignature = "ErUBCkYIBhgCIkB0SkJvZ3ZsN3pWcm9Ub2dJT1NrUXR4V2pTaEJvRkx1bmR0Q2c9PQ=="

// loopThinking is the thinking text thinking_tools.sse streams.
const loopThinking = "The user wants the weather in Paris. I should call weather__get."

// requestBody is the part of a Messages API request the thinking tests
// read.
type requestBody struct {
	Thinking *struct {
		Type         string `json:"type"`
		BudgetTokens int64  `json:"budget_tokens"`
	} `json:"thinking"`
	Messages []struct {
		Role    string           `json:"role"`
		Content []map[string]any `json:"content"`
	} `json:"messages"`
}

func decodeBody(t *testing.T, raw []byte) requestBody {
	t.Helper()
	var b requestBody
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("request body: %v: %s", err, raw)
	}
	return b
}

// TestThinkingToolLoop runs a two-step tool loop with thinking on: the
// first answer's signed thinking block comes back first in the assistant
// turn of the second request, which keeps thinking on.
func TestThinkingToolLoop(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, ok(sse(t, "thinking_tools")), ok(sse(t, "text")))
	en := setup(t, api, config{})
	msgs := []agent.Message{agent.UserText("What's the weather in Paris?", 1)}
	req := anthropic.StreamRequest{Model: "claude-sonnet-4-5", Messages: msgs, Tools: weatherTools, ThinkingLevel: anthropic.ThinkingMedium}

	first := en.stream(t, req, nil)
	if first.err != nil || first.Reply.StopReason != agent.StopFunctionCall {
		t.Fatalf("first call: reply %+v, err %v", first.Reply, first.err)
	}
	var end *agent.Content
	for _, ev := range first.Events {
		if ev.Type == agent.ModelThinkingEnd {
			end = ev.Content
		}
	}
	want := agent.Content{Type: agent.ContentThinking, Text: loopThinking, Signature: loopSignature}
	if end == nil || !reflect.DeepEqual(*end, want) {
		t.Fatalf("thinking_end content %+v, want %+v", end, want)
	}
	done := last(first.Events).Message
	if done == nil || len(done.Content) != 3 || !reflect.DeepEqual(done.Content[0], want) {
		t.Fatalf("done message %+v", done)
	}
	call := done.FunctionCalls()[0]

	req.Messages = append(msgs, *done, agent.Message{
		Role: agent.RoleFunctionResult, FunctionCallID: call.ID, FunctionID: call.FunctionID,
		Content: []agent.Content{agent.Text("18°C, light rain")}, Timestamp: 3,
	})
	second := en.stream(t, req, nil)
	if second.err != nil || second.Reply.StopReason != agent.StopEnd {
		t.Fatalf("second call: reply %+v, err %v", second.Reply, second.err)
	}

	got := api.received()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	body := decodeBody(t, got[1].body)
	if body.Thinking == nil || body.Thinking.Type != "enabled" || body.Thinking.BudgetTokens != 4096 {
		t.Fatalf("second request: thinking %+v, want enabled with 4096", body.Thinking)
	}
	if len(body.Messages) != 3 || body.Messages[1].Role != "assistant" {
		t.Fatalf("second request: messages %+v", body.Messages)
	}
	turn := body.Messages[1].Content
	wantThinking := map[string]any{"type": "thinking", "thinking": loopThinking, "signature": loopSignature}
	if len(turn) != 3 || !reflect.DeepEqual(turn[0], wantThinking) || turn[1]["type"] != "text" || turn[2]["type"] != "tool_use" {
		t.Fatalf("assistant turn %v, want the signed thinking block, the text, the call", turn)
	}
	if r := body.Messages[2].Content[0]; r["type"] != "tool_result" || r["tool_use_id"] != call.ID {
		t.Fatalf("user turn starts with %v", r)
	}
	golden(t, "request_thinking_loop", normalJSON(t, got[1].body))
}
