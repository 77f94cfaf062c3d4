package queue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Payload is a request field holding an arbitrary value, kept as the bytes
// it arrived in (JSON or msgpack) so that it can be re-encoded for another
// codec without the detour through float64 that decoding JSON numbers into
// `any` would take: 3 stays an integer.
type Payload struct {
	raw   []byte
	codec wire.Codec
}

// UnmarshalJSON keeps the JSON bytes.
func (p *Payload) UnmarshalJSON(b []byte) error {
	p.raw, p.codec = bytes.Clone(b), wire.JSON
	return nil
}

// UnmarshalMsgpack keeps the msgpack bytes.
func (p *Payload) UnmarshalMsgpack(b []byte) error {
	p.raw, p.codec = bytes.Clone(b), wire.Msgpack
	return nil
}

// IsNull reports whether the value is missing or null.
func (p Payload) IsNull() bool {
	t := bytes.TrimSpace(p.raw)
	return len(t) == 0 || p.codec == wire.JSON && string(t) == "null" || p.codec == wire.Msgpack && len(t) == 1 && t[0] == 0xc0
}

// Encode returns the value in codec; a missing or null value is the empty
// object. Equal codecs pass the bytes through.
func (p Payload) Encode(codec wire.Codec) ([]byte, error) {
	if p.IsNull() {
		return codec.Marshal(struct{}{})
	}
	if p.codec.ContentType() == codec.ContentType() {
		return p.raw, nil
	}
	v, err := p.Value()
	if err != nil {
		return nil, err
	}
	b, err := codec.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("re-encode as %s: %w", codec.ContentType(), err)
	}
	return b, nil
}

// Value decodes the value: JSON integers become int64 (uint64 above
// MaxInt64), other JSON numbers float64; msgpack maps become
// map[string]any.
func (p Payload) Value() (any, error) {
	if p.IsNull() {
		return nil, nil
	}
	if p.codec.ContentType() != wire.ContentJSON {
		var v any
		if err := p.codec.Unmarshal(p.raw, &v); err != nil {
			return nil, err
		}
		return v, nil
	}
	dec := json.NewDecoder(bytes.NewReader(p.raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("json decode: %w", err)
	}
	return numbers(v), nil
}

// numbers replaces json.Number values by int64, uint64 or float64.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return u
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil || math.IsInf(f, 0) {
			return string(x) // out of float64 range: keep the digits
		}
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}
