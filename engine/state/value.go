package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"strconv"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Numbers are exact. encoding/json decodes every number into a float64,
// which rounds an integer past 2^53 (an id 12345678901234567 would read
// back as 12345678901234568). The store decodes a number written without
// fraction or exponent as an int64, or a uint64 above int64's range, and
// any other number as a float64: the types a msgpack caller's numbers
// decode to, and the rule of agent.UnmarshalJSONExact.

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

// maxValueDepth bounds how deep arrays and objects nest in a stored value:
// encoding/json decodes at most 10000 levels, and an answer carries a value
// up to 3 levels down (a state::list page, {"items":[{"value":…}]}). An
// update could nest a value deeper (a set at a path), which was stored and
// then read back as a string, the way bytes that are not JSON read.
const maxValueDepth = 10000 - 3

// jsonDepth is how deep arrays and objects nest in b, valid JSON.
func jsonDepth(b []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ']', '}':
			depth--
		}
	}
	return deepest
}

// decodeValue decodes a stored value, numbers exact. Bytes that are not
// JSON (written by a foreign client with `nats kv put`) read as a string,
// so a read never fails on content.
func decodeValue(b []byte) any {
	v, ok := decodeJSON(b)
	if !ok {
		return string(b)
	}
	return v
}

// decodeJSON decodes b, one JSON value, numbers exact. ok is false when b
// is not JSON or holds a number beyond float64's range (json.Unmarshal
// refuses those too).
func decodeJSON(b []byte) (v any, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false // more after the value
	}
	v, err := exactNumbers(v)
	return v, err == nil
}

// exactNumbers replaces, in place, every json.Number of v (decoded with
// UseNumber) by its exact value, and returns v.
func exactNumbers(v any) (any, error) {
	v, err := wire.ExactNumbers(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidValue, err)
	}
	return v, nil
}

// exactNumber is n as an int64, a uint64 above int64's range, or a
// float64; a number beyond float64's range is an [ErrInvalidValue].
func exactNumber(n json.Number) (any, error) {
	v, err := wire.ExactNumber(n)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidValue, err)
	}
	return v, nil
}

// normalize returns a deep copy of v in the decoded-JSON shape:
// map[string]any, []any, int64, uint64 (above int64's range only),
// float64, string, bool, nil. Go integers stay exact; other Go values
// (structs, typed maps and slices) go through encoding/json. Non-finite
// numbers and values with no JSON encoding fail with [ErrInvalidValue].
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
		// The float64 nearest the float32's shortest decimal form, which
		// is what its JSON encoding says (0.1, not 0.10000000149011612).
		f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
		return finite(f)
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint:
		return uintValue(uint64(x)), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		return uintValue(x), nil
	case json.Number:
		return exactNumber(x)
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
	out, ok := decodeJSON(b)
	if !ok {
		return nil, fmt.Errorf("%w: %T encodes as %.64q", ErrInvalidValue, v, b)
	}
	return out, nil
}

// uintValue is u in the decoded shape: an int64 when it fits.
func uintValue(u uint64) any {
	if u <= math.MaxInt64 {
		return int64(u)
	}
	return u
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

// asRead rewrites, in place, the integral float64 numbers of v that its
// JSON encoding writes as integers (encoding/json writes 2.0 as "2") into
// the int64 or uint64 they read back as, and returns v. A value computed
// in memory (an update's result) then equals the value a read returns.
// v must be a decoded-shape value owned by the caller.
func asRead(v any) any {
	switch x := v.(type) {
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) {
			return v
		}
		if math.Abs(x) < maxSafeInt {
			return int64(x)
		}
		// Past 2^53 the JSON text is the float's shortest digits padded
		// with zeros (2^63 is "9223372036854776000"): the integer read
		// back is that text's, not the float's exact value.
		if n, err := exactNumber(json.Number(strconv.FormatFloat(x, 'f', -1, 64))); err == nil {
			return n
		}
	case map[string]any:
		for k, e := range x {
			switch e.(type) {
			case float64, map[string]any, []any:
				x[k] = asRead(e)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = asRead(e)
		}
	}
	return v
}

// isNumber reports whether v, in the decoded shape, is a number.
func isNumber(v any) bool {
	switch v.(type) {
	case int64, uint64, float64:
		return true
	}
	return false
}

// setBig sets z to the integer n (an int64 or a uint64).
func setBig(z *big.Int, n any) *big.Int {
	if u, ok := n.(uint64); ok {
		return z.SetUint64(u)
	}
	return z.SetInt64(n.(int64))
}

// toFloat64 is the number n (in the decoded shape) as a float64.
func toFloat64(n any) float64 {
	switch x := n.(type) {
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	}
	return n.(float64)
}

// Integers a value holds exactly: int64, then uint64.
const (
	minInteger = "-9223372036854775808"
	maxInteger = "18446744073709551615"
)

// add returns a+b, or a-b when sub, for numbers in the decoded shape. Two
// integers give their exact sum, an int64 (a uint64 above int64's range),
// and a sum beyond both is an [ErrInvalidOp]; with a float64 the sum is a
// float64, and an infinite one an [ErrInvalidOp].
func add(a, b any, sub bool) (any, error) {
	_, af := a.(float64)
	_, bf := b.(float64)
	if af || bf {
		x, y := toFloat64(a), toFloat64(b)
		r := x + y
		if sub {
			r = x - y
		}
		if math.IsInf(r, 0) || math.IsNaN(r) {
			return nil, fmt.Errorf("%w: the result is beyond float64's range", ErrInvalidOp)
		}
		return r, nil
	}
	var x, y big.Int
	setBig(&x, a)
	setBig(&y, b)
	if sub {
		x.Sub(&x, &y)
	} else {
		x.Add(&x, &y)
	}
	switch {
	case x.IsInt64():
		return x.Int64(), nil
	case x.IsUint64():
		return x.Uint64(), nil
	}
	return nil, fmt.Errorf("%w: the result %s is outside the exact integers %s..%s", ErrInvalidOp, x.String(), minInteger, maxInteger)
}

// equal reports whether two decoded-shape values are the same JSON value:
// numbers compare by value (3 equals 3.0), so an integer and a float read
// from different writers still match.
func equal(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, e := range x {
			f, ok := y[k]
			if !ok || !equal(e, f) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case int64, uint64, float64:
		if !isNumber(b) {
			return false
		}
		return bigFloat(a).Cmp(bigFloat(b)) == 0
	case nil, bool, string:
		return a == b
	}
	return reflect.DeepEqual(a, b)
}

// bigFloat is the number n exactly.
func bigFloat(n any) *big.Float {
	switch x := n.(type) {
	case int64:
		return new(big.Float).SetInt64(x)
	case uint64:
		return new(big.Float).SetUint64(x)
	}
	return new(big.Float).SetFloat64(n.(float64))
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
	case int64, uint64, float64, json.Number:
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	switch reflect.TypeOf(v).Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return "number"
	}
	return reflect.TypeOf(v).String()
}
