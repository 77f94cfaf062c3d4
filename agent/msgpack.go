package agent

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Messages travel in msgpack on every model call (the whole transcript),
// so Message and Content encode and decode themselves: the reflective
// codec's omitempty checks allocate per field and dominated the CPU of long
// sessions. The bytes are those the reflective codec writes with the json
// tags (a test keeps them equal); decoding accepts any key order and skips
// unknown keys.

var (
	_ msgpack.CustomEncoder = Message{}
	_ msgpack.CustomDecoder = (*Message)(nil)
	_ msgpack.CustomEncoder = Content{}
	_ msgpack.CustomDecoder = (*Content)(nil)
)

// EncodeMsgpack writes m as a map with the json tags' keys and omitempty.
func (m Message) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 2 // role, content
	for _, set := range [...]bool{m.Timestamp != 0, m.StopReason != "", m.Usage != nil, m.Model != "", m.Provider != "",
		m.ErrorMessage != "", m.FunctionCallID != "", m.FunctionID != "", m.Details != nil, m.IsError} {
		if set {
			n++
		}
	}
	w := mpWriter{enc: enc}
	w.err = enc.EncodeMapLen(n)
	w.str("role", string(m.Role))
	w.key("content")
	if w.err == nil {
		if m.Content == nil {
			w.err = enc.EncodeNil()
		} else if w.err = enc.EncodeArrayLen(len(m.Content)); w.err == nil {
			for i := range m.Content {
				if w.err = m.Content[i].EncodeMsgpack(enc); w.err != nil {
					break
				}
			}
		}
	}
	if m.Timestamp != 0 {
		w.int("timestamp", m.Timestamp)
	}
	w.optStr("stop_reason", string(m.StopReason))
	if m.Usage != nil {
		w.custom("usage", m.Usage)
	}
	w.optStr("model", m.Model)
	w.optStr("provider", m.Provider)
	w.optStr("error_message", m.ErrorMessage)
	w.optStr("function_call_id", m.FunctionCallID)
	w.optStr("function_id", m.FunctionID)
	if m.Details != nil {
		w.any("details", m.Details)
	}
	if m.IsError {
		w.key("is_error")
		if w.err == nil {
			w.err = enc.EncodeBool(true)
		}
	}
	return w.err
}

// DecodeMsgpack reads a map written by any msgpack encoder.
func (m *Message) DecodeMsgpack(dec *msgpack.Decoder) error {
	*m = Message{}
	return decodeMap(dec, "message", func(k []byte) (err error) {
		switch string(k) {
		case "role":
			var s string
			s, err = decodeKnown(dec)
			m.Role = Role(s)
		case "content":
			m.Content, err = decodeContents(dec)
		case "timestamp":
			m.Timestamp, err = dec.DecodeInt64()
		case "stop_reason":
			var s string
			s, err = decodeKnown(dec)
			m.StopReason = StopReason(s)
		case "usage":
			m.Usage, err = decodePtr[Usage](dec)
		case "model":
			m.Model, err = dec.DecodeString()
		case "provider":
			m.Provider, err = dec.DecodeString()
		case "error_message":
			m.ErrorMessage, err = dec.DecodeString()
		case "function_call_id":
			m.FunctionCallID, err = dec.DecodeString()
		case "function_id":
			m.FunctionID, err = dec.DecodeString()
		case "details":
			m.Details, err = dec.DecodeInterface()
		case "is_error":
			m.IsError, err = dec.DecodeBool()
		default:
			err = dec.Skip()
		}
		return err
	})
}

// EncodeMsgpack writes c as a map with the json tags' keys and omitempty.
func (c Content) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 1 // type
	for _, set := range [...]bool{c.Text != "", c.Mime != "", c.Data != "", c.ID != "", c.FunctionID != "", len(c.Arguments) > 0, c.Signature != ""} {
		if set {
			n++
		}
	}
	w := mpWriter{enc: enc}
	w.err = enc.EncodeMapLen(n)
	w.str("type", string(c.Type))
	w.optStr("text", c.Text)
	w.optStr("mime", c.Mime)
	w.optStr("data", c.Data)
	w.optStr("id", c.ID)
	w.optStr("function_id", c.FunctionID)
	if len(c.Arguments) > 0 {
		w.any("arguments", c.Arguments)
	}
	w.optStr("signature", c.Signature)
	return w.err
}

// DecodeMsgpack reads a map written by any msgpack encoder.
func (c *Content) DecodeMsgpack(dec *msgpack.Decoder) error {
	*c = Content{}
	return decodeMap(dec, "content block", func(k []byte) (err error) {
		switch string(k) {
		case "type":
			var s string
			s, err = decodeKnown(dec)
			c.Type = ContentType(s)
		case "text":
			c.Text, err = dec.DecodeString()
		case "mime":
			c.Mime, err = dec.DecodeString()
		case "data":
			c.Data, err = dec.DecodeString()
		case "id":
			c.ID, err = dec.DecodeString()
		case "function_id":
			c.FunctionID, err = dec.DecodeString()
		case "signature":
			c.Signature, err = dec.DecodeString()
		case "arguments":
			var v any
			if v, err = dec.DecodeInterface(); err != nil || v == nil {
				return err
			}
			args, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("msgpack: content block arguments are a %T, not a map", v)
			}
			c.Arguments = args
		default:
			err = dec.Skip()
		}
		return err
	})
}

