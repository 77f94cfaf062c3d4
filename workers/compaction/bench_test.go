package compaction

import (
	"fmt"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

// benchTranscript is an agent session of n messages: user prompts, calls
// with arguments, results of a few KiB, answers.
func benchTranscript(n int) []agent.Message {
	msgs := make([]agent.Message, 0, n)
	for i := 0; len(msgs) < n; i++ {
		id := fmt.Sprint("call_", i)
		switch i % 4 {
		case 0:
			msgs = append(msgs, agent.UserText(strings.Repeat("please look at the parser ", 20), 0))
		case 1:
			msgs = append(msgs, agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("reading"),
				{Type: agent.ContentFunctionCall, ID: id, FunctionID: "fs::read", Arguments: map[string]any{"path": "/src/parser.go", "limit": 400}}}})
		case 2:
			msgs = append(msgs, agent.Message{Role: agent.RoleFunctionResult, FunctionCallID: fmt.Sprint("call_", i-1), FunctionID: "fs::read",
				Content: []agent.Content{agent.Text(strings.Repeat("func parse() {}\n", 200))}})
		default:
			msgs = append(msgs, agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(strings.Repeat("the parser ", 40))}})
		}
	}
	return msgs
}

func BenchmarkEstimateTokens(b *testing.B) {
	for _, n := range []int{100, 1000} {
		msgs := benchTranscript(n)
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = EstimateTokens(msgs)
			}
		})
	}
}

func BenchmarkChooseCut(b *testing.B) {
	for _, n := range []int{100, 1000} {
		msgs := benchTranscript(n)
		tok := tokensOf(msgs)
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = chooseCut(msgs, tok, 40000, true)
			}
		})
	}
}

func BenchmarkRender(b *testing.B) {
	msgs := benchTranscript(100)
	b.Run("messages=100,prune=2048", func(b *testing.B) {
		b.ReportAllocs()
		bytes := 0
		for b.Loop() {
			for _, r := range renderMessages(msgs, DefaultPruneBytes) {
				bytes += len(r)
			}
		}
		b.SetBytes(int64(bytes / b.N))
	})
}
