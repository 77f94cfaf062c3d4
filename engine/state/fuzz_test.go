package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine/wire"
)

// FuzzApply: no input panics the evaluator, the input value is never
// modified, a failed update is a coded invalid_payload, and a result is
// always encodable JSON that reads back as exactly the result (numbers
// included: same value, same Go type).
func FuzzApply(f *testing.F) {
	seeds := [][2]string{
		{`{"a":1}`, `[{"type":"increment","path":"a","by":2}]`},
		{``, `[{"type":"set","path":"a.b.c","value":[1,2]}]`},
		{`{"l":[1,2,3]}`, `[{"type":"remove","path":"l.1"},{"type":"append","path":"l","value":{"x":1}}]`},
		{`{"l":[1,2,1]}`, `[{"type":"remove","path":"l","value":1}]`},
		{`{"o":{"a":1}}`, `[{"type":"merge","path":"o","value":{"b":2}},{"type":"decrement","path":"o.a"}]`},
		{`"s"`, `[{"type":"append","value":"t"},{"type":"increment"}]`},
		{`[[[]]]`, `[{"type":"set","path":"0.0.0","value":1}]`},
		{`{"a":{"b":null}}`, `[{"type":"set","path":"a.b.c.d","value":1},{"type":"remove","path":"a.x.y"}]`},
		{`{"n":1e308}`, `[{"type":"increment","path":"n","by":1e308}]`},
		{`{}`, `[{"type":"set","path":"a..b"}]`},
		{`{"id":9007199254740993}`, `[{"type":"increment","path":"id"},{"type":"decrement","path":"id","by":0.5}]`},
		{`18446744073709551615`, `[{"type":"increment"}]`},
		{`-9223372036854775808`, `[{"type":"decrement","by":-18446744073709551615}]`},
		{`[9223372036854775807,1.5]`, `[{"type":"increment","path":"0","by":9223372036854775807},{"type":"remove","value":1.5}]`},
		{`{"f":0.5}`, `[{"type":"increment","path":"f","by":0.5},{"type":"set","path":"g","value":1e21}]`},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, doc, opsJSON string) {
		var value any
		if doc != "" {
			var ok bool
			if value, ok = decodeJSON([]byte(doc)); !ok {
				return
			}
		}
		var ops []Op
		if json.Unmarshal([]byte(opsJSON), &ops) != nil {
			return
		}
		before, err := encodeValue(value)
		if err != nil {
			return
		}
		got, err := Apply(value, ops)
		after, _ := encodeValue(value)
		if string(before) != string(after) {
			t.Fatalf("Apply modified its input: %s -> %s", before, after)
		}
		if err != nil {
			if !errors.Is(err, wire.ErrInvalidPayload) {
				t.Fatalf("error %v is not invalid_payload", err)
			}
			if got != nil {
				t.Fatalf("failed Apply returned a value: %v", got)
			}
			return
		}
		enc, err := encodeValue(got)
		if err != nil {
			t.Fatalf("result does not encode: %v", err)
		}
		if back := decodeValue(enc); !reflect.DeepEqual(back, got) {
			t.Fatalf("result %#v reads back as %#v", got, back)
		}
		// Applying to the result again must not be affected by aliasing
		// with the first result.
		snap, _ := encodeValue(got)
		_, _ = Apply(got, ops)
		if again, _ := encodeValue(got); string(again) != string(snap) {
			t.Fatalf("second Apply modified the first result")
		}
	})
}

// FuzzParseOps: the state::update request parser never panics, and what it
// accepts the evaluator accepts as well formed.
func FuzzParseOps(f *testing.F) {
	for _, s := range []string{
		`[{"type":"set","path":"a","value":1}]`,
		`[{"type":"increment","by":"x"}]`,
		`[{"type":"increment","by":1e400}]`,
		`[{"type":"remove","path":null,"value":null}]`,
		`[1, "x", null]`,
		`{"type":"set"}`,
		`[]`,
		`null`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		var v any
		if json.Unmarshal([]byte(data), &v) != nil {
			return
		}
		ops, err := parseOps(v)
		if err != nil {
			if !errors.Is(err, wire.ErrInvalidPayload) {
				t.Fatalf("error %v is not invalid_payload", err)
			}
			return
		}
		if err := validateOps(ops); err != nil {
			t.Fatalf("parseOps accepted ops validateOps refuses: %v", err)
		}
		_, _ = Apply(nil, ops)
	})
}

