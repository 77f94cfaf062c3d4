package engine

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span attribute and baggage keys iii sets on every span.
const (
	AttrFunctionID = "iii.function.id"
	AttrSessionID  = "iii.session.id"
	AttrMessageID  = "iii.message.id"
)

// HeaderCarrier adapts nats.Header to OpenTelemetry propagation. Unlike
// propagation.HeaderCarrier it does not canonicalise keys: nats.Header is
// case-sensitive, and W3C clients (the nats CLI among them) send lower-case
// "traceparent". Get falls back to a case-insensitive match.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key, matched exactly, then case-insensitively.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set replaces key's values.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes ctx's trace context and baggage into h.
func (e *Engine) Inject(ctx context.Context, h nats.Header) {
	e.opts.prop.Inject(ctx, HeaderCarrier(h))
}

// Extract reads trace context and baggage from h into ctx.
func (e *Engine) Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return e.opts.prop.Extract(ctx, HeaderCarrier(h))
}

// WithSession returns ctx with baggage iii.session.id (and iii.message.id when
// messageID is not empty), so that every span downstream of ctx, in any
// process, carries them. A message id ctx carries for another session is
// dropped when messageID is empty: it named a message of that session.
func WithSession(ctx context.Context, sessionID, messageID string) context.Context {
	b := baggage.FromContext(ctx)
	if cur := b.Member(AttrSessionID).Value(); sessionID != "" && cur != "" && cur != sessionID {
		b = b.DeleteMember(AttrMessageID)
	}
	if sessionID != "" {
		if m, err := baggage.NewMemberRaw(AttrSessionID, sessionID); err == nil {
			if nb, err := b.SetMember(m); err == nil {
				b = nb
			}
		}
	}
	if messageID != "" {
		if m, err := baggage.NewMemberRaw(AttrMessageID, messageID); err == nil {
			if nb, err := b.SetMember(m); err == nil {
				b = nb
			}
		}
	}
	return baggage.ContextWithBaggage(ctx, b)
}

// SessionFromContext returns the session and message ids a call carries in
// its baggage ([WithSession] on the caller's side; a handler's ctx holds
// the caller's baggage). Both are empty for a call made outside a session.
// A tool that works on a session's resources takes the session from here,
// never from its arguments, which the model writes.
func SessionFromContext(ctx context.Context) (sessionID, messageID string) {
	return idsFromBaggage(ctx)
}

// idsFromBaggage returns the session and message ids carried in ctx.
func idsFromBaggage(ctx context.Context) (sid, mid string) {
	b := baggage.FromContext(ctx)
	return b.Member(AttrSessionID).Value(), b.Member(AttrMessageID).Value()
}

// maxSpanIDLen bounds a session or message id a handler's span takes
// from its payload: what W3C baggage, the ids' other carrier, holds in one
// member (a session id is at most subjects.MaxIDLen; a message id is the
// caller's, free-form).
const maxSpanIDLen = 4096

// startHandlerSpan starts the server span of one function invocation, named
// after the function id, with the iii attributes from baggage or, failing
// that, from the payload's session_id / message_id fields.
func (e *Engine) startHandlerSpan(ctx context.Context, fnID string, req *Request) (context.Context, trace.Span) {
	ctx, span := e.tracer.Start(ctx, fnID, trace.WithSpanKind(trace.SpanKindServer))
	if !span.IsRecording() {
		return ctx, span
	}
	sid, mid := idsFromBaggage(ctx)
	// The payload is read only when the baggage names no session (a call
	// from outside a run): decoding it means walking all of it, which for
	// a model request is the whole transcript.
	if sid == "" {
		var ids struct {
			SessionID string `json:"session_id"`
			MessageID string `json:"message_id"`
		}
		if req.Codec.Unmarshal(req.Data, &ids) == nil {
			// An id longer than any valid one is left out: a caller's
			// megabyte "id" was kept in the span, the SDK bounding no
			// attribute by default.
			if sid == "" && len(ids.SessionID) <= maxSpanIDLen {
				sid = ids.SessionID
			}
			if mid == "" && len(ids.MessageID) <= maxSpanIDLen {
				mid = ids.MessageID
			}
		}
	}
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs, attribute.String(AttrFunctionID, fnID))
	if sid != "" {
		attrs = append(attrs, attribute.String(AttrSessionID, sid))
	}
	if mid != "" {
		attrs = append(attrs, attribute.String(AttrMessageID, mid))
	}
	span.SetAttributes(attrs...)
	return ctx, span
}
