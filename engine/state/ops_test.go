package state_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/state"
	"github.com/iii-on-nats/iii/engine/wire"
)

func mustJSON(t testing.TB, s string) any {
	t.Helper()
	if s == "" {
		return nil
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad test JSON %q: %v", s, err)
	}
	return v
}

func toJSON(t testing.TB, v any) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("marshal %v: %v", v, err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func TestApply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string // JSON; "" is a missing key (nil)
		ops   []state.Op
		want  string // JSON; "" with err set
		err   bool
	}{
		// set
		{"set root on missing", "", []state.Op{state.Set("", map[string]any{"a": 1})}, `{"a":1}`, false},
		{"set root replaces", `{"a":1}`, []state.Op{state.Set("", "x")}, `"x"`, false},
		{"set field", `{"a":1}`, []state.Op{state.Set("b", true)}, `{"a":1,"b":true}`, false},
		{"set creates intermediates", "", []state.Op{state.Set("a.b.c", 1)}, `{"a":{"b":{"c":1}}}`, false},
		{"set through null", `{"a":null}`, []state.Op{state.Set("a.b", 1)}, `{"a":{"b":1}}`, false},
		{"set null", `{"a":1}`, []state.Op{state.Set("a", nil)}, `{"a":null}`, false},
		{"set array element", `{"l":[1,2,3]}`, []state.Op{state.Set("l.1", "x")}, `{"l":[1,"x",3]}`, false},
		{"set inside array element", `{"l":[{"n":1}]}`, []state.Op{state.Set("l.0.n", 2)}, `{"l":[{"n":2}]}`, false},
		{"set index out of range", `{"l":[1]}`, []state.Op{state.Set("l.1", 2)}, "", true},
		{"set non-index into array", `{"l":[1]}`, []state.Op{state.Set("l.x", 2)}, "", true},
		{"set leading-zero index", `{"l":[1,2]}`, []state.Op{state.Set("l.01", 2)}, "", true},
		{"set negative index", `{"l":[1,2]}`, []state.Op{state.Set("l.-1", 2)}, "", true},
		{"set through string", `{"a":"s"}`, []state.Op{state.Set("a.b", 1)}, "", true},
		{"set through number", `{"a":1}`, []state.Op{state.Set("a.b", 1)}, "", true},
		{"set through bool root", `true`, []state.Op{state.Set("a", 1)}, "", true},
		{"set struct value", "", []state.Op{state.Set("p", struct {
			X int `json:"x"`
		}{3})}, `{"p":{"x":3}}`, false},
		{"set NaN", "", []state.Op{state.Set("a", math.NaN())}, "", true},
		{"set with by", "", []state.Op{{Type: state.OpSet, Path: "a", By: 1}}, "", true},

		// increment / decrement
		{"increment missing key", "", []state.Op{state.Increment("", 5)}, `5`, false},
		{"increment missing field", `{}`, []state.Op{state.Increment("c.hits", 1)}, `{"c":{"hits":1}}`, false},
		{"increment default by", `{"n":1}`, []state.Op{{Type: state.OpIncrement, Path: "n"}}, `{"n":2}`, false},
		{"increment null", `{"n":null}`, []state.Op{state.Increment("n", 2)}, `{"n":2}`, false},
		{"increment fraction", `{"n":1}`, []state.Op{state.Increment("n", 0.5)}, `{"n":1.5}`, false},
		{"increment negative", `{"n":1}`, []state.Op{state.Increment("n", -3)}, `{"n":-2}`, false},
		{"increment string", `{"n":"1"}`, []state.Op{state.Increment("n", 1)}, "", true},
		{"increment bool", `{"n":true}`, []state.Op{state.Increment("n", 1)}, "", true},
		{"increment object", `{"n":{}}`, []state.Op{state.Increment("n", 1)}, "", true},
		{"increment array", `[1]`, []state.Op{state.Increment("", 1)}, "", true},
		{"increment overflow", `{"n":1.7976931348623157e308}`, []state.Op{state.Increment("n", 1.7976931348623157e308)}, "", true},
		{"increment NaN by", `{}`, []state.Op{{Type: state.OpIncrement, Path: "n", By: math.NaN()}}, "", true},
		{"increment infinite by", `{}`, []state.Op{{Type: state.OpIncrement, Path: "n", By: math.Inf(1)}}, "", true},
		{"increment with value", `{}`, []state.Op{{Type: state.OpIncrement, Path: "n", Value: 1}}, "", true},
		{"decrement missing", `{}`, []state.Op{state.Decrement("n", 2)}, `{"n":-2}`, false},
		{"decrement default by", `{"n":5}`, []state.Op{{Type: state.OpDecrement, Path: "n"}}, `{"n":4}`, false},
		{"decrement string", `{"n":"x"}`, []state.Op{state.Decrement("n", 1)}, "", true},
		{"increment array element", `{"l":[1,2]}`, []state.Op{state.Increment("l.1", 1)}, `{"l":[1,3]}`, false},

		// append
		{"append to missing", "", []state.Op{state.Append("l", 1)}, `{"l":[1]}`, false},
		{"append to missing root", "", []state.Op{state.Append("", "a")}, `["a"]`, false},
		{"append to array", `{"l":[1]}`, []state.Op{state.Append("l", 2)}, `{"l":[1,2]}`, false},
		{"append array as element", `{"l":[1]}`, []state.Op{state.Append("l", []any{2, 3})}, `{"l":[1,[2,3]]}`, false},
		{"append to null", `{"l":null}`, []state.Op{state.Append("l", 1)}, `{"l":[1]}`, false},
		{"append string to string", `{"s":"ab"}`, []state.Op{state.Append("s", "cd")}, `{"s":"abcd"}`, false},
		{"append number to string", `{"s":"ab"}`, []state.Op{state.Append("s", 1)}, "", true},
		{"append to number", `{"n":1}`, []state.Op{state.Append("n", 1)}, "", true},
		{"append to object", `{"o":{}}`, []state.Op{state.Append("o", 1)}, "", true},
		{"append to bool", `{"b":false}`, []state.Op{state.Append("b", 1)}, "", true},

		// remove
		{"remove field", `{"a":1,"b":2}`, []state.Op{state.Remove("a", nil)}, `{"b":2}`, false},
		{"remove missing field", `{"a":1}`, []state.Op{state.Remove("x.y.z", nil)}, `{"a":1}`, false},
		{"remove on missing key", "", []state.Op{state.Remove("a", nil)}, `null`, false},
		{"remove root", `{"a":1}`, []state.Op{state.Remove("", nil)}, `null`, false},
		{"remove null field", `{"a":null}`, []state.Op{state.Remove("a", nil)}, `{}`, false},
		{"remove array element", `{"l":[1,2,3]}`, []state.Op{state.Remove("l.1", nil)}, `{"l":[1,3]}`, false},
		{"remove index out of range", `{"l":[1]}`, []state.Op{state.Remove("l.5", nil)}, `{"l":[1]}`, false},
		{"remove by value", `{"l":[1,2,1,{"a":1}]}`, []state.Op{state.Remove("l", 1)}, `{"l":[2,{"a":1}]}`, false},
		{"remove object by value", `{"l":[1,{"a":1}]}`, []state.Op{state.Remove("l", map[string]any{"a": 1})}, `{"l":[1]}`, false},
		{"remove by value int vs float", `{"l":[3]}`, []state.Op{state.Remove("l", int64(3))}, `{"l":[]}`, false},
		{"remove by value on missing", `{}`, []state.Op{state.Remove("l", 1)}, `{}`, false},
		{"remove by value on string", `{"l":"abc"}`, []state.Op{state.Remove("l", "a")}, "", true},
		{"remove through number", `{"a":1}`, []state.Op{state.Remove("a.b", nil)}, "", true},
		{"remove non-index on array", `{"l":[1]}`, []state.Op{state.Remove("l.x", nil)}, "", true},

		// merge
		{"merge into missing", "", []state.Op{state.Merge("", map[string]any{"a": 1})}, `{"a":1}`, false},
		{"merge shallow", `{"a":{"x":1},"b":2}`, []state.Op{state.Merge("", map[string]any{"a": map[string]any{"y": 2}, "c": 3})}, `{"a":{"y":2},"b":2,"c":3}`, false},
		{"merge at path", `{"p":{"a":1}}`, []state.Op{state.Merge("p", map[string]any{"b": 2})}, `{"p":{"a":1,"b":2}}`, false},
		{"merge non-object value", `{}`, []state.Op{state.Merge("", []any{1})}, "", true},
		{"merge null value", `{}`, []state.Op{state.Merge("", nil)}, "", true},
		{"merge into array", `[1]`, []state.Op{state.Merge("", map[string]any{"a": 1})}, "", true},
		{"merge into string", `{"s":"x"}`, []state.Op{state.Merge("s", map[string]any{"a": 1})}, "", true},

		// sequences and shape errors
		{"ops in order", "", []state.Op{state.Set("n", 1), state.Increment("n", 2), state.Append("log", "x"), state.Remove("gone", nil)}, `{"log":["x"],"n":3}`, false},
		{"later op failing fails all", `{"n":1}`, []state.Op{state.Increment("n", 1), state.Append("n", 2)}, "", true},
		{"no aliasing between ops", "", []state.Op{state.Set("a", map[string]any{"x": 1}), state.Set("b", map[string]any{"x": 1}), state.Increment("a.x", 1)}, `{"a":{"x":2},"b":{"x":1}}`, false},
		{"empty ops", `{}`, nil, "", true},
		{"unknown type", `{}`, []state.Op{{Type: "multiply", Path: "a"}}, "", true},
		{"missing type", `{}`, []state.Op{{Path: "a"}}, "", true},
		{"empty path segment", `{}`, []state.Op{state.Set("a..b", 1)}, "", true},
		{"trailing dot", `{}`, []state.Op{state.Set("a.", 1)}, "", true},
		{"leading dot", `{}`, []state.Op{state.Set(".a", 1)}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := mustJSON(t, tt.value)
			before := toJSON(t, in)
			got, err := state.Apply(in, tt.ops)
			if after := toJSON(t, in); after != before {
				t.Fatalf("Apply modified its input: %s -> %s", before, after)
			}
			if tt.err {
				if err == nil {
					t.Fatalf("Apply = %s, want an error", toJSON(t, got))
				}
				if !errors.Is(err, wire.ErrInvalidPayload) {
					t.Fatalf("error %v is not invalid_payload", err)
				}
				if !errors.Is(err, state.ErrInvalidOp) && !errors.Is(err, state.ErrInvalidValue) {
					t.Fatalf("error %v wraps neither ErrInvalidOp nor ErrInvalidValue", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if g, w := toJSON(t, got), toJSON(t, mustJSON(t, tt.want)); g != w {
				t.Fatalf("Apply = %s, want %s", g, w)
			}
		})
	}
}

func TestApplyLimits(t *testing.T) {
	t.Parallel()
	many := make([]state.Op, state.MaxOps+1)
	for i := range many {
		many[i] = state.Increment("n", 1)
	}
	if _, err := state.Apply(nil, many); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("too many ops: %v", err)
	}
	deep := "a"
	for range state.MaxPathDepth {
		deep += ".a"
	}
	if _, err := state.Apply(nil, []state.Op{state.Set(deep, 1)}); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("too deep path: %v", err)
	}
	if got, err := state.Apply(nil, many[:state.MaxOps]); err != nil || got.(map[string]any)["n"] != int64(state.MaxOps) {
		t.Fatalf("MaxOps ops = %v, %v", got, err)
	}
}

