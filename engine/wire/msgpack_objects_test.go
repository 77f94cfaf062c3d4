package wire_test

import (
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/wire"
)

type (
	nestWork struct {
		N int `json:"n"`
	}
	nestContent struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	nestMsg struct {
		Role    string        `json:"role"`
		Content []nestContent `json:"content"`
	}
	// NestBase is inlined into nestReq: its fields are nestReq's, and
	// "NestBase" names it whole.
	NestBase struct {
		Base  string   `json:"base"`
		Inner nestWork `json:"inner"`
	}
	// nestTuple travels as an array by its own choice.
	nestTuple struct {
		_msgpack struct{} `msgpack:",as_array"`
		A        int
		W        nestWork
	}
	nestKey struct {
		K string `json:"k"`
	}
	nestTree struct {
		Kids []nestTree `json:"kids"`
	}
	nestReq struct {
		Work     nestWork            `json:"work"`
		WorkPtr  *nestWork           `json:"work_ptr"`
		Messages []nestMsg           `json:"messages"`
		ByName   map[string]nestWork `json:"by_name"`
		Pair     [2]nestWork         `json:"pair"`
		Free     any                 `json:"free"`
		Custom   customArray         `json:"custom"`
		Tuple    nestTuple           `json:"tuple"`
		Tagged   nestWork            `msgpack:"mp" json:"js"`
		Aliased  nestWork            `msgpack:"al,alias:al2"`
		Opts     map[string]any      `json:"opts"`
		At       time.Time           `json:"at"`
		Skipped  nestWork            `json:"-"`
		NestBase
	}
)

