package anthropic

import (
	"fmt"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

// BenchmarkTranslate measures the SDK's SSE decoding of 2,000 text deltas
// plus their translation into model events, without HTTP or NATS.
func BenchmarkTranslate(b *testing.B) {
	const deltas = 2000
	var sb strings.Builder
	sb.WriteString(sseEvents(`{"type":"message_start","message":{"model":"m","usage":{"input_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	for i := range deltas {
		sb.WriteString(sseEvents(fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" tok%d"}}`, i%10)))
	}
	sb.WriteString(sseEvents(`{"type":"content_block_stop","index":0}`, `{"type":"message_stop"}`))
	body := sb.String()
	emit := func(*agent.ModelEvent) error { return nil }
	b.ReportAllocs()
	for range b.N {
		evs, err := readAll(body)
		if err != nil {
			b.Fatal(err)
		}
		tr := newTranslator(agent.ToolNames{}, "m", 1)
		for i := range evs {
			if err := tr.event(&evs[i], emit); err != nil {
				b.Fatal(err)
			}
		}
		if !tr.done {
			b.Fatal("not done")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*deltas), "ns/token")
}
