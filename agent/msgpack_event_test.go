package agent

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

// refUsage and refModelEvent have Usage's and ModelEvent's fields and tags
// but no codec methods: the reflective codec's output is the reference.
type refUsage struct {
	InputTokens      int64   `json:"input_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	CacheReadTokens  int64   `json:"cache_read_tokens"`
	CacheWriteTokens int64   `json:"cache_write_tokens"`
	CostUSD          float64 `json:"cost_usd,omitempty"`
}

type refModelEvent struct {
	Type         ModelEventType `json:"type"`
	Index        int            `json:"index,omitempty"`
	Delta        string         `json:"delta,omitempty"`
	ID           string         `json:"id,omitempty"`
	FunctionID   string         `json:"function_id,omitempty"`
	Content      *refContent    `json:"content,omitempty"`
	Usage        *refUsage      `json:"usage,omitempty"`
	StopReason   StopReason     `json:"stop_reason,omitempty"`
	Message      *refMessage    `json:"message,omitempty"`
	Kind         ErrorKind      `json:"kind,omitempty"`
	Error        string         `json:"error,omitempty"`
	RetryAfterMs int64          `json:"retry_after_ms,omitempty"`
}

func toRefEvent(e ModelEvent) refModelEvent {
	r := refModelEvent{Type: e.Type, Index: e.Index, Delta: e.Delta, ID: e.ID, FunctionID: e.FunctionID,
		StopReason: e.StopReason, Kind: e.Kind, Error: e.Error, RetryAfterMs: e.RetryAfterMs}
	if e.Content != nil {
		c := refContent(*e.Content)
		r.Content = &c
	}
	if e.Usage != nil {
		u := refUsage(*e.Usage)
		r.Usage = &u
	}
	if e.Message != nil {
		m := toRef(*e.Message) // its *Usage: TestUsageMsgpackMatchesReflection
		r.Message = &m
	}
	return r
}

func sampleModelEvents() []ModelEvent {
	msgs := sampleMessages()
	return []ModelEvent{
		{},
		{Type: ModelStart, Message: &Message{Role: RoleAssistant, Model: "m", Provider: "scripted"}},
		{Type: ModelTextStart, Index: 0},
		{Type: ModelTextDelta, Index: 2, Delta: "héllo"},
		{Type: ModelTextEnd, Index: 1, Content: &Content{Type: ContentText, Text: "done"}},
		{Type: ModelFunctionCallStart, Index: 3, ID: "call_1", FunctionID: "math::add"},
		{Type: ModelFunctionCallDelta, Index: 3, Delta: `{"a":`},
		{Type: ModelFunctionCallEnd, Index: 3, Content: &Content{Type: ContentFunctionCall, ID: "call_1", FunctionID: "math::add", Arguments: map[string]any{"a": 1.0}}},
		{Type: ModelUsage, Usage: &Usage{InputTokens: 12, OutputTokens: 1 << 40, CacheReadTokens: -1, CostUSD: 0.125}},
		{Type: ModelUsage, Usage: &Usage{}},
		{Type: ModelUsage, Usage: &Usage{InputTokens: 3, CostUSD: 2}},
		{Type: ModelStop, StopReason: StopFunctionCall},
		{Type: ModelDone, Message: &msgs[2]},
		{Type: ModelError, Kind: ErrorRateLimited, Error: "slow down", RetryAfterMs: 1500, Message: &msgs[4]},
		{Type: "a_type_from_the_future", Index: -4},
	}
}

func TestModelEventMsgpackMatchesReflection(t *testing.T) {
	t.Parallel()
	for i, e := range sampleModelEvents() {
		got, err := wire.Msgpack.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		want, err := wire.Msgpack.Marshal(toRefEvent(e))
		if err != nil {
			t.Fatal(err)
		}
		if !sameMsgpack(t, got, want) {
			t.Fatalf("event %d:\n got %x\nwant %x", i, got, want)
		}
		// Decoding gives back the event, whoever encoded it.
		for _, b := range [][]byte{got, want} {
			var back ModelEvent
			if err := wire.Msgpack.Unmarshal(b, &back); err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			a, _ := json.Marshal(back)
			w, _ := json.Marshal(e)
			if !bytes.Equal(a, w) {
				t.Fatalf("event %d decodes to\n%s\nwant\n%s", i, a, w)
			}
		}
	}
	// A batch (a provider frame of several events) round-trips too.
	evs := sampleModelEvents()
	b, err := wire.Msgpack.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	var back []ModelEvent
	if err := wire.Msgpack.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(back)
	w, _ := json.Marshal(evs)
	if !bytes.Equal(a, w) {
		t.Fatalf("batch decodes to\n%s\nwant\n%s", a, w)
	}
}

func TestUsageMsgpackMatchesReflection(t *testing.T) {
	t.Parallel()
	for i, u := range []Usage{{}, {InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheWriteTokens: 4}, {InputTokens: -7, CostUSD: 0.5}, {CostUSD: 3}} {
		got, err := wire.Msgpack.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		want, err := wire.Msgpack.Marshal(refUsage(u))
		if err != nil {
			t.Fatal(err)
		}
		if !sameMsgpack(t, got, want) {
			t.Fatalf("usage %d:\n got %x\nwant %x", i, got, want)
		}
		var back Usage
		if err := wire.Msgpack.Unmarshal(got, &back); err != nil || back != u {
			t.Fatalf("usage %d decodes to %+v (%v)", i, back, err)
		}
	}
}

// Another encoder's map: any key order, unknown keys, nils, floats for
// integers; wrong types are errors.
func TestModelEventMsgpackDecodesForeignMaps(t *testing.T) {
	t.Parallel()
	foreign := map[string]any{
		"later": []any{1, "x"}, "index": 2.0, "usage": map[string]any{"output_tokens": 5, "extra": true},
		"content": nil, "message": nil, "type": "usage", "retry_after_ms": 7,
	}
	b, err := wire.Msgpack.Marshal(foreign)
	if err != nil {
		t.Fatal(err)
	}
	var e ModelEvent
	if err := wire.Msgpack.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	want := ModelEvent{Type: ModelUsage, Index: 2, Usage: &Usage{OutputTokens: 5}, RetryAfterMs: 7}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("decoded %#v", e)
	}
	for _, bad := range []any{
		map[string]any{"index": "two"},
		map[string]any{"usage": "lots"},
		map[string]any{"content": []any{1}},
		map[string]any{"message": map[string]any{"content": "x"}},
		map[string]any{"type": 5},
		"not a map",
	} {
		b, _ := wire.Msgpack.Marshal(bad)
		if err := wire.Msgpack.Unmarshal(b, &e); err == nil {
			t.Errorf("%v decoded", bad)
		}
	}
}

func FuzzModelEventMsgpack(f *testing.F) {
	for _, e := range sampleModelEvents() {
		b, _ := json.Marshal(e)
		f.Add(b)
	}
	f.Fuzz(msgpackCarriesJSON[ModelEvent])
}

// FuzzEventMsgpack: an event as the compaction worker's threshold trigger
// reads it from the event stream (any client may publish there, with
// Content-Type application/msgpack): msgpack carries what JSON carries,
// and any bytes as msgpack never panic the decoder.
func FuzzEventMsgpack(f *testing.F) {
	for _, s := range []string{
		`{"type":"turn_end","session_id":"s","seq":3,"ts":5,"message":{"role":"assistant","provider":"p","model":"m","usage":{"input_tokens":10,"output_tokens":2},"timestamp":4},"function_results":[{"role":"function_result","function_call_id":"c","content":[]}]}`,
		`{"type":"turn_state_changed","state":"function_awaiting_approval","view":{"state":"function_awaiting_approval","awaiting_approval":[{"function_call_id":"c","args":{"a":[1,"x"]}}]}}`,
		`{"type":"function_execution_end","function_call_id":"c","result":{"content":[{"type":"text","text":"ok"}]},"is_error":true,"duration_ms":7}`,
		`{"type":"compaction","compaction":{"reason":"threshold","tokens_before":9,"tokens_after":1}}`,
		`{"type":"message_update","delta":"x","partial":{"role":"assistant","content":null}}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(msgpackCarriesJSON[Event])
}
