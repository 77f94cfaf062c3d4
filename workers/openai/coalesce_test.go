package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/iii-on-nats/iii/agent"
)

// sseData returns the data of every event of the recorded streams.
func sseData(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	for _, name := range []string{"text", "parallel_tools", "thinking_deepseek", "thinking_ollama", "kimi", "length_cut_call", "midstream_error"} {
		b, err := os.ReadFile(filepath.Join("testdata", name+".sse"))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range bytes.Split(b, []byte("\n\n")) {
			if d, ok := bytes.CutPrefix(ev, []byte("data: ")); ok && !bytes.HasPrefix(d, doneMarker) {
				out = append(out, d)
			}
		}
	}
	return out
}

// TestFastChunk checks which chunks take the single-pass decoder (the
// deltas that make up a stream) and which go to the general path, and
// that both decode alike.
func TestFastChunk(t *testing.T) {
	t.Parallel()
	const head = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1748011234,"model":"gpt-4o-mini","system_fingerprint":null,`
	cases := []struct {
		name string
		data string
		fast bool
	}{
		{"content", head + `"choices":[{"index":0,"delta":{"content":" tok1"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x9Qm"}`, true},
		{"escapes", head + `"choices":[{"index":0,"delta":{"content":"a\n\"b\"\u00e9\ud83d\ude00\ud800 \\"}}]}`, true},
		{"utf8", `{"choices":[{"index":0,"delta":{"content":"你好 é"}}]}`, true},
		{"bad utf8", "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\xffb\"}}]}", true},
		{"reasoning", `{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"The"},"finish_reason":null}]}`, true},
		{"tool call", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_1","type":"function","function":{"name":"math__add","arguments":"{\"a\":"}}]}}]}`, true},
		{"finish", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`, true},
		{"no choices", `{"choices":[],"created":-1.5e3,"ok":true,"no":false}`, true},
		{"spaces", " { \"choices\" : [ { \"index\" : 0 , \"delta\" : { \"content\" : \"x\" } } ] } \n", true},
		{"empty tool calls", `{"choices":[{"delta":{"tool_calls":[]}}]}`, true},
		{"usage object", `{"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2}}`, false},
		{"choice usage", `{"choices":[{"index":0,"delta":{},"usage":{"prompt_tokens":1}}]}`, false},
		{"error", `{"error":{"message":"boom"}}`, false},
		{"folded key", `{"Choices":[{"index":0,"delta":{"content":"x"}}]}`, false},
		{"folded delta key", `{"choices":[{"index":0,"delta":{"Content":"x"}}]}`, false},
		{"twice", `{"choices":[],"choices":[{"index":0,"delta":{"content":"x"}}]}`, false},
		{"escaped key", `{"choic\u0065s":[]}`, false},
		{"object value", head + `"choices":[{"index":0,"delta":{"content":"x"},"logprobs":{"content":[]}}]}`, false},
		{"float index", `{"choices":[{"index":1.0,"delta":{"content":"x"}}]}`, false},
		{"number content", `{"choices":[{"index":0,"delta":{"content":5}}]}`, false},
		{"not json", `{"choices":[{"index":0,"delta":{"content":"x"}}]`, false},
		{"trailing", `{"choices":[]} x`, false},
		{"control byte", "{\"id\":\"a\tb\",\"choices\":[]}", false},
		{"bad escape", `{"id":"a\qb","choices":[]}`, false},
		{"leading zero", `{"created":01,"choices":[]}`, false},
		{"array", `[1]`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fast, gen chunk
			if got := fastChunk([]byte(tc.data), &fast); got != tc.fast {
				t.Fatalf("fastChunk took it: %v, want %v", got, tc.fast)
			}
			if !tc.fast {
				return
			}
			if err := decodeGeneral([]byte(tc.data), &gen); err != nil {
				t.Fatalf("the general path refuses it: %v", err)
			}
			if !reflect.DeepEqual(fast, gen) {
				t.Fatalf("fast %+v, general %+v", fast, gen)
			}
		})
	}
	// Every delta of the recorded streams takes the fast path.
	for _, d := range sseData(t) {
		var c chunk
		if !fastChunk(d, &c) && !bytes.Contains(d, []byte(`"usage":{`)) && !bytes.Contains(d, []byte(`"error"`)) {
			t.Errorf("%s: general path", d)
		}
	}
}

// FuzzFastChunk: what fastChunk accepts is valid JSON and decodes to what
// the general path gives.
func FuzzFastChunk(f *testing.F) {
	for _, d := range sseData(f) {
		f.Add(d)
	}
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"a\n\"b\"\u00e9\ud83d\ude00\ud800 \\"}}]}`))
	f.Add([]byte(`{"choices":[{"delta":{"tool_calls":[{"index":2,"function":{"name":null,"arguments":"x"}}],"reasoning":"r"}}],"n":-0.5E+2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast chunk
		if !fastChunk(data, &fast) {
			return
		}
		if !gjson.ValidBytes(data) {
			t.Fatalf("%q: fastChunk took invalid JSON", data)
		}
		var gen chunk
		if err := decodeGeneral(data, &gen); err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		if !reflect.DeepEqual(fast, gen) {
			t.Fatalf("%q:\nfast    %+v\ngeneral %+v", data, fast, gen)
		}
	})
}

func TestDeltaOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		data     string
		follower bool
		want     string // the text; "" when the chunk is not a plain delta
		kind     deltaKind
	}{
		{`{"choices":[{"index":0,"delta":{"content":"a"}}]}`, true, "a", deltaKind{field: 'c'}},
		{`{"choices":[{"index":0,"delta":{"reasoning_content":"r","reasoning":"r"}}]}`, true, "r", deltaKind{field: 't'}},
		{`{"choices":[{"index":0,"delta":{"reasoning":"r"}}]}`, true, "r", deltaKind{field: 't'}},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"function":{"arguments":"{}"}}]}}]}`, true, "{}", deltaKind{field: 'a', index: 2}},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"c","function":{"name":"f","arguments":"{"}}]}}]}`, false, "{", deltaKind{field: 'a', index: 2}},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"c","function":{"arguments":"{"}}]}}]}`, true, "", deltaKind{}},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"function":{"name":"f","arguments":"{"}}]}}]}`, true, "", deltaKind{}},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"function":{"name":"f"}}]}}]}`, false, "", deltaKind{}},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"a"}},{"index":1,"function":{"arguments":"b"}}]}}]}`, false, "", deltaKind{}},
		{`{"choices":[{"index":0,"delta":{"content":"a","reasoning_content":"r"}}]}`, false, "", deltaKind{}},
		{`{"choices":[{"index":0,"delta":{"content":"a","refusal":"no"}}]}`, false, "", deltaKind{}},
		{`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}`, false, "", deltaKind{}},
		{`{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":1}}`, false, "", deltaKind{}},
		{`{"choices":[{"index":0,"delta":{"content":"a"},"usage":{"prompt_tokens":1}}]}`, false, "", deltaKind{}},
		{`{"choices":[{"index":1,"delta":{"content":"a"}}]}`, false, "", deltaKind{}},
		{`{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}`, false, "", deltaKind{}},
		{`{"choices":[{"index":0,"delta":{"content":""}}]}`, false, "", deltaKind{}},
		{`{"choices":[]}`, false, "", deltaKind{}},
	}
	for _, tc := range cases {
		var c chunk
		if err := decodeChunk([]byte(tc.data), &c); err != nil {
			t.Fatal(err)
		}
		f, k := deltaOf(&c, tc.follower)
		got := ""
		if f != nil {
			got = *f
			if got == "" {
				t.Errorf("%s: an empty delta", tc.data)
			}
		}
		if got != tc.want || k != tc.kind {
			t.Errorf("%s (follower %v): %q %+v, want %q %+v", tc.data, tc.follower, got, k, tc.want, tc.kind)
		}
	}
}

// assemble runs the chunks through a coalescer with limit, all of them
// already waiting (as for a reader that fell far behind), and an
// assembler; it returns the events and the final message (nil when the
// answer did not finish or failed).
func assemble(t testing.TB, chunks []chunk, limit int) ([]agent.ModelEvent, *agent.Message) {
	t.Helper()
	var events []agent.ModelEvent
	a := newAssembler("openai", "m", 1, agent.NewToolNames([]string{"weather::get", "math::add"}), slog.New(slog.DiscardHandler), func(ev *agent.ModelEvent) error {
		if err := ev.Validate(); err != nil {
			t.Fatalf("invalid event %+v: %v", ev, err)
		}
		events = append(events, *ev)
		return nil
	})
	items := make(chan item, len(chunks))
	for _, c := range chunks {
		items <- item{c: c}
	}
	close(items)
	in := coalescer{items: items, limit: limit}
	for {
		it, ok := in.next()
		if !ok {
			break
		}
		if err := a.chunk(&it.c); err != nil {
			return events, nil
		}
	}
	if !a.done {
		return events, nil
	}
	msg, err := a.complete()
	if err != nil {
		t.Fatal(err)
	}
	return events, msg
}

// joinDeltas merges adjacent deltas of one type and index.
func joinDeltas(evs []agent.ModelEvent) []agent.ModelEvent {
	var out []agent.ModelEvent
	for _, ev := range evs {
		if n := len(out); n > 0 && ev.Delta != "" && out[n-1].Type == ev.Type && out[n-1].Index == ev.Index {
			out[n-1].Delta += ev.Delta
			continue
		}
		out = append(out, ev)
	}
	return out
}

