package agent_test

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

// Numbers in a function call's JSON arguments keep their exact value:
// integers as int64 (uint64 above its range), the rest as float64.
func TestDecodeArgumentsExact(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]any
		err      string
	}{
		{name: "int64 past 2^53", in: `{"id":1234567890123456789}`, want: map[string]any{"id": int64(1234567890123456789)}},
		{name: "2^53+1", in: `{"n":9007199254740993}`, want: map[string]any{"n": int64(9007199254740993)}},
		{name: "min int64", in: `{"n":-9223372036854775808}`, want: map[string]any{"n": int64(math.MinInt64)}},
		{name: "max uint64", in: `{"n":18446744073709551615}`, want: map[string]any{"n": uint64(math.MaxUint64)}},
		{name: "past uint64", in: `{"n":18446744073709551616}`, want: map[string]any{"n": 18446744073709551616.0}},
		{name: "fraction", in: `{"n":1.5,"m":1.0,"e":1e3}`, want: map[string]any{"n": 1.5, "m": 1.0, "e": 1000.0}},
		{name: "nested", in: `{"a":{"b":[1,2.5,{"c":9007199254740993}]},"s":"1","t":true,"z":null}`,
			want: map[string]any{"a": map[string]any{"b": []any{int64(1), 2.5, map[string]any{"c": int64(9007199254740993)}}}, "s": "1", "t": true, "z": nil}},
		{name: "null", in: `null`, want: nil},
		{name: "empty", in: `{}`, want: map[string]any{}},
		{name: "out of range", in: `{"n":1e400}`, err: "out of range"},
		{name: "array", in: `[1]`, err: "cannot unmarshal array"},
		{name: "trailing", in: `{"a":1} {}`, err: "after top-level value"},
		{name: "not json", in: `{"a":`, err: "unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := agent.DecodeArguments([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

// Every JSON type that carries a call's arguments decodes them exactly,
// so an id survives a record, an event or a transcript read back.
func TestArgumentsExactInTypes(t *testing.T) {
	const id = int64(1234567890123456789)
	args := map[string]any{"id": id, "list": []any{uint64(math.MaxUint64)}}
	roundTrip := func(t *testing.T, v, into any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
	}
	t.Run("content", func(t *testing.T) {
		var m agent.Message
		roundTrip(t, agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{{Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "f", Arguments: args}}}, &m)
		if got := m.Content[0].Arguments; !reflect.DeepEqual(got, args) {
			t.Fatalf("arguments %#v", got)
		}
	})
	t.Run("event", func(t *testing.T) {
		var e agent.Event
		roundTrip(t, agent.Event{Type: agent.EventFunctionExecutionStart, SessionID: "s", FunctionCallID: "c1", FunctionID: "f", Args: args}, &e)
		if !reflect.DeepEqual(e.Args, args) || e.FunctionID != "f" || e.SessionID != "s" {
			t.Fatalf("event %#v", e)
		}
	})
	t.Run("approval record", func(t *testing.T) {
		var r agent.ApprovalRecord
		roundTrip(t, agent.ApprovalRecord{SessionID: "s", FunctionID: "f", Args: args, Status: agent.ApprovalPending}, &r)
		if !reflect.DeepEqual(r.Args, args) || r.Status != agent.ApprovalPending {
			t.Fatalf("record %#v", r)
		}
	})
	t.Run("pending approval", func(t *testing.T) {
		var p agent.PendingApproval
		roundTrip(t, agent.PendingApproval{FunctionCallID: "c1", Args: args, RequestedAt: 7}, &p)
		if !reflect.DeepEqual(p.Args, args) || p.RequestedAt != 7 {
			t.Fatalf("pending %#v", p)
		}
	})
	t.Run("wrong type", func(t *testing.T) {
		var c agent.Content
		if err := json.Unmarshal([]byte(`{"type":"function_call","arguments":"x"}`), &c); err == nil {
			t.Fatal("string arguments decoded")
		}
		if err := json.Unmarshal([]byte(`{"type":7}`), &c); err == nil {
			t.Fatal("a number decoded as the type")
		}
	})
}

// FuzzDecodeArguments: DecodeArguments never panics, accepts exactly what
// json.Unmarshal accepts into a map, and its result means the same numbers
// (re-encoded and decoded the standard way, both agree).
func FuzzDecodeArguments(f *testing.F) {
	for _, s := range []string{`{"id":1234567890123456789}`, `{"a":[1,2.5,-0,1e-400]}`, `{"n":1e400}`, `null`, `[]`, `{"a":{"b":{"c":18446744073709551616}}}`, `{"x":-9223372036854775809}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := agent.DecodeArguments(data)
		var std map[string]any
		stdErr := json.Unmarshal(data, &std)
		if (err == nil) != (stdErr == nil) {
			t.Fatalf("DecodeArguments error %v, json.Unmarshal error %v", err, stdErr)
		}
		if err != nil {
			return
		}
		b, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var again map[string]any
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatalf("decode of %s: %v", b, err)
		}
		if !reflect.DeepEqual(again, std) {
			t.Fatalf("exact %s means %#v, standard decoding %#v", b, again, std)
		}
	})
}
