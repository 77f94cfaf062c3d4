package agent

import (
	"github.com/vmihailenco/msgpack/v5"
)

// ModelEvent (every frame of a provider stream) and Usage (in every
// assistant message and usage event) encode and decode themselves too, as
// Message does: the reflective codec allocated for each omitempty field of
// each event (2.4 % of a scripted turn's allocations in the bench).

var (
	_ msgpack.CustomEncoder = ModelEvent{}
	_ msgpack.CustomDecoder = (*ModelEvent)(nil)
	_ msgpack.CustomEncoder = Usage{}
	_ msgpack.CustomDecoder = (*Usage)(nil)
)

// EncodeMsgpack writes e as a map with the json tags' keys and omitempty.
func (e ModelEvent) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 1 // type
	for _, set := range [...]bool{e.Index != 0, e.Delta != "", e.ID != "", e.FunctionID != "", e.Content != nil, e.Usage != nil,
		e.StopReason != "", e.Message != nil, e.Kind != "", e.Error != "", e.RetryAfterMs != 0} {
		if set {
			n++
		}
	}
	w := mpWriter{enc: enc}
	w.err = enc.EncodeMapLen(n)
	w.str("type", string(e.Type))
	if e.Index != 0 {
		w.int("index", int64(e.Index))
	}
	w.optStr("delta", e.Delta)
	w.optStr("id", e.ID)
	w.optStr("function_id", e.FunctionID)
	if e.Content != nil {
		w.custom("content", e.Content)
	}
	if e.Usage != nil {
		w.custom("usage", e.Usage)
	}
	w.optStr("stop_reason", string(e.StopReason))
	if e.Message != nil {
		w.custom("message", e.Message)
	}
	w.optStr("kind", string(e.Kind))
	w.optStr("error", e.Error)
	if e.RetryAfterMs != 0 {
		w.int("retry_after_ms", e.RetryAfterMs)
	}
	return w.err
}

// DecodeMsgpack reads a map written by any msgpack encoder.
func (e *ModelEvent) DecodeMsgpack(dec *msgpack.Decoder) error {
	*e = ModelEvent{}
	return decodeMap(dec, "model event", func(k []byte) (err error) {
		switch string(k) {
		case "type":
			var s string
			s, err = decodeKnown(dec)
			e.Type = ModelEventType(s)
		case "index":
			e.Index, err = dec.DecodeInt()
		case "delta":
			e.Delta, err = dec.DecodeString()
		case "id":
			e.ID, err = dec.DecodeString()
		case "function_id":
			e.FunctionID, err = dec.DecodeString()
		case "content":
			e.Content, err = decodePtr[Content](dec)
		case "usage":
			e.Usage, err = decodePtr[Usage](dec)
		case "stop_reason":
			var s string
			s, err = decodeKnown(dec)
			e.StopReason = StopReason(s)
		case "message":
			e.Message, err = decodePtr[Message](dec)
		case "kind":
			var s string
			s, err = decodeKnown(dec)
			e.Kind = ErrorKind(s)
		case "error":
			e.Error, err = dec.DecodeString()
		case "retry_after_ms":
			e.RetryAfterMs, err = dec.DecodeInt64()
		default:
			err = dec.Skip()
		}
		return err
	})
}

// decodePtr decodes a *T that may be nil.
func decodePtr[T any, PT interface {
	*T
	msgpack.CustomDecoder
}](dec *msgpack.Decoder) (*T, error) {
	if isNil(dec) {
		return nil, dec.DecodeNil()
	}
	v := PT(new(T))
	if err := v.DecodeMsgpack(dec); err != nil {
		return nil, err
	}
	return (*T)(v), nil
}

// EncodeMsgpack writes u as a map with the json tags' keys (cost_usd
// omitted when zero).
func (u Usage) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 4
	if u.CostUSD != 0 {
		n++
	}
	w := mpWriter{enc: enc}
	w.err = enc.EncodeMapLen(n)
	w.int("input_tokens", u.InputTokens)
	w.int("output_tokens", u.OutputTokens)
	w.int("cache_read_tokens", u.CacheReadTokens)
	w.int("cache_write_tokens", u.CacheWriteTokens)
	if u.CostUSD != 0 {
		w.key("cost_usd")
		if w.err == nil {
			w.err = enc.EncodeFloat64(u.CostUSD)
		}
	}
	return w.err
}

// DecodeMsgpack reads a map written by any msgpack encoder.
func (u *Usage) DecodeMsgpack(dec *msgpack.Decoder) error {
	*u = Usage{}
	return decodeMap(dec, "usage", func(k []byte) (err error) {
		switch string(k) {
		case "input_tokens":
			u.InputTokens, err = dec.DecodeInt64()
		case "output_tokens":
			u.OutputTokens, err = dec.DecodeInt64()
		case "cache_read_tokens":
			u.CacheReadTokens, err = dec.DecodeInt64()
		case "cache_write_tokens":
			u.CacheWriteTokens, err = dec.DecodeInt64()
		case "cost_usd":
			u.CostUSD, err = dec.DecodeFloat64()
		default:
			err = dec.Skip()
		}
		return err
	})
}
