package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// DecodeArguments decodes a function call's JSON arguments: an object, or
// null for none (nil). Numbers are kept exact ([UnmarshalJSONExact]).
func DecodeArguments(data []byte) (map[string]any, error) {
	var m map[string]any
	if err := UnmarshalJSONExact(data, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// UnmarshalJSONExact is [json.Unmarshal] into a map or an interface value
// (v is a *map[string]any, a *[]any or a *any), except that numbers are
// exact: an integer becomes an int64, or a uint64 above int64's range,
// and any other number a float64 — the types a msgpack caller's numbers
// decode to. json.Unmarshal makes every number a float64, which rounds an
// integer past 2^53 (an int64 id such as 1234567890123456789 becomes
// 1234567890123456800) on its way from a model to a function.
func UnmarshalJSONExact(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return syntaxError(data, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return syntaxError(data, fmt.Errorf("invalid data after the top-level JSON value at offset %d", dec.InputOffset()))
	}
	var err error
	switch p := v.(type) {
	case *map[string]any:
		err = exactMap(*p)
	case *[]any:
		err = exactSlice(*p)
	case *any:
		*p, err = exactNumbers(*p)
	default:
		return fmt.Errorf("agent: UnmarshalJSONExact into %T", v)
	}
	return err
}

// syntaxError is json.Unmarshal's error for data that is not JSON (the
// decoder words a few of them otherwise, "unexpected EOF" for "unexpected
// end of JSON input"); err when data is JSON.
func syntaxError(data []byte, err error) error {
	if serr := json.Unmarshal(data, new(any)); serr != nil {
		return serr
	}
	return err
}

// exactNumbers replaces every json.Number in v by its exact value.
func exactNumbers(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		return exactNumber(x)
	case map[string]any:
		return x, exactMap(x)
	case []any:
		return x, exactSlice(x)
	}
	return v, nil
}

func exactMap(m map[string]any) error {
	for k, e := range m {
		switch e.(type) {
		case json.Number, map[string]any, []any:
			n, err := exactNumbers(e)
			if err != nil {
				return err
			}
			m[k] = n
		}
	}
	return nil
}

func exactSlice(s []any) error {
	for i, e := range s {
		n, err := exactNumbers(e)
		if err != nil {
			return err
		}
		s[i] = n
	}
	return nil
}

// exactNumber is n as an int64, a uint64 or a float64; a number out of
// float64's range is an error, as json.Unmarshal makes it.
func exactNumber(n json.Number) (any, error) {
	s := string(n)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, nil
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return u, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("json: number %s is out of range", s)
	}
	return f, nil
}

// The types below carry a function call's arguments: their JSON forms
// decode the arguments exactly (DecodeArguments) where the default
// decoding would round large integers.

// UnmarshalJSON decodes c, its arguments exact.
func (c *Content) UnmarshalJSON(b []byte) error {
	type plain Content
	var p struct {
		plain
		Arguments json.RawMessage `json:"arguments,omitempty"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	args, err := RawArguments(p.Arguments)
	if err != nil {
		return err
	}
	*c = Content(p.plain)
	c.Arguments = args
	return nil
}

// UnmarshalJSON decodes e, its arguments exact.
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	var p struct {
		plain
		Args json.RawMessage `json:"args,omitempty"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	args, err := RawArguments(p.Args)
	if err != nil {
		return err
	}
	*e = Event(p.plain)
	e.Args = args
	return nil
}

// UnmarshalJSON decodes r, its arguments exact.
func (r *ApprovalRecord) UnmarshalJSON(b []byte) error {
	type plain ApprovalRecord
	var p struct {
		plain
		Args json.RawMessage `json:"args"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	args, err := RawArguments(p.Args)
	if err != nil {
		return err
	}
	*r = ApprovalRecord(p.plain)
	r.Args = args
	return nil
}

// UnmarshalJSON decodes a, its arguments exact.
func (a *PendingApproval) UnmarshalJSON(b []byte) error {
	type plain PendingApproval
	var p struct {
		plain
		Args json.RawMessage `json:"args,omitempty"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	args, err := RawArguments(p.Args)
	if err != nil {
		return err
	}
	*a = PendingApproval(p.plain)
	a.Args = args
	return nil
}

// RawArguments decodes arguments a struct's decoding kept raw (the way a
// type's UnmarshalJSON keeps its arguments exact): absent or null is nil,
// anything but an object an error (as decoding into the map would have
// been).
func RawArguments(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	return DecodeArguments(raw)
}
