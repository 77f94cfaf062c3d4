package openai_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

// weatherTools are the tools of the recorded tool-call streams: the model
// calls them as weather__get, math__add and fs__write.
var weatherTools = []agent.Tool{
	{FunctionID: "weather::get", Description: "Current weather of a city.", InputSchema: map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"},
	}},
	{FunctionID: "math::add", Description: "Add two numbers."},
	{FunctionID: "fs::write", Description: "Write a file."},
}

// TestStreamGolden replays recorded streams in the formats of OpenAI,
// DeepSeek, ollama and kimi and compares the normalized events and the
// function's reply with the golden files.
func TestStreamGolden(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"text", "parallel_tools", "thinking_deepseek", "thinking_ollama", "kimi", "length_cut_call", "midstream_error",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev := setup(t, sse(t, name+".sse"), config{})
			req := userReq("hi")
			req.Tools = weatherTools
			res := ev.stream(t, req)
			if res.err != nil || !isEnd(res.end) {
				t.Fatalf("call err %v, stream end %v", res.err, res.end)
			}
			if n := len(ev.api.requests()); n != 1 {
				t.Fatalf("%d requests, want 1", n)
			}
			golden(t, name+".json", map[string]any{"events": res.events, "reply": res.resp})
			// The final message is what the deltas built.
			final := last(res.events).Message
			if final == nil {
				t.Fatalf("last event %+v has no message", last(res.events))
			}
			for _, c := range final.Content {
				if c.Type == agent.ContentText && !strings.Contains(joinDeltas(res.events, agent.ModelTextDelta), c.Text) {
					t.Errorf("text block %q is not what the deltas said", c.Text)
				}
			}
		})
	}
}

func joinDeltas(evs []agent.ModelEvent, typ agent.ModelEventType) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == typ {
			b.WriteString(e.Delta)
		}
	}
	return b.String()
}

// TestStreamText checks the plain text stream field by field (the golden
// file holds the same).
func TestStreamText(t *testing.T) {
	t.Parallel()
	ev := setup(t, sse(t, "text.sse"), config{})
	res := ev.stream(t, userReq("hi"))
	if res.err != nil || !isEnd(res.end) {
		t.Fatalf("call err %v, stream end %v", res.err, res.end)
	}
	want := []agent.ModelEventType{agent.ModelStart, agent.ModelTextStart}
	for range 9 {
		want = append(want, agent.ModelTextDelta)
	}
	want = append(want, agent.ModelTextEnd, agent.ModelUsage, agent.ModelStop, agent.ModelDone)
	if got := types(res.events); !slices.Equal(got, want) {
		t.Fatalf("event types %v, want %v", got, want)
	}
	msg := last(res.events).Message
	usage := agent.Usage{InputTokens: 86, OutputTokens: 10, CacheReadTokens: 1920}
	if msg.StopReason != agent.StopEnd || len(msg.Content) != 1 || msg.Content[0].Text != "Hello! How can I help you today?" ||
		*msg.Usage != usage || msg.Provider != "openai" || msg.Model != "gpt-4o-mini" || msg.Timestamp != epoch.UnixMilli() {
		t.Fatalf("done message %+v (usage %+v)", msg, msg.Usage)
	}
	if res.resp.StopReason != agent.StopEnd || res.resp.Kind != "" {
		t.Fatalf("reply %+v", res.resp)
	}
	if start := res.events[0].Message; start == nil || start.Provider != "openai" || start.Model != "gpt-4o-mini" {
		t.Fatalf("start %+v", res.events[0])
	}
	r := ev.api.requests()[0]
	if r.Method != http.MethodPost || r.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+testKey {
		t.Fatalf("request %s %s auth %q", r.Method, r.Path, r.Header.Get("Authorization"))
	}
}
