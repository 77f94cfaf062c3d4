package agent

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestArgsHash(t *testing.T) {
	t.Parallel()
	decode := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	h := func(fn string, args map[string]any) string {
		s, err := ArgsHash(fn, args)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := h("fs::write", decode(`{"path":"/a","n":1,"o":{"x":[1,2]}}`))
	if !strings.HasPrefix(base, "sha256:") || len(base) != len("sha256:")+64 {
		t.Fatalf("hash %q has the wrong form", base)
	}
	tests := []struct {
		name string
		fn   string
		args string
		same bool
	}{
		{"key order", "fs::write", `{"o":{"x":[1,2]},"n":1.0,"path":"/a"}`, true},
		{"spacing", "fs::write", ` { "path" : "/a", "n" : 1, "o" : { "x" : [ 1, 2 ] } }`, true},
		{"other function", "fs::read", `{"path":"/a","n":1,"o":{"x":[1,2]}}`, false},
		{"string vs number", "fs::write", `{"path":"/a","n":"1","o":{"x":[1,2]}}`, false},
		{"list order", "fs::write", `{"path":"/a","n":1,"o":{"x":[2,1]}}`, false},
		{"extra key", "fs::write", `{"path":"/a","n":1,"o":{"x":[1,2]},"p":null}`, false},
	}
	for _, tt := range tests {
		if got := h(tt.fn, decode(tt.args)) == base; got != tt.same {
			t.Errorf("%s: equal = %v, want %v", tt.name, got, tt.same)
		}
	}
	if h("f", nil) != h("f", map[string]any{}) {
		t.Error("nil and empty args hash differently")
	}
	if _, err := ArgsHash("f", map[string]any{"c": make(chan int)}); err == nil {
		t.Error("unencodable args hashed")
	}
}

// The hash of a call's arguments is the same however they travelled: a
// call is gated again after a crash with its arguments read back from the
// turn record, and a different hash there replaced the pending record, so
// a human's decision already written was lost. -0 was the case: it encodes
// as JSON -0, which reads back as the integer 0.
func TestArgsHashStableAcrossCodecs(t *testing.T) {
	t.Parallel()
	viaJSON := func(t *testing.T, args map[string]any) map[string]any {
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := UnmarshalJSONExact(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	viaMsgpack := func(t *testing.T, args map[string]any) map[string]any {
		b, err := msgpack.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := msgpack.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	negZero := math.Copysign(0, -1)
	for _, tt := range []struct {
		name string
		args map[string]any
	}{
		{"negative zero", map[string]any{"x": negZero}},
		{"negative zero float32", map[string]any{"x": float32(negZero)}},
		{"nested negative zero", map[string]any{"p": []any{1.5, map[string]any{"y": negZero}}}},
		{"float32", map[string]any{"x": float32(0.1), "y": float32(3.4e38)}},
		{"integral float", map[string]any{"x": 5.0, "y": 1e21}},
		{"big integers", map[string]any{"i": int64(math.MaxInt64), "u": uint64(math.MaxUint64), "n": int8(-3)}},
		{"bytes and html", map[string]any{"b": []byte("<a&b>"), "s": "<a&b>"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want, err := ArgsHash("f::g", tt.args)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name string
				args map[string]any
			}{
				{"json", viaJSON(t, tt.args)},
				{"msgpack", viaMsgpack(t, tt.args)},
				{"msgpack then json", viaJSON(t, viaMsgpack(t, tt.args))},
				{"json twice", viaJSON(t, viaJSON(t, tt.args))},
			} {
				if got, err := ArgsHash("f::g", c.args); err != nil || got != want {
					t.Errorf("via %s: %s, %v; want %s", c.name, got, err, want)
				}
			}
		})
	}
}
