package openai_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/workers/openai"
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
			// One event per delta of the server, so the frames are the same
			// on every run.
			ev := setup(t, sse(t, name+".sse"), config{opts: []openai.Option{openai.WithCoalesce(0)}})
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
	ev := setup(t, sse(t, "text.sse"), config{opts: []openai.Option{openai.WithCoalesce(0)}})
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

// longStream is an answer of many small deltas of every kind: reasoning,
// text, and two calls whose arguments stream in pieces.
func longStream() []byte {
	var b bytes.Buffer
	ev := func(format string, args ...any) {
		b.WriteString("data: ")
		fmt.Fprintf(&b, format, args...)
		b.WriteString("\n\n")
	}
	const head = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1748011234,"model":"gpt-4o-mini","choices":[{"index":0,"delta":`
	for i := range 150 {
		ev(head+`{"reasoning_content":"step %d; "},"finish_reason":null}]}`, i)
	}
	for i := range 300 {
		ev(head+`{"content":" tok%d\n"},"logprobs":null,"finish_reason":null}],"usage":null}`, i)
	}
	ev(head + `{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"weather__get","arguments":""}}]},"finish_reason":null}]}`)
	ev(head + `{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":\""}}]},"finish_reason":null}]}`)
	for i := range 100 {
		ev(head+`{"tool_calls":[{"index":0,"function":{"arguments":"P%d"}}]},"finish_reason":null}]}`, i)
	}
	ev(head + `{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]},"finish_reason":null}]}`)
	ev(head + `{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"math__add","arguments":"{\"a\":1,"}}]},"finish_reason":null}]}`)
	ev(head + `{"tool_calls":[{"index":1,"function":{"arguments":"\"b\":2}"}}]},"finish_reason":null}]}`)
	ev(head + `{},"finish_reason":"tool_calls"}]}`)
	ev(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1748011234,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":560}}`)
	ev("[DONE]")
	return b.Bytes()
}

// TestCoalescing reads a long answer through a reader that grants one
// frame at a time, so the provider reads ahead: the deltas that were
// waiting go out merged (never over the coalesce size), and the events
// are those of an uncoalesced stream with adjacent deltas joined: the
// same concatenated deltas, the same final message.
func TestCoalescing(t *testing.T) {
	t.Parallel()
	const size = 64
	body := longStream()
	serve := func(w http.ResponseWriter, r *http.Request, _ int) { serveSSE(w, body, -1) }
	req := userReq("go")
	req.Tools = weatherTools

	plain := setup(t, serve, config{opts: []openai.Option{openai.WithCoalesce(0)}})
	want := plain.stream(t, req)
	merged := setup(t, serve, config{opts: []openai.Option{openai.WithCoalesce(size)}})
	got := merged.streamWith(t, req, nil, channel.WithWindow(1))
	for _, res := range []result{want, got} {
		if res.err != nil || !isEnd(res.end) || res.resp.StopReason != agent.StopFunctionCall {
			t.Fatalf("call err %v, stream end %v, reply %+v", res.err, res.end, res.resp)
		}
	}

	// start; thinking start, 150 deltas, end; text start, 300 deltas, end;
	// two calls' start and 102 + 2 deltas; their ends; usage, stop, done.
	if n := len(want.events); n != 1+152+302+103+3+2+3 {
		t.Fatalf("%d events without coalescing", n)
	}
	t.Logf("%d events with coalescing, %d without", len(got.events), len(want.events))
	if len(got.events) >= len(want.events)/2 {
		t.Fatalf("%d events with coalescing, %d without: (nearly) nothing was merged", len(got.events), len(want.events))
	}
	for _, typ := range []agent.ModelEventType{agent.ModelThinkingDelta, agent.ModelTextDelta, agent.ModelFunctionCallDelta} {
		if a, b := joinDeltas(got.events, typ), joinDeltas(want.events, typ); a != b {
			t.Fatalf("%s deltas say %q, without coalescing %q", typ, a, b)
		}
	}
	for _, e := range got.events {
		if len(e.Delta) > size {
			t.Fatalf("a delta of %d bytes, over the coalesce size %d", len(e.Delta), size)
		}
	}
	if !reflect.DeepEqual(joinAdjacent(got.events), joinAdjacent(want.events)) {
		t.Fatalf("events (deltas joined)\n%+v\nwithout coalescing\n%+v", types(joinAdjacent(got.events)), types(joinAdjacent(want.events)))
	}
	if !reflect.DeepEqual(last(got.events), last(want.events)) {
		t.Fatalf("final message %+v, without coalescing %+v", last(got.events).Message, last(want.events).Message)
	}
}

// joinAdjacent merges adjacent deltas of one type and index.
func joinAdjacent(evs []agent.ModelEvent) []agent.ModelEvent {
	var out []agent.ModelEvent
	for _, e := range evs {
		if n := len(out); n > 0 && e.Delta != "" && out[n-1].Type == e.Type && out[n-1].Index == e.Index {
			out[n-1].Delta += e.Delta
			continue
		}
		out = append(out, e)
	}
	return out
}

