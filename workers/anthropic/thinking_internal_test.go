package anthropic

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

// TestThinkingHistory checks when a request with a thinking level keeps
// thinking on and which thinking blocks go back.
func TestThinkingHistory(t *testing.T) {
	t.Parallel()
	call := agent.Content{Type: agent.ContentFunctionCall, ID: "toolu_1", FunctionID: "weather::get", Arguments: map[string]any{"location": "Paris"}}
	signed := agent.Content{Type: agent.ContentThinking, Text: "thinking", Signature: "sig"}
	unsigned := agent.Content{Type: agent.ContentThinking, Text: "thinking"}
	redacted := agent.Content{Type: agent.ContentThinking, Data: "ZW5jcnlwdGVk"}
	result := agent.Message{Role: agent.RoleFunctionResult, FunctionCallID: "toolu_1", FunctionID: "weather::get", Content: []agent.Content{agent.Text("18°C")}}
	loop := func(provider string, content ...agent.Content) []agent.Message {
		return []agent.Message{
			agent.UserText("Weather?", 1),
			{Role: agent.RoleAssistant, Content: content, Provider: provider, StopReason: agent.StopFunctionCall},
			result,
		}
	}
	tools := []agent.Tool{{FunctionID: "weather::get"}}
	for _, tc := range []struct {
		name     string
		msgs     []agent.Message
		thinking bool
		// turn is the block types of the assistant turn.
		turn []string
	}{
		{name: "signed loop", msgs: loop("anthropic", signed, call), thinking: true, turn: []string{"thinking", "tool_use"}},
		{name: "redacted loop", msgs: loop("anthropic", redacted, signed, call), thinking: true, turn: []string{"redacted_thinking", "thinking", "tool_use"}},
		{name: "no provider named", msgs: loop("", signed, call), thinking: true, turn: []string{"thinking", "tool_use"}},
		{name: "unsigned loop", msgs: loop("anthropic", unsigned, call), turn: []string{"tool_use"}},
		{name: "loop without thinking", msgs: loop("anthropic", agent.Text("Checking."), call), turn: []string{"text", "tool_use"}},
		{name: "another provider's signature", msgs: loop("openai", signed, call), turn: []string{"tool_use"}},
		{name: "signed thinking not first", msgs: loop("anthropic", agent.Text("Checking."), signed, call), turn: []string{"text", "thinking", "tool_use"}},
		{name: "merged turn starts with text", msgs: []agent.Message{
			agent.UserText("Weather?", 1),
			{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("Let me see.")}, Provider: "anthropic"},
			{Role: agent.RoleAssistant, Content: []agent.Content{signed, call}, Provider: "anthropic"},
			result,
		}, turn: []string{"text", "thinking", "tool_use"}},
		{name: "trailing thinking dropped", msgs: []agent.Message{
			agent.UserText("Weather?", 1),
			{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("Hm."), signed}, Provider: "anthropic", StopReason: agent.StopError},
			agent.UserText("Go on.", 2),
		}, thinking: true, turn: []string{"text"}},
		{name: "not a loop", msgs: []agent.Message{
			agent.UserText("Weather?", 1),
			{Role: agent.RoleAssistant, Content: []agent.Content{unsigned, agent.Text("Rain.")}, Provider: "anthropic"},
			agent.UserText("Thanks", 2),
		}, thinking: true, turn: []string{"text"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := buildParams(agent.ProviderRequest{Model: "claude-sonnet-4-5", Messages: tc.msgs, Tools: tools, ThinkingLevel: ThinkingLow})
			if err != nil {
				t.Fatal(err)
			}
			raw, err := m.params.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if err := checkRequest(raw); err != nil {
				t.Fatalf("%v\nrequest: %s", err, raw)
			}
			var body struct {
				Thinking *struct {
					Type string `json:"type"`
				} `json:"thinking"`
				Messages []struct {
					Content []map[string]any `json:"content"`
				} `json:"messages"`
			}
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatal(err)
			}
			if on := body.Thinking != nil && body.Thinking.Type == "enabled"; on != tc.thinking || m.thinkingDropped == tc.thinking {
				t.Errorf("thinking %+v (dropped %v), want on=%v", body.Thinking, m.thinkingDropped, tc.thinking)
			}
			var turn []string
			for _, b := range body.Messages[1].Content {
				turn = append(turn, b["type"].(string))
				switch b["type"] {
				case "thinking":
					if b["signature"] != "sig" || b["thinking"] != "thinking" {
						t.Errorf("thinking block %v", b)
					}
				case "redacted_thinking":
					if b["data"] != redacted.Data {
						t.Errorf("redacted_thinking block %v", b)
					}
				}
			}
			if !reflect.DeepEqual(turn, tc.turn) {
				t.Errorf("assistant turn %v, want %v", turn, tc.turn)
			}
		})
	}
}

