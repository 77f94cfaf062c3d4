package wire

import (
	"context"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"
)

// FromNATS maps a request-side error from nats.go onto a catalog code.
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
		errors.Is(err, nats.ErrDisconnected):
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
	var env Envelope
	codec := ForContentType(msg.Header.Get(HeaderContentType))
	if len(msg.Data) > 0 && codec.Unmarshal(msg.Data, &env) == nil && env.Error != nil && env.Error.Code != "" {
		e := env.Error
		if _, known := Lookup(e.Code); !known {
			// A foreign worker's own code: keep its text, classify as internal.
			e = &Error{Code: CodeInternal, Message: string(e.Code) + ": " + e.Message, Retryable: e.Retryable, Details: e.Details}
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
