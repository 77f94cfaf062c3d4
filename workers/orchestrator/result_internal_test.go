package orchestrator

import (
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

// A function's reply becomes the text the model reads: markup and code in
// it stay as they are (no "\u003c" escapes), in either codec.
func TestToResultKeepsMarkup(t *testing.T) {
	reply := map[string]any{"html": "<b>x</b> & y", "n": 1}
	for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
		body, err := codec.Marshal(reply)
		if err != nil {
			t.Fatal(err)
		}
		r := toResult(codec, body)
		if len(r.Content) != 1 || !strings.Contains(r.Content[0].Text, `"<b>x</b> & y"`) {
			t.Errorf("%s: text %q", codec.ContentType(), r.Content[0].Text)
		}
		if d, _ := r.Details.(map[string]any); d["html"] != "<b>x</b> & y" {
			t.Errorf("%s: details %v", codec.ContentType(), r.Details)
		}
	}
	if r := toResult(wire.JSON, []byte("<not json>")); r.Content[0].Text != "<not json>" {
		t.Errorf("a reply that does not decode: %q", r.Content[0].Text)
	}
}

// A JSON function's reply reaches the model with its numbers exact: an
// int64 id is not rounded to a float64 on the way (msgpack keeps them
// anyway). An empty JSON reply is still the empty object.
func TestToResultExactNumbers(t *testing.T) {
	for _, tc := range []struct {
		codec wire.Codec
		body  string
		text  string
	}{
		{wire.JSON, `{"id":1234567890123456789,"big":18446744073709551615,"f":0.5}`, `{"big":18446744073709551615,"f":0.5,"id":1234567890123456789}`},
		{wire.JSON, `[9007199254740993]`, `[9007199254740993]`},
		{wire.JSON, ` `, `{}`},
		{wire.JSON, `9007199254740993`, `9007199254740993`},
	} {
		r := toResult(tc.codec, []byte(tc.body))
		if len(r.Content) != 1 || r.Content[0].Text != tc.text {
			t.Errorf("%s %q: text %q, want %q", tc.codec.ContentType(), tc.body, r.Content[0].Text, tc.text)
		}
	}
	if d, _ := toResult(wire.JSON, []byte(`{"id":1234567890123456789}`)).Details.(map[string]any); d["id"] != int64(1234567890123456789) {
		t.Errorf("details %#v", d)
	}
}