func decodeContents(dec *msgpack.Decoder) ([]Content, error) {
	n, err := dec.DecodeArrayLen()
	if err != nil || n == -1 {
		return nil, err
	}
	out := make([]Content, min(n, 1024))[:0]
	for range n {
		var c Content
		if err := c.DecodeMsgpack(dec); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// DecodeMapLen is dec.DecodeMapLen, except that an ext value is an error.
// The library reads past an ext's header and takes its payload for the
// map, whose lengths no check before the decoding saw (engine/wire checks
// an ext's payload as opaque bytes): a 17-byte value could declare an
// array of 2^32 elements inside it and exhaust the memory.
func DecodeMapLen(dec *msgpack.Decoder) (int, error) {
	c, err := dec.PeekCode()
	if err != nil {
		return 0, err
	}
	if msgpcode.IsExt(c) {
		return 0, fmt.Errorf("an ext value (code %#x) where a map is wanted", c)
	}
	return dec.DecodeMapLen()
}

// decodeMap reads a map header and calls field for each key (valid only
// during the call); nil decodes as the zero value. Keys are read into a
// small buffer, not allocated.
func decodeMap(dec *msgpack.Decoder, what string, field func(k []byte) error) error {
	n, err := DecodeMapLen(dec)
	if err != nil {
		return fmt.Errorf("msgpack: %s: %w", what, err)
	}
	var buf [32]byte
	for range max(n, 0) {
		kl, err := dec.DecodeBytesLen()
		if err != nil || kl < 0 {
			return fmt.Errorf("msgpack: %s key: not a string (%v)", what, err)
		}
		k := buf[:0]
		if kl <= len(buf) {
			k = buf[:kl]
		} else {
			k = make([]byte, kl)
		}
		if err := dec.ReadFull(k); err != nil {
			return fmt.Errorf("msgpack: %s key: %w", what, err)
		}
		if err := field(k); err != nil {
			return fmt.Errorf("msgpack: %s %s: %w", what, k, err)
		}
	}
	return nil
}

// known are the values of the enum fields (role, type, stop_reason, a
// model event's type and error kind):
// decoding one returns the constant instead of a new string.
var known = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		string(RoleUser), string(RoleAssistant), string(RoleFunctionResult),
		string(ContentText), string(ContentImage), string(ContentThinking), string(ContentFunctionCall),
		string(StopEnd), string(StopLength), string(StopFunctionCall), string(StopAborted), string(StopError), string(StopBudgetExceeded),
		string(ModelStart), string(ModelTextStart), string(ModelTextDelta), string(ModelTextEnd),
		string(ModelThinkingStart), string(ModelThinkingDelta), string(ModelThinkingEnd),
		string(ModelFunctionCallStart), string(ModelFunctionCallDelta), string(ModelFunctionCallEnd),
		string(ModelUsage), string(ModelStop), string(ModelDone), string(ModelError),
		string(ErrorAuthExpired), string(ErrorRateLimited), string(ErrorContextOverflow), string(ErrorTransient), string(ErrorPermanent),
	} {
		m[s] = s
	}
	return m
}()

// decodeKnown decodes a string, without allocating when it is a known
// enum value.
func decodeKnown(dec *msgpack.Decoder) (string, error) {
	n, err := dec.DecodeBytesLen()
	if err != nil || n <= 0 {
		return "", err
	}
	var buf [32]byte
	b := buf[:0]
	if n <= len(buf) {
		b = buf[:n]
	} else {
		b = make([]byte, n)
	}
	if err := dec.ReadFull(b); err != nil {
		return "", err
	}
	if s, ok := known[string(b)]; ok {
		return s, nil
	}
	return string(b), nil
}

func isNil(dec *msgpack.Decoder) bool {
	c, err := dec.PeekCode()
	return err == nil && c == msgpcode.Nil
}

// mpWriter writes map entries, keeping the first error.
type mpWriter struct {
	enc *msgpack.Encoder
	err error
}

func (w *mpWriter) key(k string) {
	if w.err == nil {
		w.err = w.enc.EncodeString(k)
	}
}

func (w *mpWriter) str(k, v string) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeString(v)
	}
}

func (w *mpWriter) optStr(k, v string) {
	if v != "" {
		w.str(k, v)
	}
}

func (w *mpWriter) int(k string, v int64) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeInt(v)
	}
}

func (w *mpWriter) custom(k string, v msgpack.CustomEncoder) {
	w.key(k)
	if w.err == nil {
		w.err = v.EncodeMsgpack(w.enc)
	}
}

func (w *mpWriter) any(k string, v any) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.Encode(v)
	}
}
