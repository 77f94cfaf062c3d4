package wire

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
)

// FromNATS maps an error from nats.go onto a catalog code. What a later
// attempt can get past is unavailable (retryable): a connection closed,
// draining, disconnected or over its reconnect buffer; a slow consumer
// (the client dropped messages: the stream is incomplete, a new attempt
// reads it whole); a bad subscription (it was closed under the caller: a
// new attempt subscribes anew). Anything not mapped is internal.
func FromNATS(err error) *Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nats.ErrNoResponders):
		return Wrap(CodeFunctionNotFound, nil, "no worker is registered for this function")
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return Wrap(CodeTimeout, nil, "no reply before the deadline")
	case errors.Is(err, context.Canceled):
		return Wrap(CodeCanceled, err, "")
	case errors.Is(err, nats.ErrMaxPayload):
		return Wrap(CodeInvalidPayload, nil, "payload exceeds the server's max payload")
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrReconnectBufExceeded),
		errors.Is(err, nats.ErrSlowConsumer), errors.Is(err, nats.ErrBadSubscription):
		return Wrap(CodeUnavailable, err, "")
	}
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	return Wrap(CodeInternal, err, "")
}

// Decode is the one choke point that turns a reply into a Go error. It
// returns nil when msg is not an error reply. An error reply from any NATS
// service (our envelope or just the Nats-Service-Error headers) becomes an
// *Error matching the catalog's sentinels.
func Decode(msg *nats.Msg) *Error {
	if msg == nil || msg.Header == nil {
		return nil
	}
	desc := msg.Header.Get("Nats-Service-Error")
	status := msg.Header.Get("Nats-Service-Error-Code")
	if desc == "" && status == "" {
		return nil
	}
	var env replyEnvelope
	codec := ForContentType(msg.Header.Get(HeaderContentType))
	if len(msg.Data) > 0 && codec.Unmarshal(msg.Data, &env) == nil && env.Error != nil && env.Error.Code != "" {
		in := env.Error
		ent, known := Lookup(in.Code)
		e := &Error{Code: in.Code, Message: in.Message, Retryable: ent.Retryable, Details: in.Details}
		if in.Retryable != nil {
			e.Retryable = *in.Retryable
		}
		if !known {
			// A foreign worker's own code: keep its text, classify as internal.
			e.Code, e.Message = CodeInternal, string(in.Code)+": "+in.Message
		}
		return e
	}
	// A plain NATS service error: classify by status.
	code := CodeInternal
	if n, err := strconv.Atoi(status); err == nil {
		for _, ent := range Catalog {
			if ent.Status == n {
				code = ent.Code
				break
			}
		}
	}
	e := Errorf(code, "%s", desc)
	return e
}

// replyEnvelope is [Envelope] as [Decode] reads it: a reply that leaves
// "retryable" out (a foreign worker's) takes its code's default, as the
// catalog promises, instead of false.
type replyEnvelope struct {
	Error *struct {
		Code      Code           `json:"code"`
		Message   string         `json:"message"`
		Retryable *bool          `json:"retryable"`
		Details   map[string]any `json:"details"`
	} `json:"error"`
}

// MaxShortMessage bounds the message of an error reply shortened by
// [ReplyWithin].
const MaxShortMessage = 1024

// replyRoom is what ReplyWithin leaves of the limit for the transport's own
// headers (a channel frame's, the services framework's).
const replyRoom = 1024

// ReplyWithin is [Reply], shortened when it would not fit limit bytes
// (body and headers; a server's max payload): the message is cut to
// [MaxShortMessage] bytes on a character boundary, marked with how long it
// was, and the details are dropped. An error that quotes a large input
// still reaches its caller, with its code.
func ReplyWithin(e *Error, codec Codec, limit int64) *nats.Msg {
	m := Reply(e, codec)
	if limit <= 0 || int64(len(m.Data)+HeaderSize(m.Header))+replyRoom <= limit {
		return m
	}
	short := *e
	short.Details = nil
	// A message that escapes to much more than its length in JSON is cut
	// further until the reply fits.
	for n := MaxShortMessage; ; n /= 2 {
		if len(e.Message) > n {
			cut := n
			for cut > 0 && !utf8.RuneStart(e.Message[cut]) {
				cut--
			}
			short.Message = fmt.Sprintf("%s… (%d bytes in all)", e.Message[:cut], len(e.Message))
		}
		m = Reply(&short, codec)
		if n == 0 || int64(len(m.Data)+HeaderSize(m.Header))+replyRoom <= limit {
			return m
		}
	}
}

// HeaderSize is h's size on the wire, what a message's headers add to its
// payload against a server's max payload: "NATS/1.0\r\n", a line per
// value and a blank line (nothing for no headers).
func HeaderSize(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// Reply builds the error reply message for e in codec.
func Reply(e *Error, codec Codec) *nats.Msg {
	m := nats.NewMsg("")
	for k, v := range e.Headers() {
		m.Header.Set(k, v)
	}
	m.Header.Set(HeaderContentType, codec.ContentType())
	body, err := codec.Marshal(Envelope{Error: e})
	if err != nil {
		body, _ = JSON.Marshal(Envelope{Error: Errorf(CodeInternal, "error envelope does not encode")})
		m.Header.Set(HeaderContentType, ContentJSON)
	}
	m.Data = body
	return m
}
