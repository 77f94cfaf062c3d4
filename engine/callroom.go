package engine

import (
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/wire"
)

// CallHeaderRoom is what a call made from a stored message (a queue's or
// a topic's delivery to its function) adds to the message's headers: its
// timeout in milliseconds and, for a message stored without trace
// context, the trace parent of the delivery's span.
func CallHeaderRoom(h nats.Header) int {
	n := len(HeaderTimeoutMs) + len(": ") + 20 + len("\r\n")
	if HeaderCarrier(h).Get("traceparent") == "" {
		n += len("traceparent: ") + len("00-") + 32 + 1 + 16 + len("-01") + len("\r\n")
	}
	return n
}

// checkStoredCall refuses a message to be stored for a later call (a
// queue's, a topic's) that the call could not carry: its body and headers,
// plus what the call adds ([CallHeaderRoom]), past max. Stored, it would
// fail every delivery as invalid_payload.
func checkStoredCall(msg *nats.Msg, max int64) error {
	if size := len(msg.Data) + wire.HeaderSize(msg.Header) + CallHeaderRoom(msg.Header); int64(size) > max {
		return wire.Errorf(wire.CodeInvalidPayload,
			"payload of %d bytes leaves no room under the server's max payload of %d bytes for the headers of the function's call", len(msg.Data), max).
			WithDetails(map[string]any{"max_payload": max, "size": len(msg.Data)})
	}
	return nil
}

// CheckStoredCall is checkStoredCall against the connection's max payload.
func (e *Engine) CheckStoredCall(msg *nats.Msg) error {
	return checkStoredCall(msg, e.nc.MaxPayload())
}
