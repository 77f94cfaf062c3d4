package wire

import (
	"reflect"
	"strings"
	"testing"
)

type (
	checkWork struct {
		N   int                  `json:"n"`
		Sub *checkWork           `json:"s"`
		Map map[string]checkWork `json:"m"`
		Any map[string]any       `json:"a"`
	}
	checkKey struct {
		K string `json:"k"`
	}
)

// FuzzCheckObjects runs the type-guided walk on any bytes, without
// checkMsgpack before it (as Unmarshal runs it): it must not panic nor
// read past the end.
func FuzzCheckObjects(f *testing.F) {
	f.Add([]byte{0x81, 0xa1, 's', 0x91, 0x01})
	f.Add([]byte{0x81, 0xa1, 'm', 0x81, 0xa1, 'k', 0x90})
	f.Add([]byte{0x81, 0xa1, 'a', 0xc7, 0x05, 0x01, 0xdf, 0x00, 0x10, 0x00, 0x00})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x92, 0xdb, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, v := range []any{new(checkWork), new([]checkWork), new(map[checkKey]checkWork), new(map[string]any)} {
			w := objWalker{data: data}
			_ = w.value(shapeOf(reflect.TypeOf(v)), 0)
			if w.p > len(data) {
				t.Fatalf("%T: walked to %d of %d bytes", v, w.p, len(data))
			}
		}
	})
}

// BenchmarkCheckObjects is the walk alone, next to checkMsgpack and the
// whole Unmarshal of the same request (a model request of plain structs:
// messages of content blocks with arguments), to see its share.
func BenchmarkCheckObjects(b *testing.B) {
	type content struct {
		Type      string         `json:"type"`
		Text      string         `json:"text,omitempty"`
		Arguments map[string]any `json:"arguments,omitempty"`
	}
	type message struct {
		Role    string    `json:"role"`
		Content []content `json:"content"`
	}
	type request struct {
		Model    string         `json:"model"`
		Messages []message      `json:"messages"`
		Options  map[string]any `json:"options"`
	}
	req := request{Model: "m", Options: map[string]any{"temperature": 0.2}}
	for range 20 {
		req.Messages = append(req.Messages, message{Role: "user", Content: []content{
			{Type: "text", Text: strings.Repeat("word ", 40)},
			{Type: "function_call", Arguments: map[string]any{"path": "README.md"}},
		}})
	}
	data, err := Msgpack.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("step=checkMsgpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := checkMsgpack(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("step=checkObjects", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := checkObjects(data, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("step=unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out request
			if err := Msgpack.Unmarshal(data, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