// TestTranslatorThinking checks what a stream's thinking blocks become:
// the signature of a finished block, none for an unfinished one, and
// redacted thinking as a thinking block with Data.
func TestTranslatorThinking(t *testing.T) {
	t.Parallel()
	const (
		thinkStart = `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`
		think      = `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}`
		sig1       = `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"Eq"}}`
		sig2       = `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"QB"}}`
		stop0      = `{"type":"content_block_stop","index":0}`
		msgStop    = `{"type":"message_stop"}`
	)
	for _, tc := range []struct {
		name, body string
		types      string
		// content is the final message's (done), or the partial one's.
		content []agent.Content
	}{
		{
			name:    "signed",
			body:    sseEvents(thinkStart, think, sig1, sig2, stop0, msgStop),
			types:   "start thinking_start thinking_delta thinking_end done",
			content: []agent.Content{{Type: agent.ContentThinking, Text: "hm", Signature: "EqQB"}},
		},
		{
			name:    "unsigned",
			body:    sseEvents(thinkStart, think, stop0, msgStop),
			types:   "start thinking_start thinking_delta thinking_end done",
			content: []agent.Content{{Type: agent.ContentThinking, Text: "hm"}},
		},
		{
			name:    "cut before the block ended",
			body:    sseEvents(thinkStart, think, sig1, sig2),
			types:   "start thinking_start thinking_delta",
			content: []agent.Content{{Type: agent.ContentThinking, Text: "hm"}},
		},
		{
			name: "redacted",
			body: sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwK"}}`,
				think, sig1, stop0, msgStop),
			types:   "start thinking_start thinking_end done",
			content: []agent.Content{{Type: agent.ContentThinking, Data: "EmwK"}},
		},
		{
			name:    "redacted, cut",
			body:    sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwK"}}`),
			types:   "start thinking_start",
			content: []agent.Content{{Type: agent.ContentThinking, Data: "EmwK"}},
		},
		{
			name: "redacted without data is skipped",
			body: sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking"}}`, stop0,
				`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"ok"}}`, `{"type":"content_block_stop","index":1}`, msgStop),
			types:   "start text_start text_delta text_end done",
			content: []agent.Content{agent.Text("ok")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			evs, tr, err := events(t, tc.body, agent.ToolNames{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ev := range evs {
				got = append(got, string(ev.Type))
				if ev.Type == agent.ModelThinkingEnd && !reflect.DeepEqual(*ev.Content, tc.content[0]) {
					t.Errorf("thinking_end content %+v, want %+v", *ev.Content, tc.content[0])
				}
			}
			if want := tc.types; fmt.Sprint(got) != "["+want+"]" {
				t.Errorf("events %v, want %s", got, want)
			}
			msg := tr.final
			if !tr.done {
				msg = tr.partial("cut")
			}
			if err := msg.Validate(); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(msg.Content, tc.content) {
				t.Errorf("message content %+v, want %+v", msg.Content, tc.content)
			}
		})
	}
}
