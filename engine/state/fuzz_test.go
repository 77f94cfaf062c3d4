package state

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

// FuzzApply: no input panics the evaluator, the input value is never
// modified, a failed update is a coded invalid_payload, and a result is
// always encodable JSON.
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
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, doc, opsJSON string) {
		var value any
		if doc != "" {
			if json.Unmarshal([]byte(doc), &value) != nil {
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
		if _, err := encodeValue(got); err != nil {
			t.Fatalf("result does not encode: %v", err)
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
// them without panicking into a value that encodes again.
func FuzzDecodeValue(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `not json`, "", "\xff\xfe", `"x"`, `[1,`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := decodeValue(data)
		if _, err := encodeValue(v); err != nil {
			t.Fatalf("decodeValue(%q) = %v does not encode: %v", data, v, err)
		}
	})
}
