package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/iii-on-nats/iii/engine/wire"
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
		_, err = wire.ExactNumbers(*p)
	case *[]any:
		_, err = wire.ExactNumbers(*p)
	case *any:
		*p, err = wire.ExactNumbers(*p)
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
