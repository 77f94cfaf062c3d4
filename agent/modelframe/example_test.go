package modelframe_test

import (
	"bytes"
	"fmt"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/agent/modelframe"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Example encodes a text delta by hand, byte for byte what the codec
// writes, and leaves any other event to the codec.
func Example() {
	ev := agent.ModelEvent{Type: agent.ModelTextDelta, Index: 1, Delta: "Hello"}
	var buf []byte
	for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
		b := modelframe.AppendDelta(buf[:0], codec, &ev)
		want, err := codec.Marshal(ev)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %d bytes, as the codec's: %v\n", codec.ContentType(), len(b), bytes.Equal(b, bytes.TrimSpace(want)))
	}
	stop := agent.ModelEvent{Type: agent.ModelStop, StopReason: agent.StopEnd}
	fmt.Println("stop event:", modelframe.AppendDelta(nil, wire.JSON, &stop) == nil)
	// Output:
	// application/json: 47 bytes, as the codec's: true
	// application/msgpack: 36 bytes, as the codec's: true
	// stop event: true
}
