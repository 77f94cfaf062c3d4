package wire_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/wire"
)

type sample struct {
	A string         `json:"a"`
	B int            `json:"b,omitempty"`
	C []string       `json:"c"`
	D map[string]any `json:"d"`
}

func TestCodecsRoundTrip(t *testing.T) {
	t.Parallel()
	in := sample{A: "x", B: 3, C: []string{"p", "q"}, D: map[string]any{"k": "v", "n": map[string]any{"deep": true}}}
	for _, c := range []wire.Codec{wire.Msgpack, wire.JSON} {
		b, err := c.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out sample
		if err := c.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("%s: %+v != %+v", c.ContentType(), out, in)
		}
		// Untyped decode gives the same shapes for both codecs.
		var anyOut any
		if err := c.Unmarshal(b, &anyOut); err != nil {
			t.Fatal(err)
		}
		m, ok := anyOut.(map[string]any)
		if !ok || m["a"] != "x" {
			t.Fatalf("%s: untyped decode = %#v", c.ContentType(), anyOut)
		}
		if _, ok := m["d"].(map[string]any)["n"].(map[string]any); !ok {
			t.Fatalf("%s: nested map type %T", c.ContentType(), m["d"].(map[string]any)["n"])
		}
	}
}

func TestCodecRejectsTrailingAndGarbage(t *testing.T) {
	t.Parallel()
	var v map[string]any
	// Decoder.More says false before a closing bracket: every one of
	// these was read as its first value.
	for _, body := range []string{`{} {}`, `{}}`, `{"a":1}]`, `{"a":1}]]]garbage`, "{} \f", "\v"} {
		if err := wire.JSON.Unmarshal([]byte(body), &v); err == nil {
			t.Errorf("json %q accepted as %v", body, v)
		}
	}
	if err := wire.JSON.Unmarshal([]byte(" {\"a\":1} \r\n\t"), &v); err != nil || v["a"] != float64(1) {
		t.Fatalf("json value between whitespace: %v, %v", v, err)
	}
	b, _ := wire.Msgpack.Marshal(map[string]any{"a": 1})
	if err := wire.Msgpack.Unmarshal(append(b, 0x01), &v); err == nil {
		t.Fatal("msgpack trailing data accepted")
	}
	if err := wire.Msgpack.Unmarshal([]byte{0xc1}, &v); err == nil {
		t.Fatal("msgpack never-used code accepted")
	}
	if err := wire.JSON.Unmarshal(nil, &v); err != nil {
		t.Fatalf("empty JSON body is the empty object: %v", err)
	}
}

