package anthropic_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/workers/anthropic"
)

// bigStream is a Messages API stream of one text block of n deltas.
func bigStream(n int) string {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := range n {
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" tok%d\"}}\n\n", i%10)
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	fmt.Fprintf(&b, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%d}}\n\n", n)
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.String()
}

// BenchmarkStreamOverhead reads the same stream of 2,000 text deltas,
// served event by event (a flush per event, as the API streams), in two
// ways: path=direct scans the SSE lines straight from the HTTP response
// with a plain bufio scanner (the floor: HTTP and SSE framing only);
// path=worker goes through the provider worker (SDK request, event
// decoding, model events) and a channel to a reader that decodes every
// model event, as the orchestrator does. Both report ns/token; their ratio
// is the cost of the provider and the bus per token. With the default
// coalescing, deltas the provider has read while the previous frame went
// out share a frame (frames/op tells how many went); coalesce=0 sends a
// frame per delta of the API. cpu-ns/token is the CPU time of the whole
// process (the fake API, the NATS server, the worker and the reader) per
// token: ns/token measures how fast tokens get through, cpu-ns/token what
// they cost, and moves less with the load of the machine.
func BenchmarkStreamOverhead(b *testing.B) {
	const deltas = 2000
	body := bigStream(deltas)

	b.Run(fmt.Sprintf("deltas=%d,path=direct", deltas), func(b *testing.B) {
		api := newFakeAPI(b, response{status: 200, body: body, flush: true})
		client := api.srv.Client()
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		for range b.N {
			resp, err := client.Post(api.srv.URL+"/v1/messages", "application/json", strings.NewReader("{}"))
			if err != nil {
				b.Fatal(err)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
			tokens := 0
			for sc.Scan() {
				line := sc.Bytes()
				if bytes.HasPrefix(line, []byte("data: ")) && bytes.Contains(line, []byte(`"text_delta"`)) {
					tokens++
				}
			}
			_ = resp.Body.Close()
			if sc.Err() != nil || tokens != deltas {
				b.Fatalf("%d tokens, err %v", tokens, sc.Err())
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*deltas), "ns/token")
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*deltas), "cpu-ns/token")
	})

	for _, coalesce := range []int{anthropic.DefaultCoalesce, 0} {
		benchWorker(b, body, deltas, coalesce)
	}
}

// benchWorker is the worker path of BenchmarkStreamOverhead.
func benchWorker(b *testing.B, body string, deltas, coalesce int) {
	b.Run(fmt.Sprintf("deltas=%d,path=worker,coalesce=%d", deltas, coalesce), func(b *testing.B) {
		api := newFakeAPI(b, response{status: 200, body: body, flush: true})
		en := setup(b, api, config{opts: []anthropic.Option{anthropic.WithCoalesce(coalesce)}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		req := anthropic.StreamRequest{Model: "claude-sonnet-4-5", Messages: []agent.Message{agent.UserText("go", 1)}}
		wantText := deltas * len(" tok0")
		frames := 0
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		for range b.N {
			r, err := channel.Open(ctx, en.e)
			if err != nil {
				b.Fatal(err)
			}
			req.Channel = r.ID()
			errc := make(chan error, 1)
			go func() { errc <- en.e.Trigger(ctx, anthropic.StreamFunction, req, nil) }()
			text := 0
			for {
				f, err := r.Next(ctx)
				if errors.Is(err, channel.ErrEnd) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				var ev agent.ModelEvent
				if err := f.Decode(&ev); err != nil {
					b.Fatal(err)
				}
				if ev.Type == agent.ModelTextDelta {
					text += len(ev.Delta)
				}
				frames++
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			_ = r.Close()
			if text != wantText {
				b.Fatalf("%d bytes of text, want %d", text, wantText)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*deltas), "ns/token")
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*deltas), "cpu-ns/token")
		b.ReportMetric(float64(frames)/float64(b.N), "frames/op")
	})
}
