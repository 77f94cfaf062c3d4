package agent

import (
	"bytes"
	"encoding/json"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

// refContent and refMessage have Content's and Message's fields and tags
// but no codec methods: the reflective codec's output is the reference.
type refContent struct {
	Type       ContentType    `json:"type"`
	Text       string         `json:"text,omitempty"`
	Mime       string         `json:"mime,omitempty"`
	Data       string         `json:"data,omitempty"`
	ID         string         `json:"id,omitempty"`
	FunctionID string         `json:"function_id,omitempty"`
	Arguments  map[string]any `json:"arguments,omitempty"`
	Signature  string         `json:"signature,omitempty"`
}

type refMessage struct {
	Role           Role         `json:"role"`
	Content        []refContent `json:"content"`
	Timestamp      int64        `json:"timestamp,omitempty"`
	StopReason     StopReason   `json:"stop_reason,omitempty"`
	Usage          *Usage       `json:"usage,omitempty"`
	Model          string       `json:"model,omitempty"`
	Provider       string       `json:"provider,omitempty"`
	ErrorMessage   string       `json:"error_message,omitempty"`
	FunctionCallID string       `json:"function_call_id,omitempty"`
	FunctionID     string       `json:"function_id,omitempty"`
	Details        any          `json:"details,omitempty"`
	IsError        bool         `json:"is_error,omitempty"`
}

func toRef(m Message) refMessage {
	r := refMessage{Role: m.Role, Timestamp: m.Timestamp, StopReason: m.StopReason, Usage: m.Usage, Model: m.Model,
		Provider: m.Provider, ErrorMessage: m.ErrorMessage, FunctionCallID: m.FunctionCallID, FunctionID: m.FunctionID,
		Details: m.Details, IsError: m.IsError}
	if m.Content != nil {
		r.Content = make([]refContent, len(m.Content))
		for i, c := range m.Content {
			r.Content[i] = refContent(c)
		}
	}
	return r
}

// sameMsgpack reports whether a and b encode the same value: equal bytes,
// or equal once decoded (map keys come in Go's random map order).
func sameMsgpack(t *testing.T, a, b []byte) bool {
	t.Helper()
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if err := wire.Msgpack.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := wire.Msgpack.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return len(a) == len(b) && reflect.DeepEqual(va, vb)
}

func sampleMessages() []Message {
	return []Message{
		{},
		{Role: RoleUser, Content: []Content{Text("hello")}, Timestamp: 1764460800123},
		{Role: RoleAssistant, Content: []Content{{Type: ContentThinking, Text: "hmm", Signature: "sig=="}, Text("hi"),
			{Type: ContentFunctionCall, ID: "toolu_1", FunctionID: "math::add", Arguments: map[string]any{"a": 1.5, "b": "x", "n": nil, "l": []any{1.0, "y"}}}},
			StopReason: StopFunctionCall, Usage: &Usage{InputTokens: 10, OutputTokens: 300, CacheReadTokens: 70000, CostUSD: 0.25},
			Model: "claude-test", Provider: "anthropic", Timestamp: -5},
		{Role: RoleFunctionResult, FunctionCallID: "toolu_1", FunctionID: "math::add", Content: []Content{Text("3")},
			Details: map[string]any{"sum": 3.0, "deep": map[string]any{"k": []any{true, false}}}, IsError: true},
		{Role: RoleAssistant, Content: []Content{}, StopReason: StopError, ErrorMessage: "boom", Details: "a string"},
		{Role: RoleUser, Content: []Content{{Type: ContentImage, Mime: "image/png", Data: "iVBORw0KGgo="}, {Type: ContentFunctionCall, Arguments: map[string]any{}}}},
	}
}

func TestMessageMsgpackMatchesReflection(t *testing.T) {
	t.Parallel()
	for i, m := range sampleMessages() {
		got, err := wire.Msgpack.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := wire.Msgpack.Marshal(toRef(m))
		if err != nil {
			t.Fatal(err)
		}
		if !sameMsgpack(t, got, want) {
			t.Fatalf("message %d:\n got %x\nwant %x", i, got, want)
		}
		// Decoding gives back what the reflective codec gives.
		var dm Message
		if err := wire.Msgpack.Unmarshal(got, &dm); err != nil {
			t.Fatal(err)
		}
		var rm refMessage
		if err := wire.Msgpack.Unmarshal(want, &rm); err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(dm)
		b, _ := json.Marshal(rm)
		if !bytes.Equal(a, b) {
			t.Fatalf("message %d decodes to\n%s\nthe reflective codec to\n%s", i, a, b)
		}
	}
}

// Another encoder's map: any key order, unknown keys, nils, floats for
// integers.
func TestMessageMsgpackDecodesForeignMaps(t *testing.T) {
	t.Parallel()
	foreign := map[string]any{
		"x_unknown": map[string]any{"nested": []any{1, 2}}, "is_error": false, "timestamp": 12.0, "usage": nil,
		"content": []any{map[string]any{"arguments": nil, "text": "hi", "type": "text", "later": 1}}, "role": "user", "details": nil,
	}
	b, err := wire.Msgpack.Marshal(foreign)
	if err != nil {
		t.Fatal(err)
	}
	var m Message
	if err := wire.Msgpack.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := Message{Role: RoleUser, Timestamp: 12, Content: []Content{Text("hi")}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("decoded %#v", m)
	}
	for _, bad := range []any{
		map[string]any{"content": "not a list"},
		map[string]any{"content": []any{map[string]any{"arguments": "not a map"}}},
		map[string]any{"role": 5},
		[]any{"not a map"},
	} {
		b, _ := wire.Msgpack.Marshal(bad)
		if err := wire.Msgpack.Unmarshal(b, &m); err == nil {
			t.Errorf("%v decoded", bad)
		}
	}
}

func FuzzMessageMsgpack(f *testing.F) {
	for _, m := range sampleMessages() {
		b, _ := json.Marshal(m)
		f.Add(b)
	}
	// (The reflective codec drops details that are an empty map, 0, false
	// or "", and a zero usage; the methods keep them, as JSON does.)
	f.Fuzz(msgpackCarriesJSON[Message])
}

// msgpackCarriesJSON checks that msgpack carries exactly what JSON carries:
// a value decoded from data (JSON) goes through the msgpack codec and
// gives the same JSON back; data as msgpack never panics the decoder.
func msgpackCarriesJSON[T any](t *testing.T, data []byte) {
	var v T
	if json.Unmarshal(data, &v) != nil {
		return
	}
	want, err := json.Marshal(v)
	if err != nil {
		return
	}
	b, err := wire.Msgpack.Marshal(v)
	if err != nil {
		t.Fatalf("%s does not encode: %v", data, err)
	}
	var back T
	if err := wire.Msgpack.Unmarshal(b, &back); err != nil {
		t.Fatalf("%s does not decode back: %v", data, err)
	}
	got, err := json.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("msgpack round trip of %s:\n got %s\nwant %s", data, got, want)
	}
	_ = wire.Msgpack.Unmarshal(data, &back)
}

// An ext value where a map is wanted is refused: the library would take
// the ext's payload for the map, and a length declared inside it, which
// no check before the decoding saw, would allocate unbounded memory (17
// bytes declaring 2^22 details made 64 MB). Not parallel: it measures the
// heap.
func TestExtIsNoMap(t *testing.T) {
	payload := append([]byte{0x81, 0xa7}, "details"...)
	payload = append(payload, 0xdd, 0x00, 0x40, 0x00, 0x00) // array32 of 2^22
	data := append([]byte{0xc7, byte(len(payload)), 0x01}, payload...)
	for name, v := range map[string]any{"message": new(Message), "content": new(Content), "model event": new(ModelEvent), "usage": new(Usage)} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := wire.Msgpack.Unmarshal(data, v)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "ext value") {
			t.Errorf("%s: error %v, want the ext refused", name, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("%s: decoding 17 bytes allocated %d bytes", name, grew)
		}
	}
}
