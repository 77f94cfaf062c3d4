package hook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// replyBuffer is the reply channel's size when no expected_replies bounds
// the collect. Replies are read as they come, so it only has to absorb a
// burst; a reply that finds it full is lost and counted in Dropped.
const replyBuffer = 64

// contentJSON is shared by every hook message's header; nats.go only reads it.
var contentJSON = []string{wire.ContentJSON}

// PublishCollect publishes req.Payload as JSON on the hook subject of
// req.Topic with a fresh inbox as reply subject, and collects the replies
// until the first of: req.ExpectedReplies replies (when > 0); the
// quiescence after the latest reply; the timeout (or ctx's deadline when it
// is earlier); a message past [MaxReplies] or [MaxReplyBytes], which sets
// [Result].Overflow. Reaching the deadline or a bound is not an error: the
// result holds what arrived. When nobody subscribes to the topic, the server answers at once
// with no-responders and PublishCollect returns an empty result at once.
//
// The message carries Content-Type application/json and Iii-Timeout-Ms (the
// time left to the collect's deadline), plus the headers of the options.
//
// Errors: an invalid request or option, or a publish that fails (closed or
// draining connection, payload over the server's max payload or not
// encodable as JSON), returns a result with PublishFailed set and an error
// wrapping [ErrPublishFailed]; a caller guarding a function call denies it.
// A ctx canceled before the publish returns ctx's error and publishes
// nothing; canceled during the collect, it returns what arrived with ctx's
// error. Replies that do not decode never fail the call: they are counted
// in [Result].Invalid.
//
// PublishCollect is safe for concurrent use; calls share nothing but nc.
func PublishCollect(ctx context.Context, nc *nats.Conn, req Request, opts ...Option) (Result, error) {
	var o options
	for _, opt := range opts {
		if opt == nil {
			return failed(req.Topic, fmt.Errorf("%w: nil option", engine.ErrInvalidOption))
		}
		if err := opt(&o); err != nil {
			return failed(req.Topic, err)
		}
	}
	if nc == nil {
		return failed(req.Topic, nats.ErrInvalidConnection)
	}
	subj, err := req.check()
	if err != nil {
		return failed(req.Topic, err)
	}
	if err := ctx.Err(); err != nil {
		return empty(), fmt.Errorf("hook: %q not published: %w", req.Topic, err)
	}
	data, err := json.Marshal(req.Payload)
	if err != nil {
		return failed(req.Topic, err)
	}

	deadline := time.Now().Add(req.timeout())
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	msg := &nats.Msg{Subject: subj, Data: data, Header: make(nats.Header, 2+len(o.header)+3)}
	for k, vs := range o.header {
		msg.Header[k] = vs
	}
	if o.inject != nil {
		o.inject(ctx, msg.Header)
	}
	msg.Header[wire.HeaderContentType] = contentJSON
	msg.Header[engine.HeaderTimeoutMs] = []string{strconv.FormatInt(max(time.Until(deadline).Milliseconds(), 1), 10)}

	bufSize := replyBuffer
	if n := req.ExpectedReplies; n > 0 {
		bufSize = n + 16 // room for the expected replies and a few more in flight
	}
	ch := make(chan *nats.Msg, bufSize)
	// The subscription goes out before the publish on the same connection,
	// so the server knows the inbox before any subscriber can answer.
	msg.Reply = nc.NewInbox()
	sub, err := nc.ChanSubscribe(msg.Reply, ch)
	if err != nil {
		return failed(req.Topic, err)
	}
	if err := nc.PublishMsg(msg); err != nil {
		_ = sub.Unsubscribe()
		return failed(req.Topic, err)
	}
	res, err := collect(ctx, req, ch, deadline)
	if n, derr := sub.Dropped(); derr == nil {
		res.Dropped = n
	}
	_ = sub.Unsubscribe()
	res.Merged = Merge(req.MergeRule, res.Replies)
	if err != nil {
		return res, fmt.Errorf("hook: %q collect: %w", req.Topic, err)
	}
	return res, nil
}

// collect reads replies from ch until one of the ends of [PublishCollect].
// It returns ctx's error only when ctx was canceled (a passed deadline is a
// normal end).
func collect(ctx context.Context, req Request, ch <-chan *nats.Msg, deadline time.Time) (Result, error) {
	r := round{res: Result{Replies: []map[string]any{}}, expected: req.ExpectedReplies}
	quiet := req.quiescence()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case m := <-ch:
			if !r.take(m) {
				return r.res, nil
			}
			next := time.Now().Add(quiet)
			if next.After(deadline) {
				next = deadline
			}
			timer.Reset(time.Until(next))
		case <-timer.C:
			// Replies already queued arrived in time: keep them.
			for n := len(ch); n > 0; n-- {
				if !r.take(<-ch) {
					break
				}
			}
			return r.res, nil
		case <-ctx.Done():
			if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
				return r.res, err
			}
			return r.res, nil
		}
	}
}

// round is one collect's progress.
type round struct {
	res      Result
	expected int // req.ExpectedReplies
	received int // messages read, invalid ones too
	bytes    int // their size on the wire
}

// take records message m and reports whether the round goes on: false
// after the expected replies, on a no-responders answer, or when m is over
// [MaxReplies] or [MaxReplyBytes]. Every message counts toward the bounds,
// invalid ones too, since each restarts the quiescence: m over a bound is
// not kept and the round ends with Overflow set.
func (r *round) take(m *nats.Msg) bool {
	size := m.Size()
	if r.received >= MaxReplies || r.bytes+size > MaxReplyBytes {
		r.res.Overflow = true
		return false
	}
	if !r.res.add(m, r.received == 0) {
		return false // no responders: nobody listens
	}
	r.received++
	r.bytes += size
	return r.expected == 0 || r.received < r.expected
}

// add records reply m, the first message of the collect when first; it
// returns false for the server's no-responders status. The server sends
// that status alone, instead of any reply: one after a reply is a
// subscriber's (a bare "Status: 503" header looks the same), invalid, and
// does not end the collect, whose later replies (a block) would be lost.
func (r *Result) add(m *nats.Msg, first bool) bool {
	rep, kind := decodeReply(m.Header, m.Data)
	switch kind {
	case replyNoResponders:
		if first {
			return false
		}
		r.Invalid++
	case replyInvalid:
		r.Invalid++
	default:
		r.Replies = append(r.Replies, rep)
	}
	return true
}

func empty() Result {
	return Result{Replies: []map[string]any{}, Merged: map[string]any{}}
}

func failed(topic string, err error) (Result, error) {
	res := empty()
	res.PublishFailed = true
	return res, fmt.Errorf("%w: %q: %w", ErrPublishFailed, topic, err)
}
