package orchestrator

import (
	"testing"

	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/wire"
)

// FuzzDecodeModelEvents: a provider's channel frame, as the model port
// reads it on the grain's model goroutine (any client that learns the
// channel's subject can publish there), never panics the decoder in
// either codec, and the done event's message is kept per frame.
func FuzzDecodeModelEvents(f *testing.F) {
	for _, s := range []string{
		`{"type":"text_delta","delta":"hi"}`,
		`[{"type":"text_delta","delta":"a"},{"type":"done","message":{"role":"assistant","content":[{"type":"text","text":"a"}],"stop_reason":"end"}}]`,
		`{"type":"error","kind":"rate_limited","error":"slow down"}`,
		`{"type":"done"}`,
		` [ ]`, `[null]`, `null`, ``, `[1]`,
	} {
		f.Add([]byte(s), false)
		if b, err := wire.Msgpack.Marshal(jsonValue(s)); err == nil {
			f.Add(b, true)
		}
	}
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, true)
	f.Fuzz(func(t *testing.T, data []byte, msgpack bool) {
		codec := wire.JSON
		if msgpack {
			codec = wire.Msgpack
		}
		evs, err := decodeModelEvents(channel.Frame{Seq: 1, Kind: channel.KindData, Data: data, Codec: codec})
		if err != nil {
			return
		}
		for _, ev := range evs {
			_ = ev.Validate()
		}
	})
}

// jsonValue is s decoded as JSON (nil when it is not JSON).
func jsonValue(s string) any {
	var v any
	_ = wire.JSON.Unmarshal([]byte(s), &v)
	return v
}
