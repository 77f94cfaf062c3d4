// Package modelframe encodes the frames provider workers write most: the
// text, thinking and function-call delta events of a model stream
// (agent.ModelEvent {type, index, delta}), by hand in msgpack or JSON,
// byte for byte as the codec would, without the reflective encoder's cost.
// Any other event is left to the codec.
//
//	if b := modelframe.AppendDelta(buf[:0], codec, &ev); b != nil {
//		// write b as the frame's payload
//	}
package modelframe