// checkCoalesced compares an answer assembled with coalescing with the
// same answer without: the same events once adjacent deltas are joined,
// the same final message, and no merged delta over the limit.
func checkCoalesced(t testing.TB, chunks []chunk, limit int) (plain, merged int) {
	t.Helper()
	// Each run gets its own copy: merging rewrites the chunks' texts.
	copyOf := func() []chunk {
		out := make([]chunk, len(chunks))
		for i, c := range chunks {
			out[i] = c
			out[i].Choices = append([]chunkChoice(nil), c.Choices...)
			for j := range out[i].Choices {
				d := &out[i].Choices[j].Delta
				d.ToolCalls = append([]chunkToolCall(nil), d.ToolCalls...)
			}
		}
		return out
	}
	want, wantMsg := assemble(t, copyOf(), 0)
	got, gotMsg := assemble(t, copyOf(), limit)
	if a, b := comparable(t, joinDeltas(got), gotMsg), comparable(t, joinDeltas(want), wantMsg); a != b {
		t.Fatalf("limit %d: coalesced events and message\n%s\nwant (deltas joined)\n%s", limit, a, b)
	}
	// A merged delta stays within the limit; one delta of the server may
	// be longer on its own.
	single := map[string]bool{}
	for _, ev := range want {
		single[ev.Delta] = true
	}
	for _, ev := range got {
		if len(ev.Delta) > limit && !single[ev.Delta] {
			t.Fatalf("limit %d: a merged delta of %d bytes", limit, len(ev.Delta))
		}
	}
	return len(want), len(got)
}

// generatedID is a call id the assembler made up (nuid), different on
// every run.
var generatedID = regexp.MustCompile(`call_[0-9A-Za-z]{22}\b`)

// comparable is the JSON of events and msg with the generated call ids
// numbered in order of appearance.
func comparable(t testing.TB, events []agent.ModelEvent, msg *agent.Message) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"events": events, "message": msg})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	return generatedID.ReplaceAllStringFunc(string(b), func(id string) string {
		if ids[id] == "" {
			ids[id] = fmt.Sprintf("generated#%d", len(ids)+1)
		}
		return ids[id]
	})
}

// TestCoalescer merges the waiting deltas of a mixed answer (reasoning,
// text, two calls' arguments, usage) for several limits.
func TestCoalescer(t *testing.T) {
	t.Parallel()
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	for i := range 20 {
		add(`{"choices":[{"index":0,"delta":{"reasoning_content":"think%d "}}]}`, i)
	}
	for i := range 30 {
		add(`{"choices":[{"index":0,"delta":{"content":"tok%d "}}]}`, i)
	}
	add(`{"choices":[{"index":0,"delta":{"refusal":"no"}}]}`)
	add(`{"choices":[{"index":0,"delta":{"content":"after"}}]}`)
	add(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"weather__get","arguments":"{\"city\":"}}]}}]}`)
	for i := range 10 {
		add(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"x%d"}}]}}]}`, i)
	}
	add(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]}}]}`)
	add(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"a\":"}}]}}]}`)
	add(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"1,"}}]}}]}`)
	add(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","function":{"name":"math__add","arguments":"\"b\":2}"}}]}}]}`)
	add(`{"choices":[{"index":0,"delta":{"content":"late"}}]}`)
	add(`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)
	add(`{"choices":[{"index":0,"delta":{"content":"ignored"}}]}`)
	add(`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}`)
	chunks := make([]chunk, len(lines))
	for i, l := range lines {
		if err := decodeChunk([]byte(l), &chunks[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int{1, 8, 64, DefaultCoalesce} {
		plain, merged := checkCoalesced(t, chunks, limit)
		if limit >= 64 && merged >= plain/2 {
			t.Errorf("limit %d: %d events, %d without coalescing", limit, merged, plain)
		}
	}
}

// FuzzCoalescer: for any chunk sequence (one JSON chunk per line) and
// limit, coalescing changes nothing but how the deltas are cut.
func FuzzCoalescer(f *testing.F) {
	for _, name := range []string{"text", "parallel_tools", "thinking_deepseek", "thinking_ollama", "kimi", "length_cut_call"} {
		b, err := os.ReadFile(filepath.Join("testdata", name+".sse"))
		if err != nil {
			f.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("data: "), nil)
		f.Add(bytes.ReplaceAll(b, []byte("\n\n"), []byte("\n")), uint16(16))
	}
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		var chunks []chunk
		for _, line := range bytes.Split(data, []byte("\n")) {
			var c chunk
			if decodeChunk(line, &c) != nil || c.Error != "" {
				continue
			}
			chunks = append(chunks, c)
		}
		checkCoalesced(t, chunks, int(limit))
	})
}

// BenchmarkDecodeChunk decodes a typical text delta with the single-pass
// decoder and with the general path.
func BenchmarkDecodeChunk(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-BaYbRiwvY2qVqT3Mm4Jv9sXzR2y1P","object":"chat.completion.chunk","created":1748011234,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_54eb4bd693","choices":[{"index":0,"delta":{"content":" tok1234"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x9Qm"}` + "\n")
	for _, path := range []struct {
		name   string
		decode func([]byte, *chunk) error
	}{{"fast", decodeChunk}, {"general", decodeGeneral}} {
		b.Run(path.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				var c chunk
				if err := path.decode(data, &c); err != nil || strings.TrimSpace(c.Choices[0].Delta.Content) != "tok1234" {
					b.Fatal(err)
				}
			}
		})
	}
}
