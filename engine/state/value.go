package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
)

// encodeValue is the one JSON encoding of stored values: compact, no HTML
// escaping (so `nats kv get` shows what was written), deterministic (map
// keys sorted).
func encodeValue(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil // Encode appends '\n'
}

// decodeValue decodes a stored value. Bytes that are not JSON (written by a
// foreign client with `nats kv put`) read as a string, so a read never
// fails on content.
func decodeValue(b []byte) any {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return string(b)
	}
	return v
}

// normalize returns a deep copy of v in the decoded-JSON shape:
// map[string]any, []any, float64, string, bool, nil. Go numbers become
// float64; other Go values (structs, typed maps and slices) go through
// encoding/json. Non-finite numbers and values with no JSON encoding fail
// with [ErrInvalidValue].
func normalize(v any) (any, error) {
	return normalizeDepth(v, 0)
}

// maxDepth bounds the nesting of values, like encoding/json's decoder.
const maxDepth = 10000

func normalizeDepth(v any, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", ErrInvalidValue, maxDepth)
	}
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case float64:
		return finite(x)
	case float32:
		return finite(float64(x))
	case int:
		return float64(x), nil
	case int8:
		return float64(x), nil
	case int16:
		return float64(x), nil
	case int32:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case uint:
		return float64(x), nil
	case uint8:
		return float64(x), nil
	case uint16:
		return float64(x), nil
	case uint32:
		return float64(x), nil
	case uint64:
		return float64(x), nil
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("%w: number %q: %v", ErrInvalidValue, x, err)
		}
		return finite(f)
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			c, err := normalizeDepth(e, depth+1)
			if err != nil {
				return nil, err
			}
			m[k] = c
		}
		return m, nil
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			c, err := normalizeDepth(e, depth+1)
			if err != nil {
				return nil, err
			}
			s[i] = c
		}
		return s, nil
	}
	b, err := encodeValue(v)
	if err != nil {
		return nil, err
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	return out, nil
}

func finite(f float64) (any, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%w: %v is not a JSON number", ErrInvalidValue, f)
	}
	return f, nil
}

// maxSafeInt is 2^53: every integer of smaller magnitude is exact in a
// float64.
const maxSafeInt = 1 << 53

// compactNumbers rewrites, in place, integral float64 values of v as int64
// and returns v. A msgpack reply then carries 3 as one byte instead of a
// nine-byte float, as JSON would carry it as "3". v must be a decoded-JSON
// value owned by the caller.
func compactNumbers(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < maxSafeInt {
			return int64(x)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = compactNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = compactNumbers(e)
		}
	}
	return v
}

// typeName names the JSON type of a decoded value, for error messages.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case float64:
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return reflect.TypeOf(v).String()
}
