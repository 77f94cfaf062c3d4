package state_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

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

func by(f float64) *float64 { return &f }

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
		{"set with by", "", []state.Op{{Type: state.OpSet, Path: "a", By: by(1)}}, "", true},

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
		{"increment NaN by", `{}`, []state.Op{{Type: state.OpIncrement, Path: "n", By: by(math.NaN())}}, "", true},
		{"increment infinite by", `{}`, []state.Op{{Type: state.OpIncrement, Path: "n", By: by(math.Inf(1))}}, "", true},
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
	if got, err := state.Apply(nil, many[:state.MaxOps]); err != nil || got.(map[string]any)["n"] != float64(state.MaxOps) {
		t.Fatalf("MaxOps ops = %v, %v", got, err)
	}
}
