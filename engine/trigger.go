package engine

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Trigger calls function id synchronously: req is encoded with the engine's
// codec, the reply is decoded into resp (which may be nil to discard it, or
// a *Raw to keep the bytes). A context without a deadline gets the engine's
// default timeout. Every failure is a *wire.Error: function_not_found at
// once when nobody serves id, timeout, invalid_payload for an oversized
// request, or the function's own coded error.
func (e *Engine) Trigger(ctx context.Context, id string, req, resp any) error {
	msg, err := e.newCall(ctx, id, req, e.opts.codec)
	if err != nil {
		return err
	}
	ctx, cancel := e.withDeadline(ctx)
	defer cancel()
	setTimeoutHeader(ctx, msg)
	_, aliased := req.(Raw) // the body is the caller's own buffer
	reply, err := e.request(ctx, msg, aliased)
	if err != nil {
		return err
	}
	if werr := wire.Decode(reply); werr != nil {
		return werr
	}
	return decodeReply(reply, resp)
}

// Call is [Engine.Trigger] with a typed response.
func Call[Resp any](ctx context.Context, e *Engine, id string, req any) (Resp, error) {
	var resp Resp
	err := e.Trigger(ctx, id, req, &resp)
	return resp, err
}

// TriggerRaw calls id with a pre-encoded body in codec and returns the raw
// reply (error replies are decoded into a *wire.Error).
func (e *Engine) TriggerRaw(ctx context.Context, id string, body []byte, codec wire.Codec) ([]byte, wire.Codec, error) {
	msg, err := e.newCall(ctx, id, Raw(body), codec)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := e.withDeadline(ctx)
	defer cancel()
	setTimeoutHeader(ctx, msg)
	reply, err := e.request(ctx, msg, true)
	if err != nil {
		return nil, nil, err
	}
	if werr := wire.Decode(reply); werr != nil {
		return nil, nil, werr
	}
	return reply.Data, wire.ForContentType(reply.Header.Get(wire.HeaderContentType)), nil
}

// Void calls id fire-and-forget: a publish with no reply subject. Nothing
// reports whether anyone received it.
func (e *Engine) Void(ctx context.Context, id string, req any) error {
	msg, err := e.newCall(ctx, id, req, e.opts.codec)
	if err != nil {
		return err
	}
	if err := e.nc.PublishMsg(msg); err != nil {
		return wire.FromNATS(err)
	}
	return nil
}

// setTimeoutHeader tells the handler how long its caller will wait.
func setTimeoutHeader(ctx context.Context, msg *nats.Msg) {
	if dl, ok := ctx.Deadline(); ok {
		// Under a millisecond left is 1, not no header: without one a
		// handler would take the default timeout, far past the caller's.
		if left := time.Until(dl); left > 0 {
			msg.Header.Set(HeaderTimeoutMs, strconv.FormatInt(max(left.Milliseconds(), 1), 10))
		}
	}
}

func (e *Engine) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, e.opts.timeout)
}

// newCall builds the request message: subject from the id, body in codec,
// Content-Type and trace headers.
func (e *Engine) newCall(ctx context.Context, id string, req any, codec wire.Codec) (*nats.Msg, error) {
	subj, err := subjects.FunctionSubject(id)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	body, err := Encode(codec, req)
	if err != nil {
		return nil, err
	}
	if max := e.nc.MaxPayload(); int64(len(body)) > max {
		return nil, wire.Errorf(wire.CodeInvalidPayload, "payload of %d bytes exceeds the server's max payload of %d bytes", len(body), max).
			WithDetails(map[string]any{"max_payload": max, "size": len(body)})
	}
	msg := &nats.Msg{Subject: subj, Data: body, Header: make(nats.Header, 4)}
	msg.Header.Set(wire.HeaderContentType, codec.ContentType())
	e.Inject(ctx, msg.Header)
	return msg, nil
}

// Encode encodes v in codec; a [Raw] value passes through and nil becomes an
// empty object.
func Encode(codec wire.Codec, v any) ([]byte, error) {
	switch x := v.(type) {
	case Raw:
		return x, nil
	case nil:
		v = struct{}{}
	}
	b, err := codec.Marshal(v)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "request does not encode")
	}
	return b, nil
}

func decodeReply(reply *nats.Msg, resp any) error {
	switch r := resp.(type) {
	case nil:
		return nil
	case *Raw:
		*r = append((*r)[:0], reply.Data...)
		return nil
	}
	codec := wire.ForContentType(reply.Header.Get(wire.HeaderContentType))
	if err := codec.Unmarshal(reply.Data, resp); err != nil {
		return wire.Wrap(wire.CodeInternal, nil, "reply does not decode: %v", err)
	}
	return nil
}

// Enqueue publishes a call of function id onto the durable queue named
// queue; a queue consumer (package engine/queue) runs it with retries and
// dead-lettering. opts may set a deduplication id. The call is durable once
// Enqueue returns nil.
func (e *Engine) Enqueue(ctx context.Context, queue, id string, req any, opts ...EnqueueOption) error {
	var o enqueueOptions
	for _, opt := range opts {
		opt(&o)
	}
	subj, err := subjects.QueueSubject(queue)
	if err != nil {
		return wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	msg, err := e.newCall(ctx, id, req, e.opts.codec)
	if err != nil {
		return err
	}
	msg.Subject = subj
	msg.Header.Set(HeaderFunctionID, id)
	if o.msgID != "" {
		msg.Header.Set(nats.MsgIdHdr, o.msgID)
	}
	if err := checkStoredCall(msg, e.nc.MaxPayload(), QueueHeaderRoom(queue)); err != nil {
		return err
	}
	if _, err := e.EnsureStream(ctx, QueueStreamConfig(e.opts.replicas)); err != nil {
		return err
	}
	ctx, cancel := e.withDeadline(ctx)
	defer cancel()
	_, err = e.js.PublishMsg(ctx, msg)
	if e.ForgetStream(subjects.QueueStream, err) {
		// The stream was deleted under this engine: nothing stored the
		// message, so it is sent again once the stream is there again.
		if _, err = e.EnsureStream(ctx, QueueStreamConfig(e.opts.replicas)); err == nil {
			_, err = e.js.PublishMsg(ctx, msg)
		}
	}
	if err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			return wire.Wrap(wire.CodeInvalidPayload, err, "enqueue on %q", queue)
		}
		return wire.Wrap(wire.CodeUnavailable, err, "enqueue on %q", queue)
	}
	return nil
}

// HeaderFunctionID names the function a queued or topic message is for.
const HeaderFunctionID = "Iii-Function-Id"

// EnqueueOption configures one [Engine.Enqueue].
type EnqueueOption func(*enqueueOptions)

type enqueueOptions struct{ msgID string }

// WithDedupID makes JetStream drop a second enqueue with the same id inside
// the stream's duplicate window (2 minutes).
func WithDedupID(id string) EnqueueOption {
	return func(o *enqueueOptions) { o.msgID = id }
}
