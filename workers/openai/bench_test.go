package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/openai"
)

// benchTokens is the number of text deltas of the benchmark's stream.
const benchTokens = 2000

// benchBody is an OpenAI stream of n text deltas, in the recorded format.
func benchBody(n int) []byte {
	const head = `data: {"id":"chatcmpl-BaYbRiwvY2qVqT3Mm4Jv9sXzR2y1P","object":"chat.completion.chunk","created":1748011234,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_54eb4bd693","choices":[{"index":0,"delta":`
	var b bytes.Buffer
	b.WriteString(head + `{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"3kEhVw"}` + "\n\n")
	for i := range n {
		fmt.Fprintf(&b, head+`{"content":" tok%d"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x9Qm"}`+"\n\n", i)
	}
	b.WriteString(head + `{},"logprobs":null,"finish_reason":"stop"}],"usage":null,"obfuscation":"Lr"}` + "\n\n")
	b.WriteString(`data: {"id":"chatcmpl-BaYbRiwvY2qVqT3Mm4Jv9sXzR2y1P","object":"chat.completion.chunk","created":1748011234,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_54eb4bd693","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2000,"total_tokens":2020,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"obfuscation":"pX"}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// BenchmarkStreamOverhead reads the same stream of 2,000 text deltas,
// served event by event (a flush per event, as a vendor streams), in two
// ways: path=direct scans the SSE lines straight from the HTTP response
// (the floor: HTTP and SSE framing only); path=worker goes through the
// provider worker (SDK request, chunk decoding, model events) and a
// channel to a reader that decodes every frame, as the orchestrator does.
// ns/token of the two is the provider's overhead per token; path=channel
// shows how much of it is the channel alone, a frame per delta. The worker
// runs with the default coalescing and without (coalesce=0: a frame per
// delta of the server). cpu-ns/token is the CPU time of the whole process
// (the fake server, the NATS server, the worker and the reader) per token:
// ns/token measures how fast tokens get through, cpu-ns/token what they
// cost, and moves less with the load of the machine.
func BenchmarkStreamOverhead(b *testing.B) {
	body := benchBody(benchTokens)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveSSE(w, body, -1)
	}))
	b.Cleanup(srv.Close)

	b.Run(fmt.Sprintf("path=direct,tokens=%d", benchTokens), func(b *testing.B) {
		client := srv.Client()
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		for range b.N {
			resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
			if err != nil {
				b.Fatal(err)
			}
			sc := bufio.NewScanner(resp.Body)
			n := 0
			for sc.Scan() {
				if bytes.HasPrefix(sc.Bytes(), []byte("data: ")) {
					n++
				}
			}
			_ = resp.Body.Close()
			if sc.Err() != nil || n != benchTokens+4 {
				b.Fatalf("%d events, %v", n, sc.Err())
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchTokens), "ns/token")
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*benchTokens), "cpu-ns/token")
	})

	// path=channel is the harness's share of path=worker: the same number
	// of delta frames written straight into a channel and decoded by the
	// reader, with no HTTP and no provider.
	b.Run(fmt.Sprintf("path=channel,tokens=%d", benchTokens), func(b *testing.B) {
		ns := enginetest.RunServer(b)
		we, re := enginetest.NewEngine(b, ns), enginetest.NewEngine(b, ns)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		frame, err := wire.Msgpack.Marshal(agent.ModelEvent{Type: agent.ModelTextDelta, Delta: " tok1234"})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		for range b.N {
			r, err := channel.Open(ctx, re)
			if err != nil {
				b.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				w, err := channel.NewWriter(we, r.ID(), channel.WithCodec(wire.Msgpack))
				if err != nil {
					errc <- err
					return
				}
				for range benchTokens {
					if err := w.Write(ctx, frame); err != nil {
						errc <- err
						return
					}
				}
				errc <- w.Close(ctx)
			}()
			deltas := 0
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
				deltas++
			}
			_ = r.Close()
			if err := <-errc; err != nil || deltas != benchTokens {
				b.Fatalf("%d deltas, %v", deltas, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchTokens), "ns/token")
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*benchTokens), "cpu-ns/token")
	})

	for _, coalesce := range []int{openai.DefaultCoalesce, 0} {
		benchWorker(b, srv, coalesce)
	}
}

// benchWorker is path=worker of BenchmarkStreamOverhead with the given
// coalesce size. Besides ns/token it reports frames/op, the channel frames
// of one call: with coalescing, deltas the provider read while the
// previous frame went out share a frame.
func benchWorker(b *testing.B, srv *httptest.Server, coalesce int) {
	b.Run(fmt.Sprintf("path=worker,coalesce=%d,tokens=%d", coalesce, benchTokens), func(b *testing.B) {
		ns := enginetest.RunServer(b)
		p, err := openai.New(openai.WithBaseURL(srv.URL+"/v1"), openai.WithHTTPClient(srv.Client()), openai.WithRequireKey(false),
			openai.WithLookupEnv(func(string) (string, bool) { return "", false }), openai.WithCoalesce(coalesce))
		if err != nil {
			b.Fatal(err)
		}
		w := openai.NewWorker(p)
		if err := w.Start(context.Background(), enginetest.NewEngine(b, ns)); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = w.Close(context.Background()) })
		e := enginetest.NewEngine(b, ns)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		req := agent.ProviderRequest{Model: "gpt-4o-mini", Messages: []agent.Message{agent.UserText("count", 1)}}
		wantText := 0
		for i := range benchTokens {
			wantText += len(fmt.Sprintf(" tok%d", i))
		}
		frames := 0
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		for range b.N {
			r, err := channel.Open(ctx, e)
			if err != nil {
				b.Fatal(err)
			}
			req.Channel = r.ID()
			errc := make(chan error, 1)
			go func() { errc <- e.Trigger(ctx, p.StreamFunction(), req, nil) }()
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
			_ = r.Close()
			if err := <-errc; err != nil || text != wantText {
				b.Fatalf("%d bytes of text, want %d; %v", text, wantText, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchTokens), "ns/token")
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*benchTokens), "cpu-ns/token")
		b.ReportMetric(float64(frames)/float64(b.N), "frames/op")
	})
}
