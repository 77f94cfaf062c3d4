package hook

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// contentJSON is shared by every hook message's header; nats.go only reads it.
var contentJSON = []string{wire.ContentJSON}

// PublishCollect publishes req.Payload as JSON on the hook subject of
// req.Topic with a fresh inbox as reply subject, and collects the replies
// until the first of: req.ExpectedReplies replies (when > 0); the
// quiescence after the latest reply; the timeout (or ctx's deadline when it
// is earlier); a message past [MaxReplies] or [MaxReplyBytes] (counted as
// it arrives) or one the client dropped, which sets [Result].Overflow. Reaching the deadline or a bound is not an error: the
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
	// Not json.Marshal: its HTML escaping grows each "<", ">" and "&" of
	// a payload (a result's markup) to six bytes, and a payload that fit
	// the max payload failed to publish, which denies a before-call round
	// and skips the after-call hooks (a redaction).
	data, err := wire.MarshalJSON(req.Payload)
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

	in := newInbox(req.ExpectedReplies)
	// The subscription goes out before the publish on the same connection,
	// so the server knows the inbox before any subscriber can answer.
	msg.Reply = nc.NewInbox()
	in.mu.Lock() // in.sub is set before any message can reach in.deliver
	sub, err := nc.Subscribe(msg.Reply, in.deliver)
	if err == nil {
		in.sub = sub
		// The client's own queue ahead of the handler holds at most the
		// round's bytes; what it drops ends the round with Overflow.
		err = sub.SetPendingLimits(pendingMsgs, MaxReplyBytes)
	}
	in.mu.Unlock()
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		return failed(req.Topic, err)
	}
	if err := nc.PublishMsg(msg); err != nil {
		_ = sub.Unsubscribe()
		return failed(req.Topic, err)
	}
	res, err := collect(ctx, req, in, deadline)
	res.Dropped = in.dropped
	_ = sub.Unsubscribe()
	res.Merged = Merge(req.MergeRule, res.Replies)
	if err != nil {
		return res, fmt.Errorf("hook: %q collect: %w", req.Topic, err)
	}
	return res, nil
}

// pendingMsgs bounds the messages the client queues for a round's handler
// (its bytes are bounded by MaxReplyBytes): the handler keeps up, so it
// only absorbs a burst.
const pendingMsgs = 16 * MaxReplies

// inbox is the reply side of one round. Its handler runs on the
// subscription's goroutine and counts every message against the round's
// bounds as it arrives, before queueing it: what the round holds — the
// queue and the replies read from it — never passes [MaxReplies] messages
// or [MaxReplyBytes] bytes. A message past a bound is not queued and ends
// the round with Overflow. (Counted only when read, the messages waiting
// in a channel, expected_replies + 16 of up to the max payload each, were
// held outside the bound.)
type inbox struct {
	ready    chan struct{} // signalled (capacity 1) when the queue grew
	over     chan struct{} // closed when the round overflowed
	expected int

	mu       sync.Mutex
	sub      *nats.Subscription
	queue    []*nats.Msg // arrived, not yet taken: never more than the bounds admit
	queued   int         // messages queued, invalid ones too
	bytes    int         // their size on the wire
	ended    bool        // later messages are not kept
	overflow bool
	dropped  int // what the client dropped until the end
}

func newInbox(expected int) *inbox {
	return &inbox{ready: make(chan struct{}, 1), over: make(chan struct{}), expected: expected}
}

// deliver is the subscription's handler. Messages after the expected
// replies are not kept: the round ends at them. A message the client
// dropped before this one (its queue was full) may have been a block, so
// it ends the round as a bound does.
func (in *inbox) deliver(m *nats.Msg) {
	size := m.Size()
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.ended || in.expected > 0 && in.queued >= in.expected:
		return
	case in.queued >= MaxReplies || in.bytes+size > MaxReplyBytes || in.lost():
		in.overflowLocked()
		return
	}
	in.queued++
	in.bytes += size
	in.queue = append(in.queue, m)
	select {
	case in.ready <- struct{}{}:
	default: // signalled already
	}
}

// take returns the messages queued since the last take, oldest first.
func (in *inbox) take() []*nats.Msg {
	in.mu.Lock()
	defer in.mu.Unlock()
	q := in.queue
	in.queue = nil
	return q
}

// end stops the queueing; a message the client dropped before counts as
// an overflow, since it arrived in time.
func (in *inbox) end() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.ended && in.lost() {
		in.overflowLocked()
	}
	in.endLocked()
}

func (in *inbox) overflowLocked() {
	if !in.overflow {
		in.overflow = true
		close(in.over)
	}
	in.endLocked()
}

// endLocked ends the round once: it counts what the client dropped and
// unsubscribes, so a flood stops reaching the client at once, not when
// the replies read so far are decoded.
func (in *inbox) endLocked() {
	if in.ended {
		return
	}
	in.ended = true
	if n, err := in.sub.Dropped(); err == nil {
		in.dropped = n
	}
	_ = in.sub.Unsubscribe()
}

func (in *inbox) overflowed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.overflow
}

// lost reports whether the client dropped a message of the round.
func (in *inbox) lost() bool {
	n, err := in.sub.Dropped()
	return err == nil && n > 0
}

// collect reads replies from in until one of the ends of [PublishCollect].
// It returns ctx's error only when ctx was canceled (a passed deadline is a
// normal end).
func collect(ctx context.Context, req Request, in *inbox, deadline time.Time) (Result, error) {
	r := round{res: Result{Replies: []map[string]any{}}, expected: req.ExpectedReplies}
	quiet := req.quiescence()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	// drain reads what was queued before the end: it arrived in time.
	drain := func() Result {
		in.end()
		for _, m := range in.take() {
			if !r.take(m) {
				return r.res
			}
		}
		r.res.Overflow = in.overflowed()
		return r.res
	}
	for {
		select {
		case <-in.ready:
			for _, m := range in.take() {
				if !r.take(m) {
					in.end()
					return r.res, nil
				}
			}
			next := time.Now().Add(quiet)
			if next.After(deadline) {
				next = deadline
			}
			timer.Reset(time.Until(next))
		case <-in.over:
			return drain(), nil
		case <-timer.C:
			return drain(), nil
		case <-ctx.Done():
			if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
				in.end()
				return r.res, err
			}
			return drain(), nil
		}
	}
}

// round is one collect's progress.
type round struct {
	res      Result
	expected int // req.ExpectedReplies
	received int // messages read, invalid ones too
}

// take records message m and reports whether the round goes on: false
// after the expected replies or on a no-responders answer. The bounds were
// counted when m arrived ([inbox.deliver]).
func (r *round) take(m *nats.Msg) bool {
	if !r.res.add(m, r.received == 0) {
		return false // no responders: nobody listens
	}
	r.received++
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
