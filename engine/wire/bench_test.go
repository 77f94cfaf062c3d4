package wire_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

// A model request as a worker sends it: messages of content blocks, tool
// schemas and options, all plain structs (no decoder of their own), so
// every level is looked at by the check for arrays where a struct is
// wanted.
type (
	benchRequest struct {
		SessionID string         `json:"session_id"`
		Model     string         `json:"model"`
		System    string         `json:"system,omitempty"`
		Messages  []benchMessage `json:"messages"`
		Tools     []benchTool    `json:"tools,omitempty"`
		Options   map[string]any `json:"options,omitempty"`
		MaxTokens int            `json:"max_tokens,omitempty"`
	}
	benchMessage struct {
		Role      string         `json:"role"`
		Content   []benchContent `json:"content"`
		Timestamp int64          `json:"timestamp"`
		Usage     *benchUsage    `json:"usage,omitempty"`
	}
	benchContent struct {
		Type      string         `json:"type"`
		Text      string         `json:"text,omitempty"`
		ID        string         `json:"id,omitempty"`
		Arguments map[string]any `json:"arguments,omitempty"`
	}
	benchUsage struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	}
	benchTool struct {
		ID          string         `json:"id"`
		Description string         `json:"description"`
		Schema      map[string]any `json:"schema"`
	}
	// benchFrame is a model-stream frame: small and flat.
	benchFrame struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta string `json:"delta"`
	}
)

func benchPayload(messages int) benchRequest {
	req := benchRequest{
		SessionID: "01JABCDEFGHJKMNPQRSTVWXYZ0",
		Model:     "claude-sonnet",
		System:    strings.Repeat("You are a helpful agent. ", 20),
		Options:   map[string]any{"temperature": 0.2, "thinking": map[string]any{"budget": 2048}},
		MaxTokens: 4096,
	}
	for i := range 4 {
		req.Tools = append(req.Tools, benchTool{
			ID:          fmt.Sprintf("fs::read%d", i),
			Description: "Read a file from the workspace.",
			Schema: map[string]any{"type": "object", "properties": map[string]any{
				"path": map[string]any{"type": "string"},
			}, "required": []any{"path"}},
		})
	}
	for i := range messages {
		m := benchMessage{Role: "user", Timestamp: int64(1700000000000 + i)}
		m.Content = []benchContent{{Type: "text", Text: strings.Repeat("word ", 40)}}
		if i%2 == 1 {
			m.Role = "assistant"
			m.Usage = &benchUsage{InputTokens: 1200, OutputTokens: 80}
			m.Content = append(m.Content, benchContent{Type: "function_call", ID: "call_1", Arguments: map[string]any{"path": "README.md", "limit": 200}})
		}
		req.Messages = append(req.Messages, m)
	}
	return req
}

// BenchmarkMsgpackUnmarshal is the decode of every bus request and
// model-stream frame: the library's decode plus wire's checks.
func BenchmarkMsgpackUnmarshal(b *testing.B) {
	frame, err := wire.Msgpack.Marshal(benchFrame{Type: "text_delta", Index: 3, Delta: "Hello, wor"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("shape=frame", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(frame)))
		for b.Loop() {
			var f benchFrame
			if err := wire.Msgpack.Unmarshal(frame, &f); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, n := range []int{2, 20} {
		data, err := wire.Msgpack.Marshal(benchPayload(n))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("shape=request,messages=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var req benchRequest
				if err := wire.Msgpack.Unmarshal(data, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("shape=untyped,messages=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var req map[string]any
				if err := wire.Msgpack.Unmarshal(data, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