// mp encodes v with the msgpack codec.
func mp(t testing.TB, v any) []byte {
	t.Helper()
	b, err := wire.Msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// extMap is an ext8 value (type 1) whose payload is a map32 header
// claiming 2^20 entries: the library, asked for a Go map, reads past the
// ext's header and takes the payload for the map.
var extMap = []byte{0xc7, 0x05, 0x01, 0xdf, 0x00, 0x10, 0x00, 0x00}

// TestMsgpackNestedArrayIsNoObject: an array where a struct is wanted is
// refused at any depth, as JSON refuses it, with the path where it was;
// an ext value where a map is wanted is refused too. Types with a decoder
// of their own, as_array structs and interface values keep their reading.
func TestMsgpackNestedArrayIsNoObject(t *testing.T) {
	t.Parallel()
	type m = map[string]any
	type a = []any
	field := func(k string, v any) []byte { return mp(t, m{k: v}) }
	tests := []struct {
		name string
		data []byte
		into func() any
		want string // "" for success, else a part of the error
	}{
		{"struct field", field("work", a{}), func() any { return new(nestReq) }, "an array at work does not decode into wire_test.nestWork, which wants a map"},
		{"struct field, by position", field("work", a{7}), func() any { return new(nestReq) }, "at work "},
		{"struct field as a map", field("work", m{"n": 7}), func() any { return new(nestReq) }, ""},
		{"struct field nil", field("work", nil), func() any { return new(nestReq) }, ""},
		{"pointer field", field("work_ptr", a{}), func() any { return new(nestReq) }, "at work_ptr "},
		{"slice element", field("messages", a{a{"user", a{}}}), func() any { return new(nestReq) }, "an array at messages[0] does not decode into wire_test.nestMsg"},
		{"element of a nested slice", field("messages", a{m{"role": "user"}, m{"content": a{m{}, a{"text", "hi"}}}}), func() any { return new(nestReq) }, "an array at messages[1].content[1] does not decode into wire_test.nestContent"},
		{"nested slices as maps", field("messages", a{m{"role": "user", "content": a{m{"type": "text", "text": "hi"}}}}), func() any { return new(nestReq) }, ""},
		{"map value", field("by_name", m{"a": m{}, "b": a{}}), func() any { return new(nestReq) }, `at by_name["b"] `},
		{"array element", field("pair", a{m{}, a{}}), func() any { return new(nestReq) }, "at pair[1] "},
		{"interface", field("free", a{a{1}, m{"x": a{}}}), func() any { return new(nestReq) }, ""},
		{"own decoder", field("custom", a{1, 2}), func() any { return new(nestReq) }, ""},
		{"as_array struct", field("tuple", a{1, m{"n": 2}}), func() any { return new(nestReq) }, ""},
		{"as_array struct as a map", field("tuple", m{"A": 1}), func() any { return new(nestReq) }, ""},
		{"in an as_array struct", field("tuple", a{1, a{2}}), func() any { return new(nestReq) }, "at tuple.W "},
		{"msgpack tag before json", field("mp", a{}), func() any { return new(nestReq) }, "at mp "},
		{"json tag under a msgpack tag is unknown", field("js", a{}), func() any { return new(nestReq) }, ""},
		{"alias", field("al2", a{}), func() any { return new(nestReq) }, "at al2 "},
		{"ignored field", field("Skipped", a{}), func() any { return new(nestReq) }, ""},
		{"inlined embedded field", field("inner", a{}), func() any { return new(nestReq) }, "at inner "},
		{"embedded struct by name", field("NestBase", a{}), func() any { return new(nestReq) }, "at NestBase "},
		{"time", field("at", time.Unix(1700000000, 5)), func() any { return new(nestReq) }, ""},
		{"ext for a map field", append([]byte{0x81, 0xa4, 'o', 'p', 't', 's'}, extMap...), func() any { return new(nestReq) }, "an ext value at opts does not decode into map[string]interface {}, which wants a map"},
		{"ext for a map", extMap, func() any { return new(map[string]any) }, "an ext value does not decode into map[string]interface {}"},
		{"ext for a typed map", extMap, func() any { return new(map[string]string) }, "an ext value does not decode"},
		{"ext for any", mp(t, time.Unix(1, 0)), func() any { return new(any) }, ""},
		{"top-level slice", mp(t, a{m{}, a{}}), func() any { return new([]nestWork) }, "an array at [1] does not decode into wire_test.nestWork"},
		{"map key", mp(t, map[any]any{"x": 1}), func() any { return new(map[nestKey]int) }, "msgpack decode"}, // the library's own refusal
		{"map key array", []byte{0x81, 0x90, 0x01}, func() any { return new(map[nestKey]int) }, "an array at [key 0] does not decode into wire_test.nestKey"},
		{"recursive type", mp(t, m{"kids": a{m{"kids": a{m{}, a{}}}}}), func() any { return new(nestTree) }, "an array at kids[0].kids[1] does not decode into wire_test.nestTree"},
		{"recursive type as maps", mp(t, m{"kids": a{m{"kids": a{m{}}}}}), func() any { return new(nestTree) }, ""},
		{"long map key", field("by_name", m{strings.Repeat("k", 100): a{}}), func() any { return new(nestReq) }, `at by_name["` + strings.Repeat("k", 64) + `…"] `},
		{"top-level struct", mp(t, a{}), func() any { return new(nestReq) }, "msgpack decode: an array does not decode into wire_test.nestReq, which wants a map"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := wire.Msgpack.Unmarshal(tt.data, tt.into())
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("err = %v, want success", err)
			case tt.want != "" && err == nil:
				t.Fatalf("decoded, want an error with %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("err = %v, want one with %q", err, tt.want)
			}
		})
	}
}

