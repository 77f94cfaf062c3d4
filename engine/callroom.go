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

// QueueHeaderRoom is what a queued message keeps free under the max
// payload besides [CallHeaderRoom]: the headers its dead letter adds
// (package engine/queue: the queue, error code, deliveries, times, the
// queue sequence, the dead letter's Nats-Msg-Id, the original one renamed;
// the error message is cut to what fits) and those a redrive adds (the
// redrive count and its Nats-Msg-Id). A message without it could fail
// every delivery and never be dead-lettered, retried for ever.
func QueueHeaderRoom(queue string) int { return 512 + 2*len(queue) }

// checkStoredCall refuses a message to be stored for a later call (a
// queue's, a topic's) that the call could not carry: its body and headers,
// plus what the call adds ([CallHeaderRoom]) and reserve, past max.
// Stored, it would fail every delivery as invalid_payload.
func checkStoredCall(msg *nats.Msg, max int64, reserve int) error {
	if size := len(msg.Data) + wire.HeaderSize(msg.Header) + CallHeaderRoom(msg.Header) + reserve; int64(size) > max {
		what := "the headers of the function's call"
		if reserve > 0 {
			what = "the headers of the function's call and of a dead letter"
		}
		return wire.Errorf(wire.CodeInvalidPayload,
			"payload of %d bytes leaves no room under the server's max payload of %d bytes for %s", len(msg.Data), max, what).
			WithDetails(map[string]any{"max_payload": max, "size": len(msg.Data)})
	}
	return nil
}

// CheckStoredCall is checkStoredCall against the connection's max payload.
func (e *Engine) CheckStoredCall(msg *nats.Msg) error {
	return checkStoredCall(msg, e.nc.MaxPayload(), 0)
}