// A msgpack array never decodes into a struct, as a JSON array does not:
// the library would fill the fields by position, and read [] as {}. Types
// with a decoder of their own and non-struct targets keep their reading.
func TestMsgpackArrayIsNoObject(t *testing.T) {
	t.Parallel()
	enc := func(v any) []byte {
		b, err := wire.Msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var (
		st      sample
		stp     *sample
		list    []any
		untyped any
		m       map[string]any
		custom  customArray
	)
	for _, tt := range []struct {
		name string
		data []byte
		into any
		ok   bool
	}{
		{"empty array into a struct", enc([]any{}), &st, false},
		{"array of the fields into a struct", enc([]any{"x", 1, []string{}, map[string]any{}}), &st, false},
		{"empty array into a struct pointer", enc([]any{}), &stp, false},
		{"array16 into a struct", []byte{0xdc, 0x00, 0x00}, &st, false},
		{"map into a struct", enc(map[string]any{"a": "x"}), &st, true},
		{"nil into a struct", enc(nil), &st, true},
		{"array into a slice", enc([]any{1}), &list, true},
		{"array into any", enc([]any{1}), &untyped, true},
		{"array into a map", enc([]any{}), &m, false},
		{"array into a type with its own decoder", enc([]any{}), &custom, true},
	} {
		err := wire.Msgpack.Unmarshal(tt.data, tt.into)
		if (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// customArray decodes itself from any msgpack value.
type customArray struct{ n int }

func (c *customArray) UnmarshalMsgpack(b []byte) error { c.n = len(b); return nil }

func TestForContentType(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]wire.Codec{
		"": wire.JSON, "application/json": wire.JSON, "application/msgpack": wire.Msgpack,
		"Application/MsgPack; charset=binary": wire.Msgpack, "application/x-msgpack": wire.Msgpack, "text/plain": wire.JSON,
	} {
		if got := wire.ForContentType(ct); got != want {
			t.Errorf("ForContentType(%q) = %v", ct, got.ContentType())
		}
	}
}

func TestErrorsIsAndDecode(t *testing.T) {
	t.Parallel()
	for _, ent := range wire.Catalog {
		e := wire.Errorf(ent.Code, "because %d", 7)
		if e.Retryable != ent.Retryable || e.Status() != ent.Status {
			t.Fatalf("%s: defaults not applied", ent.Code)
		}
		for _, c := range []wire.Codec{wire.Msgpack, wire.JSON} {
			msg := wire.Reply(e, c)
			got := wire.Decode(msg)
			if got == nil || got.Code != ent.Code || got.Message != "because 7" {
				t.Fatalf("%s via %s: decoded %+v", ent.Code, c.ContentType(), got)
			}
			if !errors.Is(fmt.Errorf("wrapped: %w", got), &wire.Error{Code: ent.Code}) {
				t.Fatalf("errors.Is fails for %s", ent.Code)
			}
		}
	}
	// A plain NATS service error without our envelope.
	m := nats.NewMsg("")
	m.Header.Set("Nats-Service-Error", "nope")
	m.Header.Set("Nats-Service-Error-Code", "404")
	if got := wire.Decode(m); !errors.Is(got, wire.ErrNotFound) {
		t.Fatalf("plain 404 decoded as %v", got)
	}
	// A success reply is not an error.
	if wire.Decode(&nats.Msg{Data: []byte(`{}`)}) != nil {
		t.Fatal("success decoded as error")
	}
	if errors.Is(wire.ErrTimeout, wire.ErrInternal) {
		t.Fatal("different codes match")
	}
	cause := errors.New("disk on fire")
	if w := wire.Wrap(wire.CodeUnavailable, cause, "kv"); !errors.Is(w, cause) || w.Message != "kv: disk on fire" {
		t.Fatalf("Wrap = %v", w)
	}
}

func FuzzCodecs(f *testing.F) {
	b, _ := wire.Msgpack.Marshal(sample{A: "x", D: map[string]any{"k": []any{1, "2"}}})
	f.Add(b, false)
	f.Add([]byte(`{"a":"x","c":["1"],"d":{"k":null}}`), true)
	f.Add([]byte{0xde, 0xff, 0xff}, false)
	f.Add(mp(f, map[string]any{"w": map[string]any{"n": 1, "s": map[string]any{}, "i": []any{map[string]any{}}}, "l": []any{}, "m": map[string]any{"k": nil}, "f": []any{}, "o": []any{1}, "t": map[string]any{}}), false)
	f.Add(mp(f, map[string]any{"w": map[string]any{"i": []any{[]any{}}}}), false)
	f.Add(append([]byte{0x81, 0xa1, 't'}, extMap...), false)
	f.Add([]byte(`{"w":{"i":[[]]}}`), true)
	f.Fuzz(func(t *testing.T, data []byte, useJSON bool) {
		c := wire.Msgpack
		if useJSON {
			c = wire.JSON
		}
		fuzzObjects(t, c, data)
		var v any
		if err := c.Unmarshal(data, &v); err != nil {
			return
		}
		again, err := c.Marshal(v)
		if err != nil {
			t.Fatalf("re-encode of decoded %#v: %v", v, err)
		}
		var v2 any
		if err := c.Unmarshal(again, &v2); err != nil {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		var s sample
		_ = c.Unmarshal(data, &s) // typed decode must not panic either
	})
}

func FuzzDecodeReply(f *testing.F) {
	f.Add("400", "bad", []byte(`{"error":{"code":"invalid_payload","message":"m"}}`), "")
	f.Add("x", "", []byte{0x81}, "application/msgpack")
	f.Fuzz(func(t *testing.T, code, desc string, body []byte, ct string) {
		m := nats.NewMsg("")
		m.Header.Set("Nats-Service-Error-Code", code)
		m.Header.Set("Nats-Service-Error", desc)
		m.Header.Set(wire.HeaderContentType, ct)
		m.Data = body
		e := wire.Decode(m)
		if (code != "" || desc != "") && e == nil {
			t.Fatal("error headers decoded as success")
		}
		if e != nil {
			if _, ok := wire.Lookup(e.Code); !ok {
				t.Fatalf("decoded code %q is not in the catalog", e.Code)
			}
		}
	})
}

// A number that arrived as JSON (float64) must decode into an int field
// after a msgpack hop, as it would from JSON.
func TestMsgpackWholeFloatsDecodeIntoInts(t *testing.T) {
	t.Parallel()
	var fromJSON map[string]any
	if err := wire.JSON.Unmarshal([]byte(`{"ms":400,"ratio":0.5}`), &fromJSON); err != nil {
		t.Fatal(err)
	}
	b, err := wire.Msgpack.Marshal(fromJSON)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Ms    int     `json:"ms"`
		Ratio float64 `json:"ratio"`
	}
	if err := wire.Msgpack.Unmarshal(b, &out); err != nil || out.Ms != 400 || out.Ratio != 0.5 {
		t.Fatalf("got %+v, %v", out, err)
	}
	var f struct {
		F float64 `json:"ms"`
	}
	if err := wire.Msgpack.Unmarshal(b, &f); err != nil || f.F != 400 {
		t.Fatalf("int into float: %+v, %v", f, err)
	}
}

// replySize is m's size on the wire, about (body and headers).
func replySize(m *nats.Msg) int {
	n := len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

func TestReplyWithin(t *testing.T) {
	details := map[string]any{"input": strings.Repeat("d", 3000)}
	tests := []struct {
		name        string
		message     string
		details     map[string]any
		limit       int64
		wantMessage string
		wantDetails bool
	}{
		{"fits", "short", details, 1 << 20, "short", true},
		{"no limit", strings.Repeat("x", 5000), nil, 0, strings.Repeat("x", 5000), false},
		{"details alone too large", "short", details, 4 << 10, "short", false},
		{"message too long", strings.Repeat("x", 5000), nil, 8 << 10, strings.Repeat("x", 1024) + "… (5000 bytes in all)", false},
		{"cut between characters", "a" + strings.Repeat("é", 3000), nil, 8 << 10, "a" + strings.Repeat("é", 511) + "… (6001 bytes in all)", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := wire.Errorf(wire.CodeInvalidPayload, "%s", tt.message).WithDetails(tt.details)
			m := wire.ReplyWithin(e, wire.JSON, tt.limit)
			got := wire.Decode(m)
			if got == nil || got.Code != wire.CodeInvalidPayload || got.Message != tt.wantMessage || (got.Details != nil) != tt.wantDetails {
				t.Fatalf("decoded %+v", got)
			}
			if tt.limit > 0 && int64(replySize(m)) > tt.limit {
				t.Fatalf("%d bytes over a limit of %d", replySize(m), tt.limit)
			}
		})
	}
}

// FuzzReplyWithin: any error reply shortened for a 4 KiB payload fits it,
// decodes with its code and keeps a valid message valid UTF-8.
func FuzzReplyWithin(f *testing.F) {
	f.Add("short", "k", "v")
	f.Add(strings.Repeat("é", 3000), "input", strings.Repeat("x", 5000))
	f.Add("line\r\nFake: header\n", "", "")
	f.Add(strings.Repeat("\x00", 3000), "", "")
	f.Fuzz(func(t *testing.T, message, key, value string) {
		const limit = 4 << 10
		e := wire.Errorf(wire.CodeConflict, "%s", message).WithDetails(map[string]any{key: value})
		m := wire.ReplyWithin(e, wire.JSON, limit)
		if n := replySize(m); n > limit {
			t.Fatalf("%d bytes over %d", n, limit)
		}
		got := wire.Decode(m)
		if got == nil || got.Code != wire.CodeConflict {
			t.Fatalf("decoded %+v", got)
		}
		if utf8.ValidString(message) && !utf8.ValidString(got.Message) {
			t.Fatalf("message %q is not UTF-8", got.Message)
		}
	})
}

// MarshalJSON leaves "<", ">" and "&" as they are, and otherwise writes
// what json.Marshal does: the same value back, no trailing newline.
func TestMarshalJSON(t *testing.T) {
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"markup", map[string]string{"text": "<p>a&b</p>"}, `{"text":"<p>a&b</p>"}`},
		{"control characters", "a\u0000\n\u2028", `"a\u0000\n\u2028"`},
		{"nil", nil, "null"},
		{"struct", struct {
			A int    `json:"a"`
			B string `json:"b,omitempty"`
		}{A: 1}, `{"a":1}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := wire.MarshalJSON(c.v)
			if err != nil || string(got) != c.want {
				t.Fatalf("MarshalJSON = %s, %v; want %s", got, err, c.want)
			}
		})
	}
	if _, err := wire.MarshalJSON(func() {}); err == nil {
		t.Fatal("a func encoded")
	}
}

func FuzzMarshalJSON(f *testing.F) {
	for _, s := range []string{"", "<script>&amp;</script>", "\xff\xfe", "\u2028\u2029", `"\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := wire.MarshalJSON(map[string]any{"s": s, "n": []string{s}})
		if err != nil {
			t.Fatal(err)
		}
		std, err := json.Marshal(map[string]any{"s": s, "n": []string{s}})
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("%q does not decode: %v", got, err)
		}
		if err := json.Unmarshal(std, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) || len(got) > len(std) {
			t.Fatalf("MarshalJSON %q, json.Marshal %q", got, std)
		}
	})
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	e := wire.Errorf(wire.CodeConflict, "taken")
	p := e.Permanent()
	if !e.Retryable || p.Retryable || p.Code != wire.CodeConflict || p.Message != "taken" {
		t.Fatalf("Permanent of %+v = %+v: want a non-retryable copy, the original unchanged", e, p)
	}
}