// FuzzDecodeValue: whatever bytes a foreign client stored, a read decodes
// them without panicking into a value that encodes again and reads back
// from that encoding exactly as asRead says (an integer keeps every digit
// and its type; only an integral float such as 2.0 comes back an
// integer). A JSON integer literal reads as an integer when it fits in
// int64 or uint64.
func FuzzDecodeValue(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `not json`, "", "\xff\xfe", `"x"`, `[1,`,
		`9007199254740993`, `-9223372036854775808`, `18446744073709551615`, `18446744073709551616`,
		`[1.0,2e3,-0,1e400]`, `{"id":12345678901234567,"f":0.1}`, `1e-400`,
		`{"a":"[\"{","b":[["\\"],{}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := decodeValue(data)
		enc, err := encodeValue(v)
		if err != nil {
			t.Fatalf("decodeValue(%q) = %v does not encode: %v", data, v, err)
		}
		if d, want := jsonDepth(enc), treeDepth(v); d != want {
			t.Fatalf("jsonDepth(%s) = %d, want %d", enc, d, want)
		}
		lit := string(bytes.TrimSpace(data))
		if utf8.Valid(data) { // encoding/json writes invalid UTF-8 as U+FFFD
			want := fmt.Sprintf("%#v", v)
			if back := decodeValue(enc); !reflect.DeepEqual(back, asRead(v)) {
				t.Fatalf("decodeValue(%q) = %s, whose encoding %s reads back as %#v", data, want, enc, back)
			}
		}
		if !json.Valid(data) { // "00" parses as an integer but is not JSON
			return
		}
		if i, err := strconv.ParseInt(lit, 10, 64); err == nil && v != i {
			t.Fatalf("integer %s reads as %#v", lit, v)
		}
		if u, err := strconv.ParseUint(lit, 10, 64); err == nil && u > math.MaxInt64 && v != u {
			t.Fatalf("integer %s reads as %#v", lit, v)
		}
	})
}

// treeDepth is how deep arrays and objects nest in v, decoded JSON.
func treeDepth(v any) int {
	d := 0
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			d = max(d, treeDepth(e))
		}
		return d + 1
	case map[string]any:
		for _, e := range x {
			d = max(d, treeDepth(e))
		}
		return d + 1
	}
	return 0
}

// FuzzAdd: integer increments are exact, against math/big: the sum when
// it is an int64 or a uint64, an ErrInvalidOp otherwise.
func FuzzAdd(f *testing.F) {
	f.Add(uint64(1<<53+1), uint64(1), false, false, false)
	f.Add(uint64(math.MaxInt64), uint64(1), false, false, false)
	f.Add(uint64(math.MaxUint64), uint64(1), false, false, false)
	f.Add(uint64(1<<63), uint64(1), true, false, true)
	f.Add(uint64(0), uint64(math.MaxUint64), false, false, true)
	f.Fuzz(func(t *testing.T, x, y uint64, xSigned, ySigned, sub bool) {
		// A signed operand is x as an int64; an unsigned one is x in the
		// decoded shape (an int64 when it fits).
		operand := func(u uint64, signed bool) (any, *big.Int) {
			if signed {
				return int64(u), big.NewInt(int64(u))
			}
			return uintValue(u), new(big.Int).SetUint64(u)
		}
		a, ba := operand(x, xSigned)
		b, bb := operand(y, ySigned)
		want := new(big.Int).Add(ba, bb)
		if sub {
			want.Sub(ba, bb)
		}
		got, err := add(a, b, sub)
		switch {
		case want.IsInt64():
			if err != nil || got != want.Int64() {
				t.Fatalf("add(%v, %v, %v) = %#v, %v; want int64 %s", a, b, sub, got, err, want)
			}
		case want.IsUint64():
			if err != nil || got != want.Uint64() {
				t.Fatalf("add(%v, %v, %v) = %#v, %v; want uint64 %s", a, b, sub, got, err, want)
			}
		default:
			if !errors.Is(err, ErrInvalidOp) {
				t.Fatalf("add(%v, %v, %v) = %#v, %v; want an overflow (%s)", a, b, sub, got, err, want)
			}
		}
	})
}
