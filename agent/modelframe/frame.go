package modelframe

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// AppendDelta appends to dst a text, thinking or functioncall delta
// event encoded by hand in codec (msgpack or JSON), as the codec would
// encode the ModelEvent {type, index, delta}: without coalescing, deltas
// are most of a stream's frames, and the reflective encoder costs more
// than the rest of the frame's work. It returns nil for any other event or
// codec (nil included); the writer encodes those.
func AppendDelta(dst []byte, codec wire.Codec, ev *agent.ModelEvent) []byte {
	switch ev.Type {
	case agent.ModelTextDelta, agent.ModelThinkingDelta, agent.ModelFunctionCallDelta:
	default:
		return nil
	}
	if ev.Index < 0 || ev.Delta == "" || codec == nil {
		return nil
	}
	switch codec.ContentType() {
	case wire.ContentMsgpack:
		return msgpackDelta(dst, ev)
	case wire.ContentJSON:
		return jsonDelta(dst, ev)
	}
	return nil
}

// msgpackDelta is {"type": t, "index": i (when not 0), "delta": d} in
// msgpack.
func msgpackDelta(b []byte, ev *agent.ModelEvent) []byte {
	b = slices.Grow(b, 32+len(ev.Type)+len(ev.Delta))
	n := byte(2)
	if ev.Index != 0 {
		n = 3
	}
	b = append(b, 0x80|n)
	b = mpString(b, "type")
	b = mpString(b, string(ev.Type))
	if ev.Index != 0 {
		b = mpString(b, "index")
		b = mpUint(b, uint64(ev.Index))
	}
	b = mpString(b, "delta")
	return mpString(b, ev.Delta)
}

func mpString(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, s...)
}

func mpUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v < 1<<8:
		return append(b, 0xcc, byte(v))
	case v < 1<<16:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v < 1<<32:
		return append(b, 0xce, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return append(b, 0xcf, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// jsonDelta is the same event in JSON.
func jsonDelta(b []byte, ev *agent.ModelEvent) []byte {
	d, err := json.Marshal(ev.Delta)
	if err != nil {
		return nil
	}
	b = slices.Grow(b, 40+len(d))
	b = append(b, `{"type":"`...)
	b = append(b, ev.Type...)
	b = append(b, '"')
	if ev.Index != 0 {
		b = append(b, `,"index":`...)
		b = strconv.AppendInt(b, int64(ev.Index), 10)
	}
	b = append(b, `,"delta":`...)
	b = append(b, d...)
	return append(b, '}')
}