// TestMsgpackObjectsRoundTrip: what the codec writes, it reads back,
// as_array structs, inlined fields and all.
func TestMsgpackObjectsRoundTrip(t *testing.T) {
	t.Parallel()
	in := nestReq{
		Work:     nestWork{N: 1},
		WorkPtr:  &nestWork{N: 2},
		Messages: []nestMsg{{Role: "user", Content: []nestContent{{Type: "text", Text: "hi"}}}},
		ByName:   map[string]nestWork{"a": {N: 3}},
		Pair:     [2]nestWork{{N: 4}, {N: 5}},
		Free:     []any{int8(1)},
		Custom:   customArray{n: 1}, // an empty map, one byte
		Tuple:    nestTuple{A: 6, W: nestWork{N: 7}},
		Tagged:   nestWork{N: 8},
		Aliased:  nestWork{N: 9},
		Opts:     map[string]any{"k": "v"},
		At:       time.Unix(1700000000, 5).UTC(),
		NestBase: NestBase{Base: "b", Inner: nestWork{N: 10}},
	}
	var out nestReq
	if err := wire.Msgpack.Unmarshal(mp(t, in), &out); err != nil {
		t.Fatal(err)
	}
	out.At = out.At.UTC()
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("got %+v\nwant %+v", out, in)
	}
}

// The fuzz target's types: plain json tags only, so that
// objectsWhereWanted can follow them on an untyped decode.
type (
	fuzzReq struct {
		Work  *fuzzWork           `json:"w"`
		List  []fuzzWork          `json:"l"`
		Map   map[string]fuzzWork `json:"m"`
		Free  any                 `json:"f"`
		Own   customArray         `json:"o"`
		Table map[string]any      `json:"t"`
	}
	fuzzWork struct {
		N     int        `json:"n"`
		Sub   *fuzzWork  `json:"s"`
		Items []fuzzWork `json:"i"`
	}
)

// arrayWhereObject reports where, in v (an untyped decode), an array
// stands where fuzzReq's type t wants a struct or a map: what a typed
// decode that succeeded must never have let through.
func arrayWhereObject(v any, t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil || t == reflect.TypeFor[customArray]() {
		return ""
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return path
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if at := arrayWhereObject(obj[name], f.Type, path+"."+name); at != "" {
				return at
			}
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return path
		}
		for k, e := range obj {
			if at := arrayWhereObject(e, t.Elem(), path+"["+k+"]"); at != "" {
				return at
			}
		}
	case reflect.Slice:
		list, _ := v.([]any)
		for i, e := range list {
			if at := arrayWhereObject(e, t.Elem(), path+"["+strconv.Itoa(i)+"]"); at != "" {
				return at
			}
		}
	}
	return ""
}

// fuzzObjects decodes data into fuzzReq (the check for arrays and ext
// values where a map is wanted runs first and must not panic), and holds
// a decode that succeeded to JSON's rule: no array where an object is
// wanted, at any depth.
func fuzzObjects(t *testing.T, c wire.Codec, data []byte) {
	var r fuzzReq
	if err := c.Unmarshal(data, &r); err != nil {
		return
	}
	var untyped any
	if err := c.Unmarshal(data, &untyped); err != nil {
		return
	}
	if at := arrayWhereObject(untyped, reflect.TypeFor[fuzzReq](), "$"); at != "" {
		t.Fatalf("%s: decoded %+v from %#v, which has no object at %s", c.ContentType(), r, untyped, at)
	}
	var rich nestReq
	_ = c.Unmarshal(data, &rich) // must not panic
}

// TestMsgpackExtIsNoMap: an 8-byte ext value sent where a map is wanted
// costs nothing. The library reads past the ext's header and took its
// payload's map32 header of 2^20 entries for the map: 80 MB (2^32 entries
// ran the process out of memory). Not parallel: it measures the heap.
func TestMsgpackExtIsNoMap(t *testing.T) {
	for _, into := range []func() any{
		func() any { return new(map[string]any) },
		func() any { return new(map[string]string) },
		func() any { return new(fuzzReq) },
	} {
		v := into()
		data := extMap
		if _, ok := v.(*fuzzReq); ok {
			data = append([]byte{0x81, 0xa1, 't'}, extMap...)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := wire.Msgpack.Unmarshal(data, v)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("%T: decoded", v)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Errorf("%T: %d bytes allocated for an %d-byte request (%v)", v, n, len(data), err)
		}
	}
}