// exactJSON decodes s keeping its numbers as json.Number, which Apply reads
// exactly ("" is a missing key).
func exactJSON(t testing.TB, s string) any {
	t.Helper()
	if s == "" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("bad test JSON %q: %v", s, err)
	}
	return v
}

// TestApplyNumbers: numbers stay exact through every op; integer
// increments are exact and refuse an overflow; a float on either side makes
// a float, and a result reads as its JSON does (integral floats as
// integers).
func TestApplyNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string // JSON, numbers exact; "" is a missing key
		ops   []state.Op
		want  string // typed; "" for an overflow error
	}{
		{"2^53+1 plus 1", `9007199254740993`, []state.Op{state.Increment("", 1)}, `9007199254740994`},
		{"default by is the integer 1", `{"n":9007199254740993}`, []state.Op{{Type: state.OpIncrement, Path: "n"}}, `{"n":9007199254740994}`},
		{"missing plus int", ``, []state.Op{state.Increment("n", int64(1<<53+1))}, `{"n":9007199254740993}`},
		{"missing plus float", ``, []state.Op{state.Increment("n", 0.5)}, `{"n":0.5f}`},
		{"max int64 plus 1", `9223372036854775807`, []state.Op{state.Increment("", 1)}, `9223372036854775808`},
		{"max int64 to max uint64", `9223372036854775807`, []state.Op{state.Increment("", uint64(math.MaxInt64)+1)}, `18446744073709551615`},
		{"max uint64 overflow", `18446744073709551615`, []state.Op{state.Increment("", 1)}, ``},
		{"max uint64 minus 1", `18446744073709551615`, []state.Op{state.Decrement("", 1)}, `18446744073709551614`},
		{"min int64 minus 1", `-9223372036854775808`, []state.Op{state.Decrement("", 1)}, ``},
		{"min int64 plus min int64", `-9223372036854775808`, []state.Op{state.Increment("", int64(math.MinInt64))}, ``},
		{"decrement by min int64", `0`, []state.Op{state.Decrement("", int64(math.MinInt64))}, `9223372036854775808`},
		{"decrement by max uint64", `0`, []state.Op{state.Decrement("", uint64(math.MaxUint64))}, ``},
		{"negative", `-12345678901234567`, []state.Op{state.Increment("", -3)}, `-12345678901234570`},
		{"negative to positive", `-1`, []state.Op{state.Increment("", uint64(math.MaxUint64))}, `18446744073709551614`},
		{"small int types", `{"n":1}`, []state.Op{state.Increment("n", int8(2)), state.Increment("n", uint16(3)), state.Decrement("n", int32(1))}, `{"n":5}`},
		{"json.Number by", `1`, []state.Op{{Type: state.OpIncrement, By: json.Number("12345678901234567")}}, `12345678901234568`},
		{"named int by", `1`, []state.Op{state.Increment("", time.Duration(2))}, `3`},
		{"float plus int", `1.5`, []state.Op{state.Increment("", 1)}, `2.5f`},
		{"int plus float", `1`, []state.Op{state.Increment("", 0.25)}, `1.25f`},
		{"floats to an integral float", `0.5`, []state.Op{state.Increment("", 0.5)}, `1`},
		{"float32 by", `0`, []state.Op{state.Increment("", float32(0.1))}, `0.1f`},
		{"float overflow", `1.7976931348623157e308`, []state.Op{state.Increment("", 1.7976931348623157e308)}, ``},
		{"set keeps digits", `{}`, []state.Op{state.Set("a", []any{uint64(math.MaxUint64), int64(math.MinInt64), json.Number("9007199254740993")})},
			`{"a":[18446744073709551615,-9223372036854775808,9007199254740993]}`},
		{"append keeps digits", `[9007199254740993]`, []state.Op{state.Append("", int64(1<<53+3))}, `[9007199254740993,9007199254740995]`},
		{"merge keeps digits", `{"a":1}`, []state.Op{state.Merge("", map[string]any{"b": uint64(1 << 63)})}, `{"a":1,"b":9223372036854775808}`},
		{"remove by exact value", `[9007199254740992,9007199254740993]`, []state.Op{state.Remove("", int64(1<<53+1))}, `[9007199254740992]`},
		{"remove integer by float", `[3,4]`, []state.Op{state.Remove("", 3.0)}, `[4]`},
		{"remove float by integer", `[3.0,4.5]`, []state.Op{state.Remove("", 3)}, `[4.5f]`},
		{"remove uint64", `[18446744073709551615,1]`, []state.Op{state.Remove("", uint64(math.MaxUint64))}, `[1]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := state.Apply(exactJSON(t, tt.value), tt.ops)
			if tt.want == "" {
				if !errors.Is(err, wire.ErrInvalidPayload) || !errors.Is(err, state.ErrInvalidOp) {
					t.Fatalf("Apply = %s, %v; want invalid_payload wrapping ErrInvalidOp", typed(got), err)
				}
				if !strings.Contains(err.Error(), "overflows") {
					t.Fatalf("error %q does not say it overflows", err)
				}
				return
			}
			if err != nil || typed(got) != tt.want {
				t.Fatalf("Apply = %s, %v; want %s", typed(got), err, tt.want)
			}
		})
	}
}

// TestOpUnmarshalJSON: ops decoded from JSON keep their numbers exact.
func TestOpUnmarshalJSON(t *testing.T) {
	t.Parallel()
	var ops []state.Op
	err := json.Unmarshal([]byte(`[{"type":"increment","path":"n","by":9007199254740993},`+
		`{"type":"set","path":"l","value":[18446744073709551615,{"x":-9223372036854775808}]},{"type":"increment","by":0.5}]`), &ops)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 3 || typed(ops[0].By) != "9007199254740993" || typed(ops[1].Value) != `[18446744073709551615,{"x":-9223372036854775808}]` ||
		typed(ops[2].By) != "0.5f" || ops[1].By != nil {
		t.Fatalf("ops = %+v", ops)
	}
	if err := json.Unmarshal([]byte(`{"type":"set","value":1e400}`), new(state.Op)); err == nil {
		t.Fatal("a number past float64's range decoded")
	}
}
