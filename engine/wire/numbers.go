package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// ErrNumberRange is a JSON number beyond float64's range.
var ErrNumberRange = errors.New("number out of range")

// ExactNumber is n as an int64, a uint64 when above int64's range, or
// else a float64: the types a msgpack caller's numbers decode to. A
// number beyond float64's range is an error wrapping [ErrNumberRange],
// as json.Unmarshal refuses it.
func ExactNumber(n json.Number) (any, error) {
	s := string(n)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, nil
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return u, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("json: %w: %s", ErrNumberRange, s)
	}
	return f, nil
}

// ExactNumbers replaces every json.Number in v (a value decoded with
// json.Decoder.UseNumber: maps, slices, numbers) by [ExactNumber]'s value,
// in place in maps and slices, and returns the result. json.Unmarshal
// would have made every number a float64, which rounds an integer past
// 2^53 (an id such as 1234567890123456789 becomes …800).
func ExactNumbers(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		return ExactNumber(x)
	case map[string]any:
		for k, e := range x {
			switch e.(type) {
			case json.Number, map[string]any, []any:
				n, err := ExactNumbers(e)
				if err != nil {
					return nil, err
				}
				x[k] = n
			}
		}
	case []any:
		for i, e := range x {
			n, err := ExactNumbers(e)
			if err != nil {
				return nil, err
			}
			x[i] = n
		}
	}
	return v, nil
}
