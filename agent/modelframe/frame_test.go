package modelframe

import (
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// FuzzDeltaFrame: a hand-encoded delta frame decodes, in both codecs, to
// the event it encodes, as the codec's own encoding does.
func FuzzDeltaFrame(f *testing.F) {
	f.Add(0, "hello", uint8(0))
	f.Add(3, "{\"a\":", uint8(2))
	f.Add(200, strings.Repeat("é", 40), uint8(1))
	f.Add(70000, strings.Repeat("x", 70000), uint8(0))
	f.Add(1, "\xff<>&\u2028\"\\", uint8(1))
	types := []agent.ModelEventType{agent.ModelTextDelta, agent.ModelThinkingDelta, agent.ModelFunctionCallDelta}
	f.Fuzz(func(t *testing.T, index int, delta string, typ uint8) {
		ev := agent.ModelEvent{Type: types[int(typ)%len(types)], Index: index, Delta: delta}
		if AppendDelta(nil, nil, &ev) != nil {
			t.Fatal("encoded without a codec")
		}
		for _, codec := range []wire.Codec{wire.Msgpack, wire.JSON} {
			b := AppendDelta(nil, codec, &ev)
			if index < 0 || delta == "" {
				if b != nil {
					t.Fatalf("%s: encoded %+v", codec.ContentType(), ev)
				}
				continue
			}
			var got, want agent.ModelEvent
			if err := codec.Unmarshal(b, &got); err != nil {
				t.Fatalf("%s: %q does not decode: %v", codec.ContentType(), b, err)
			}
			ref, err := codec.Marshal(&ev)
			if err != nil {
				t.Fatal(err)
			}
			if err := codec.Unmarshal(ref, &want); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%s: %+v, the codec's own encoding gives %+v", codec.ContentType(), got, want)
			}
		}
	})
}
