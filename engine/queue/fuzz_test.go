package queue

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
)

// FuzzPayload: any bytes in either codec never panic; valid JSON
// re-encodes as msgpack and back to the same JSON value.
func FuzzPayload(f *testing.F) {
	for _, s := range []string{`{}`, `null`, `{"a":[1,2.5,-3,"x",{"b":null}]}`, `18446744073709551616`, `"\u00e9"`, `1e400`, "\x81\xa1a\x01", "\xc0", ""} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		var p Payload
		var in, out wire.Codec = wire.Msgpack, wire.JSON
		if isJSON {
			in, out = wire.JSON, wire.Msgpack
			_ = p.UnmarshalJSON(data)
		} else {
			_ = p.UnmarshalMsgpack(data)
		}
		b, err := p.Encode(out)
		if err != nil {
			return
		}
		if !isJSON || !json.Valid(data) {
			return
		}
		var want, got any
		dec := json.NewDecoder(bytes.NewReader(data))
		if dec.Decode(&want) != nil || dec.More() {
			return
		}
		if err := out.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s re-encoded does not decode: %v", data, err)
		}
		back, err := in.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		var again any
		if err := json.Unmarshal(back, &again); err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = map[string]any{}
		}
		if !reflect.DeepEqual(want, again) {
			t.Fatalf("%s → %s", data, back)
		}
	})
}

// FuzzParseDeadLetter: arbitrary headers and bodies never panic.
func FuzzParseDeadLetter(f *testing.F) {
	f.Add("3", "2024-01-01T00:00:00Z", "internal", "application/msgpack", []byte{0x81, 0xa1, 0x61, 0x01})
	f.Add("-1", "not a time", "", "", []byte(`{"a":`))
	f.Add("99999999999999999999", "", "x", "application/json", []byte("\xff"))
	f.Fuzz(func(t *testing.T, deliveries, at, code, ct string, data []byte) {
		h := nats.Header{}
		h.Set(HeaderDeliveries, deliveries)
		h.Set(HeaderRedrives, deliveries)
		h.Set(HeaderEnqueuedAt, at)
		h.Set(HeaderDeadLetteredAt, at)
		h.Set(HeaderErrorCode, code)
		h.Set(wire.HeaderContentType, ct)
		dl := parseDeadLetter(1, data, h)
		if dl.Deliveries < 0 || dl.Redrives < 0 {
			t.Fatalf("negative counts %+v", dl)
		}
		r := redriveMsg("q", &jetstream.RawStreamMsg{Sequence: 1, Header: h, Data: data})
		if r.Header.Get(HeaderRedrives) == "" || r.Header.Get(HeaderDeliveries) != "" {
			t.Fatalf("redrive headers %v", r.Header)
		}
	})
}

// FuzzHeaderValue: the result is always one line of valid UTF-8 within
// the bound.
func FuzzHeaderValue(f *testing.F) {
	for _, s := range []string{"", "a\r\nb", strings.Repeat("é", 600), "\xff\xfe", "\x00\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := headerValue(s)
		if len(v) > MaxErrorMessage || !utf8.ValidString(v) || strings.ContainsAny(v, "\r\n\x00") {
			t.Fatalf("headerValue(%q) = %q", s, v)
		}
	})
}