// TestDecodeRetryableDefault: an envelope that leaves "retryable" out (a
// foreign worker's) reads with its code's catalog default, in both codecs;
// one that says it keeps what it says.
func TestDecodeRetryableDefault(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	tests := []struct {
		name      string
		code      string
		retryable *bool
		wantCode  wire.Code
		want      bool
	}{
		{"unavailable left out", "unavailable", nil, wire.CodeUnavailable, true},
		{"timeout left out", "timeout", nil, wire.CodeTimeout, true},
		{"conflict left out", "conflict", nil, wire.CodeConflict, true},
		{"invalid_payload left out", "invalid_payload", nil, wire.CodeInvalidPayload, false},
		{"conflict said permanent", "conflict", &no, wire.CodeConflict, false},
		{"internal said retryable", "internal", &yes, wire.CodeInternal, true},
		{"foreign code left out", "rate_limited", nil, wire.CodeInternal, false},
		{"foreign code said retryable", "rate_limited", &yes, wire.CodeInternal, true},
	}
	for _, tt := range tests {
		for _, c := range []wire.Codec{wire.JSON, wire.Msgpack} {
			t.Run(tt.name+"/"+c.ContentType(), func(t *testing.T) {
				body := map[string]any{"code": tt.code, "message": "m"}
				if tt.retryable != nil {
					body["retryable"] = *tt.retryable
				}
				data, err := c.Marshal(map[string]any{"error": body})
				if err != nil {
					t.Fatal(err)
				}
				m := nats.NewMsg("")
				m.Header.Set("Nats-Service-Error", tt.code+": m")
				m.Header.Set("Nats-Service-Error-Code", "500")
				m.Header.Set(wire.HeaderContentType, c.ContentType())
				m.Data = data
				got := wire.Decode(m)
				if got == nil || got.Code != tt.wantCode || got.Retryable != tt.want {
					t.Fatalf("decoded %+v, want code %s retryable %v", got, tt.wantCode, tt.want)
				}
			})
		}
	}
}
