package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// turnPayload is a typical run::start-sized request: a few messages with
// text and a function call, about 1.5 KiB encoded.
type turnPayload struct {
	SessionID string         `json:"session_id"`
	MessageID string         `json:"message_id"`
	Provider  string         `json:"provider"`
	Model     string         `json:"model"`
	Mode      string         `json:"mode"`
	MaxTurns  int            `json:"max_turns"`
	Messages  []benchMessage `json:"messages"`
}

type benchMessage struct {
	Role      string         `json:"role"`
	Content   []benchContent `json:"content"`
	Timestamp int64          `json:"timestamp"`
}

type benchContent struct {
	Type      string         `json:"type"`
	Text      string         `json:"text,omitempty"`
	ID        string         `json:"id,omitempty"`
	Function  string         `json:"function_id,omitempty"`
	Arguments map[string]any `json:"arguments,omitempty"`
}

func typicalTurn() turnPayload {
	text := "Please look at the repository and tell me which tests are failing and why; then propose a fix."
	return turnPayload{
		SessionID: "sess_01HZX3J8K9", MessageID: "msg_01HZX3J8KA", Provider: "anthropic", Model: "claude-sonnet-4-5", Mode: "agent", MaxTurns: 20,
		Messages: []benchMessage{
			{Role: "user", Content: []benchContent{{Type: "text", Text: text}}, Timestamp: 1764500000000},
			{Role: "assistant", Content: []benchContent{{Type: "text", Text: text}, {Type: "function_call", ID: "call_1", Function: "shell::exec", Arguments: map[string]any{"command": "go test ./...", "timeout_ms": 60000}}}, Timestamp: 1764500001000},
			{Role: "function_result", Content: []benchContent{{Type: "text", Text: text + text + text}}, Timestamp: 1764500002000},
			{Role: "user", Content: []benchContent{{Type: "text", Text: text}}, Timestamp: 1764500003000},
		},
	}
}

// stepPayload is what moves on every hop of a turn: a step message or a
// coalesced token-delta event.
type stepPayload struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Seq       uint64 `json:"seq"`
	Step      uint64 `json:"step"`
	State     string `json:"state"`
	Delta     string `json:"delta,omitempty"`
	TS        int64  `json:"ts"`
}

func benchCodec[T any](b *testing.B, c wire.Codec, p T) {
	data, _ := c.Marshal(p)
	b.ReportMetric(float64(len(data)), "bytes")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, err := c.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		var back T
		if err := c.Unmarshal(out, &back); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkCodec is encode+decode of one payload: payload=step is a turn
// step / token event (the hot path), payload=request a ~1.5 KiB run::start
// with four messages.
func BenchmarkCodec(b *testing.B) {
	step := stepPayload{Type: "message_update", SessionID: "sess_01HZX3J8K9", Seq: 42, Step: 7, State: "assistant_streaming", Delta: "Hello, here is the next few tokens of text", TS: 1764500000000}
	for _, c := range []wire.Codec{wire.Msgpack, wire.JSON} {
		name := c.ContentType()[len("application/"):]
		b.Run("payload=step,codec="+name, func(b *testing.B) { benchCodec(b, c, step) })
		b.Run("payload=request,codec="+name, func(b *testing.B) { benchCodec(b, c, typicalTurn()) })
	}
}

// BenchmarkTrigger measures a sync trigger against the raw nats.Request
// round trip on the same server and connection, interleaved in one run, and
// reports their ratio (target < 2).
func BenchmarkTrigger(b *testing.B) {
	ns := enginetest.RunServer(b)
	e := enginetest.NewEngine(b, ns)
	w, err := e.Worker("bench")
	if err != nil {
		b.Fatal(err)
	}
	_ = w.Register(engine.Function{ID: "bench::echo", Handler: engine.Typed(func(_ context.Context, r turnPayload) (turnPayload, error) { return r, nil })})
	nc := e.Conn()
	raw := enginetest.Connect(b, ns)
	rawBody, _ := wire.Msgpack.Marshal(typicalTurn())
	if _, err := raw.Subscribe("bench.raw", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		b.Fatal(err)
	}
	_ = raw.Flush()
	p := typicalTurn()
	ctx := context.Background()

	var rawDur, trigDur time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := nc.Request("bench.raw", rawBody, 5*time.Second); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		var out turnPayload
		if err := e.Trigger(ctx, "bench::echo", p, &out); err != nil {
			b.Fatal(err)
		}
		trigDur += time.Since(t1)
		rawDur += t1.Sub(t0)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(rawDur.Nanoseconds())/n, "raw-ns/req")
	b.ReportMetric(float64(trigDur.Nanoseconds())/n, "trigger-ns/req")
	b.ReportMetric(float64(trigDur)/float64(rawDur), "trigger/raw")
	b.ReportMetric(n/trigDur.Seconds(), "triggers/s")
}

// BenchmarkTriggerParallel is the throughput of concurrent sync triggers.
func BenchmarkTriggerParallel(b *testing.B) {
	ns := enginetest.RunServer(b)
	e := enginetest.NewEngine(b, ns)
	w, _ := e.Worker("bench")
	_ = w.Register(engine.Function{ID: "bench::echo", Handler: engine.Typed(func(_ context.Context, r turnPayload) (turnPayload, error) { return r, nil })})
	p := typicalTurn()
	b.ReportAllocs()
	b.SetParallelism(16)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := e.Trigger(context.Background(), "bench::echo", p, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "triggers/s")
}