// TestConnectionReused checks that a finished stream is read to its end,
// so the next call reuses the connection (no new TLS handshake with the
// real API), also when the server ends the body a moment after [DONE].
func TestConnectionReused(t *testing.T) {
	t.Parallel()
	body := textBody(t)
	var mu sync.Mutex
	var remotes []string
	ev := setup(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		mu.Lock()
		remotes = append(remotes, r.RemoteAddr)
		mu.Unlock()
		serveSSE(w, body, -1)
		w.(http.Flusher).Flush()
		select { // the body ends a moment after [DONE]
		case <-time.After(20 * time.Millisecond):
		case <-r.Context().Done():
		}
	}, config{})
	succeeded(t, ev.stream(t, userReq("one")))
	succeeded(t, ev.stream(t, userReq("two")))
	mu.Lock()
	defer mu.Unlock()
	if len(remotes) != 2 || remotes[0] != remotes[1] {
		t.Fatalf("remote addresses %q: the connection was not reused", remotes)
	}
}

// TestParallelCallsShareAnIndex: servers that give every call of a
// parallel batch index 0 (ollama), or no index at all, tell the calls
// apart by their ids only; each is a call of its own.
func TestParallelCallsShareAnIndex(t *testing.T) {
	t.Parallel()
	const (
		head = `{"id":"chatcmpl-361","object":"chat.completion.chunk","created":1748011301,"model":"qwen3:8b","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":`
		tail = `,"finish_reason":null}]}`
		fin  = `{"id":"chatcmpl-361","object":"chat.completion.chunk","created":1748011301,"model":"qwen3:8b","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"tool_calls"}]}`
	)
	call := func(index, id, name, args string) string {
		b, _ := json.Marshal(args)
		s := `{` + index + `"id":"` + id + `","type":"function","function":{"name":"` + name + `","arguments":` + string(b) + `}}`
		if name == "" {
			s = `{` + index + `"function":{"arguments":` + string(b) + `}}`
		}
		return s
	}
	chunk := func(calls ...string) string {
		return "data: " + head + `{"role":"assistant","content":"","tool_calls":[` + strings.Join(calls, ",") + `]}` + tail + "\n\n"
	}
	for name, body := range map[string]string{
		"one chunk, index 0":  chunk(call(`"index":0,`, "call_7fb2", "weather__get", `{"city":"Paris"}`), call(`"index":0,`, "call_a41c", "weather__get", `{"city":"Rome"}`)),
		"one chunk, no index": chunk(call(``, "call_7fb2", "weather__get", `{"city":"Paris"}`), call(``, "call_a41c", "weather__get", `{"city":"Rome"}`)),
		"chunk per call": chunk(call(`"index":0,`, "call_7fb2", "weather__get", `{"city":"Paris"}`)) +
			chunk(call(`"index":0,`, "call_a41c", "weather__get", `{"city":"Rome"}`)),
		"streamed arguments": chunk(call(`"index":0,`, "call_7fb2", "weather__get", ``)) + chunk(call(`"index":0,`, "", "", `{"city":`)) +
			chunk(call(`"index":0,`, "", "", `"Paris"}`)) + chunk(call(`"index":0,`, "call_a41c", "weather__get", `{"city"`)) +
			chunk(call(`"index":0,`, "", "", `:"Rome"}`)),
		// A server that changes a call's id after its first fragment
		// (the later fragments have no name): one call per name.
		"ids change": chunk(call(`"index":0,`, "call_7fb2", "weather__get", `{"city":`)) + chunk(`{"index":0,"id":"call_x1","function":{"arguments":"\"Paris\"}"}}`) +
			chunk(call(`"index":1,`, "call_a41c", "weather__get", `{"city":`)) + chunk(`{"index":1,"id":"call_x2","function":{"arguments":"\"Rome\"}"}}`),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			full := []byte(body + "data: " + fin + "\n\ndata: [DONE]\n\n")
			ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) { serveSSE(w, full, -1) }, config{})
			req := userReq("weather in Paris and Rome?")
			req.Tools = weatherTools
			res := ev.stream(t, req)
			if res.err != nil || !isEnd(res.end) || res.resp.StopReason != agent.StopFunctionCall {
				t.Fatalf("call err %v, stream end %v, reply %+v, events %v", res.err, res.end, res.resp, types(res.events))
			}
			calls := last(res.events).Message.FunctionCalls()
			if len(calls) != 2 || calls[0].ID != "call_7fb2" || calls[1].ID != "call_a41c" ||
				calls[0].FunctionID != "weather::get" || calls[1].FunctionID != "weather::get" ||
				calls[0].Arguments["city"] != "Paris" || calls[1].Arguments["city"] != "Rome" {
				t.Fatalf("calls %+v, want Paris then Rome", calls)
			}
		})
	}
}
