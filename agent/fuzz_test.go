package agent

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDecode decodes arbitrary JSON into each wire type: decoding may fail
// but never panics, Validate never panics, and a decoded value re-encodes
// to JSON that decodes to the same encoding (decode→encode→decode is
// stable).
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":5}`,
		`{"role":"assistant","content":[{"type":"function_call","id":"c1","function_id":"fs::read","arguments":{"path":"/x","n":[1,2.5,null,true]}}],"stop_reason":"function_call","usage":{"input_tokens":1}}`,
		`{"role":"function_result","function_call_id":"c1","function_id":"f","content":[],"details":{"a":{"b":[]}},"is_error":true}`,
		`{"session_id":"s","provider":"p","model":"m","messages":[{"role":"user","content":[{"type":"image","mime":"image/png","data":"AA=="}]}],"max_turns":2}`,
		`{"type":"turn_state_changed","session_id":"s","seq":1,"ts":2,"state":"stopped","view":{"state":"stopped","awaiting_approval":[{"function_call_id":"c"}]}}`,
		`{"type":"turn_end","message":{"role":"assistant"},"function_results":[{"role":"function_result"}]}`,
		`{"type":"done","message":{"role":"assistant","content":null}}`,
		`{"type":"error","kind":"rate_limited","retry_after_ms":-1}`,
		`{"timestamp":1e400}`,
		`{"content":[{"arguments":{"\ud800":"\xff"}}]}`,
		`[]`, `null`, `{}`, `"x"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check[Message](t, data, func(v Message) { _ = v.Validate(); _ = v.FunctionCalls() })
		check[RunStart](t, data, func(v RunStart) { _ = v.Validate() })
		check[Event](t, data, func(Event) {})
		check[ModelEvent](t, data, func(v ModelEvent) { _ = v.Validate() })
		check[FunctionResult](t, data, func(FunctionResult) {})
		check[TurnView](t, data, func(TurnView) {})
	})
}

func check[T any](t *testing.T, data []byte, use func(T)) {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return
	}
	use(v)
	b1, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%T: re-encode: %v", v, err)
	}
	var w T
	if err := json.Unmarshal(b1, &w); err != nil {
		t.Fatalf("%T: decode of own encoding %s: %v", v, b1, err)
	}
	b2, err := json.Marshal(w)
	if err != nil {
		t.Fatalf("%T: second encode: %v", w, err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatalf("%T: unstable encoding:\n%s\n%s", v, b1, b2)
	}
}
