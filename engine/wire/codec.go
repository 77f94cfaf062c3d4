package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Content types and the header that carries them.
const (
	HeaderContentType = "Content-Type"
	ContentMsgpack    = "application/msgpack"
	ContentJSON       = "application/json"
)

// Codec encodes and decodes payloads. Both codecs read the same `json` struct
// tags, so one Go type serves JSON and msgpack callers alike.
type Codec interface {
	// ContentType is the header value that names this codec.
	ContentType() string
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// Msgpack is the default codec between Go workers.
var Msgpack Codec = msgpackCodec{}

// JSON is the codec for JSON callers and for messages with no Content-Type.
var JSON Codec = jsonCodec{}

// ForContentType picks the codec for a Content-Type header value: msgpack
// for "application/msgpack" (or "application/x-msgpack"), JSON for anything
// else, including "".
func ForContentType(ct string) Codec {
	if ct == "" {
		return JSON
	}
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	switch strings.ToLower(strings.TrimSpace(ct)) {
	case ContentMsgpack, "application/x-msgpack":
		return Msgpack
	default:
		return JSON
	}
}

type msgpackCodec struct{}

func (msgpackCodec) ContentType() string { return ContentMsgpack }

var encPool = sync.Pool{New: func() any {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag(structTag)
	enc.SetOmitEmpty(false)
	enc.UseCompactInts(true)
	// Whole floats travel as integers: a JSON caller's 400 decodes as
	// float64 and must still decode into a Go int field downstream.
	enc.UseCompactFloats(true)
	return &pooledEncoder{buf: &buf, enc: enc}
}}

type pooledEncoder struct {
	buf *bytes.Buffer
	enc *msgpack.Encoder
}

func (msgpackCodec) Marshal(v any) ([]byte, error) {
	pe := encPool.Get().(*pooledEncoder)
	pe.buf.Reset()
	err := pe.enc.Encode(v)
	var out []byte
	if err == nil {
		out = bytes.Clone(pe.buf.Bytes())
	}
	if pe.buf.Cap() <= 64<<10 {
		encPool.Put(pe)
	}
	if err != nil {
		return nil, fmt.Errorf("msgpack encode: %w", err)
	}
	return out, nil
}

type pooledDecoder struct {
	r   *bytes.Reader
	dec *msgpack.Decoder
}

var decPool = sync.Pool{New: func() any {
	r := bytes.NewReader(nil)
	dec := msgpack.NewDecoder(r)
	dec.SetCustomStructTag(structTag)
	dec.SetMapDecoder(decodeStringMap)
	return &pooledDecoder{r: r, dec: dec}
}}

// decodeStringMap makes untyped maps decode as map[string]any (as JSON does),
// so handlers see the same shapes from both codecs. Non-string keys are
// formatted as strings.
func decodeStringMap(d *msgpack.Decoder) (any, error) {
	n, err := d.DecodeMapLen()
	if err != nil {
		return nil, err
	}
	if n == -1 {
		return nil, nil
	}
	m := make(map[string]any, min(n, 1024))
	for i := 0; i < n; i++ {
		k, err := d.DecodeInterface()
		if err != nil {
			return nil, err
		}
		ks, ok := k.(string)
		if !ok {
			ks = fmt.Sprint(k)
		}
		v, err := d.DecodeInterface()
		if err != nil {
			return nil, err
		}
		m[ks] = v
	}
	return m, nil
}

func (msgpackCodec) Unmarshal(data []byte, v any) error {
	if err := checkMsgpack(data); err != nil {
		return fmt.Errorf("msgpack decode: %w", err)
	}
	if err := checkObjects(data, v); err != nil {
		return fmt.Errorf("msgpack decode: %w", err)
	}
	pd := decPool.Get().(*pooledDecoder)
	// The decoder reads pd.r directly (a bytes.Reader is a ByteScanner);
	// Decoder.Reset would also drop the struct tag and map decoder.
	pd.r.Reset(data)
	err := pd.dec.Decode(v)
	if err == nil && pd.r.Len() > 0 {
		err = fmt.Errorf("%d bytes of trailing data after the value", pd.r.Len())
	}
	pd.r.Reset(nil)
	decPool.Put(pd)
	if err != nil {
		return fmt.Errorf("msgpack decode: %w", err)
	}
	return nil
}

type jsonCodec struct{}

func (jsonCodec) ContentType() string { return ContentJSON }

func (jsonCodec) Marshal(v any) ([]byte, error) {
	b, err := MarshalJSON(v)
	if err != nil {
		return nil, fmt.Errorf("json encode: %w", err)
	}
	return b, nil
}

// jsonBuffers are MarshalJSON's scratch buffers.
var jsonBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// MarshalJSON is json.Marshal without HTML escaping: "<", ">" and "&" stay
// as they are instead of six-byte \u escapes. Nothing iii stores or sends
// is embedded in HTML, and a model's HTML or code would otherwise grow
// up to six times in every JSON record, event and reply that carries it
// (a 150 KiB answer of markup made a turn record over the max payload).
func MarshalJSON(v any) ([]byte, error) {
	buf := jsonBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 {
			buf.Reset()
			jsonBuffers.Put(buf)
		}
	}()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// jsonSpace is JSON's whitespace (RFC 8259 §2).
const jsonSpace = " \t\r\n"

func (jsonCodec) Unmarshal(data []byte, v any) error {
	if len(bytes.Trim(data, jsonSpace)) == 0 {
		// An empty body is the empty request: `nats req subj ''`.
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("json decode: %w", err)
	}
	// Only whitespace may follow the value. Decoder.More is no test of
	// that: it reports false before a '}' or ']', so `{"a":1}]garbage`
	// was taken for {"a":1}.
	if rest := bytes.Trim(data[dec.InputOffset():], jsonSpace); len(rest) > 0 {
		return fmt.Errorf("json decode: %d bytes of trailing data after the value", len(rest))
	}
	return nil
}
