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
