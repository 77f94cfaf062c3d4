package scripted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/wire"
)

// ProviderName is the provider of the assistant messages a scripted model
// writes, and the <name> of its function ids.
const ProviderName = "scripted"

// The function ids the worker serves.
const (
	StreamFunction   = "provider::scripted::stream"
	CompleteFunction = "provider::scripted::complete"
	// ModelsFunction lists the provider's models (models::reconcile).
	ModelsFunction = "provider::scripted::models"
)

// imageBytes is what an image block counts for in the input tokens.
const imageBytes = 1024

// failFrameTimeout bounds the error frame a stream sends once its own
// context has ended.
const failFrameTimeout = 2 * time.Second

// Provider is a deterministic, offline model: it answers a transcript with
// the reply of the script of the requested model ([Echo] for "echo", or a
// [WithScript] script) and streams it as model events. It keeps no state
// between calls and is safe for concurrent use.
type Provider struct {
	o      options
	models []string
	sizes  transcriptSizes
}

// New returns a provider serving [EchoModel] and every model of
// [WithScript]. Options: [WithScript], [WithDeltaSize],
// [WithDeltaInterval], [WithClock].
func New(opts ...Option) (*Provider, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	models := make([]string, 0, len(o.scripts))
	for m := range o.scripts {
		models = append(models, m)
	}
	slices.Sort(models)
	return &Provider{o: o, models: models, sizes: transcriptSizes{m: map[string]transcriptSize{}}}, nil
}

// Models lists the models p serves, sorted.
func (p *Provider) Models() []string { return slices.Clone(p.models) }

// Events returns the model events a stream of req writes, in order, without
// the delays (req.Channel is not used and may be empty). A bad request or
// an unknown model is an invalid_payload wire error.
func (p *Provider) Events(req StreamRequest) ([]agent.ModelEvent, error) {
	if err := req.Request().Validate(); err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	pl, err := p.plan(req)
	if err != nil {
		return nil, err
	}
	return pl.events, nil
}

// Stream answers req into the channel req.Channel: one [agent.ModelEvent]
// per frame, ending with done (or with an error event for a scripted
// failure), then the channel's end frame. opts configure the channel
// writer (the worker passes the request's codec, so a JSON caller reads
// JSON frames).
//
// It returns why the model stopped. A bad request or an unknown model is an
// invalid_payload wire error and nothing is written. A reader that closed
// the channel is a canceled wire error; so is ctx's cancellation, and its
// deadline is a timeout one (a cause set with context.WithCancelCause that
// is a *wire.Error is returned as is); in those cases the channel ends with
// that error frame when the reader is still there to read it.
func (p *Provider) Stream(ctx context.Context, e *engine.Engine, req StreamRequest, opts ...channel.Option) (StreamResponse, error) {
	if err := req.Validate(); err != nil {
		return StreamResponse{}, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	return p.stream(ctx, e, req, opts...)
}

// stream is Stream of a request already validated (the worker validates
// only a continuation's new messages: the kept ones were validated when
// they came).
func (p *Provider) stream(ctx context.Context, e *engine.Engine, req StreamRequest, opts ...channel.Option) (StreamResponse, error) {
	if e == nil {
		return StreamResponse{}, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	pl, err := p.plan(req)
	if err != nil {
		return StreamResponse{}, err
	}
	w, err := channel.NewWriter(e, req.Channel, opts...)
	if err != nil {
		return StreamResponse{}, err
	}
	seenDelta := false
	var (
		batch      []agent.ModelEvent // ready events not written yet (EventBatches)
		batchBytes int
	)
	flush := func() error {
		var err error
		switch len(batch) {
		case 0:
			return nil
		case 1:
			err = w.Write(ctx, &batch[0])
		default:
			err = w.Write(ctx, batch)
		}
		batch, batchBytes = batch[:0], 0
		return err
	}
	for i := range pl.events {
		ev := &pl.events[i]
		var d time.Duration
		if i == pl.first {
			d = pl.delay
		}
		if isDelta(ev.Type) {
			if seenDelta {
				d += pl.pace
			}
			seenDelta = true
		}
		if d > 0 {
			if err := flush(); err != nil {
				return abort(ctx, w, err)
			}
			// A stream that waits notices a reader that left at once,
			// not only at its next frame (channel.Writer.Sleep). The
			// wait is a model thinking, bounded here (MaxSleep), so it
			// is Busy as a real provider's silent API is: the channel's
			// idle timeout on either side does not count it.
			busy := w.Busy()
			err := w.Sleep(ctx, d)
			busy()
			if err != nil {
				return abort(ctx, w, err)
			}
		}
		if !req.EventBatches {
			if err := w.Write(ctx, ev); err != nil {
				return abort(ctx, w, err)
			}
			continue
		}
		size := eventSize(ev)
		if len(batch) > 0 && (len(batch) >= maxBatchEvents || batchBytes+size > maxBatchBytes) {
			if err := flush(); err != nil {
				return abort(ctx, w, err)
			}
		}
		batch = append(batch, *ev)
		batchBytes += size
	}
	if err := flush(); err != nil {
		return abort(ctx, w, err)
	}
	if err := w.Close(ctx); err != nil {
		return abort(ctx, w, err)
	}
	if ref := req.Transcript; ref != nil && ref.ID != "" {
		p.sizes.put(ref.ID, transcriptSize{n: len(req.Messages), bytes: pl.msgBytes})
	}
	return StreamResponse{StopReason: pl.stop, Kind: pl.kind}, nil
}

// Bounds of one frame of events (EventBatches): an event bigger than
// maxBatchBytes goes alone.
const (
	maxBatchEvents = 256
	maxBatchBytes  = 32 << 10
)

// eventSize estimates the encoded size of ev, for the batch bound.
func eventSize(ev *agent.ModelEvent) int {
	n := 48 + len(ev.Delta) + len(ev.ID) + len(ev.FunctionID) + len(ev.Error)
	if ev.Content != nil {
		n += agent.MessageSize(agent.Message{Content: []agent.Content{*ev.Content}})
	}
	if ev.Message != nil {
		n += agent.MessageSize(*ev.Message)
	}
	return n
}

// Complete answers req with the final assistant message, after the
// reply's delay. A scripted failure is a coded wire error whose details
// carry the kind ({"kind", "retry_after_ms"?}): rate_limited and transient
// are unavailable (retryable), auth_expired is forbidden, context_overflow
// is invalid_payload, permanent is internal. A bad request or an unknown
// model is invalid_payload; ctx's end is canceled or timeout.
func (p *Provider) Complete(ctx context.Context, req CompleteRequest) (CompleteResponse, error) {
	if err := req.Validate(); err != nil {
		return CompleteResponse{}, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	pl, err := p.plan(req.Stream(""))
	if err != nil {
		return CompleteResponse{}, err
	}
	if pl.delay > 0 {
		t := time.NewTimer(pl.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return CompleteResponse{}, ctxError(ctx)
		}
	}
	if pl.kind != "" {
		return CompleteResponse{}, failureError(pl.kind, pl.failure, pl.retryAfter)
	}
	return CompleteResponse{Message: *pl.message}, nil
}

// abort ends a stream that could not finish and returns the function's
// error: canceled when the reader is gone, else the cause (ctx's end, an
// oversized frame, a connection error), which the reader gets as an error
// frame.
func abort(ctx context.Context, w *channel.Writer, err error) (StreamResponse, error) {
	if errors.Is(err, channel.ErrReaderGone) {
		_ = w.Close(ctx) // releases the writer; nothing is sent to a reader that is gone
		return StreamResponse{}, wire.Wrap(wire.CodeCanceled, err, "the reader left the channel")
	}
	var werr *wire.Error
	if ctx.Err() != nil {
		werr = ctxError(ctx)
	} else {
		werr = wire.From(err)
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failFrameTimeout)
	defer cancel()
	_ = w.Fail(fctx, werr)
	return StreamResponse{}, werr
}

// ctxError is the wire error of an ended ctx: its cause when that is a
// *wire.Error, timeout for a deadline, canceled otherwise.
func ctxError(ctx context.Context) *wire.Error {
	cause := context.Cause(ctx)
	var werr *wire.Error
	if errors.As(cause, &werr) {
		return werr
	}
	if errors.Is(cause, context.DeadlineExceeded) {
		return wire.Wrap(wire.CodeTimeout, cause, "the stream ran out of time")
	}
	return wire.Wrap(wire.CodeCanceled, cause, "the stream was canceled")
}

// failureError is the coded error of a scripted failure for complete.
func failureError(kind agent.ErrorKind, msg string, retryAfter time.Duration) *wire.Error {
	var code wire.Code
	switch kind {
	case agent.ErrorRateLimited, agent.ErrorTransient:
		code = wire.CodeUnavailable
	case agent.ErrorAuthExpired:
		code = wire.CodeForbidden
	case agent.ErrorContextOverflow:
		code = wire.CodeInvalidPayload
	default:
		code = wire.CodeInternal
	}
	details := map[string]any{"kind": string(kind)}
	if retryAfter > 0 {
		details["retry_after_ms"] = retryAfter.Milliseconds()
	}
	return wire.Errorf(code, "%s", msg).WithDetails(details)
}

func isDelta(t agent.ModelEventType) bool {
	return t == agent.ModelTextDelta || t == agent.ModelThinkingDelta || t == agent.ModelFunctionCallDelta
}

// plan is one answer, ready to stream.
type plan struct {
	events []agent.ModelEvent
	// first is the index of the event the delay precedes: the one after
	// start.
	first int
	delay time.Duration
	pace  time.Duration
	// message is the done event's message; nil for a failure.
	message    *agent.Message
	stop       agent.StopReason
	kind       agent.ErrorKind
	failure    string
	retryAfter time.Duration
	// msgBytes is what the request's messages count for the input.
	msgBytes int
}

// plan runs the script of req.Model and lays out its reply as events.
func (p *Provider) plan(req StreamRequest) (*plan, error) {
	fn, ok := p.o.scripts[req.Model]
	if !ok {
		return nil, wire.Wrap(wire.CodeInvalidPayload,
			fmt.Errorf("%w %q (this provider serves %s)", ErrUnknownModel, req.Model, strings.Join(p.models, ", ")), "")
	}
	if err := checkPairs(req.Messages); err != nil {
		// What a vendor's API answers (HTTP 400) to such a transcript.
		return p.build(req, Reply{Fail: agent.ErrorPermanent, FailMessage: err.Error()})
	}
	r, err := runScript(fn, req)
	if err != nil {
		if errors.Is(err, wire.ErrInvalidPayload) {
			return nil, err
		}
		r = Reply{Fail: agent.ErrorPermanent, FailMessage: err.Error()}
	}
	pl, err := p.build(req, r)
	if err != nil {
		pl, _ = p.build(req, Reply{Fail: agent.ErrorPermanent, FailMessage: err.Error()})
	}
	return pl, nil
}

// checkPairs refuses a transcript the vendors' APIs refuse: a
// function_result after the last assistant message that answers none of
// its calls, or answers one a second time. A harness that shows the model
// a result twice (a recovery that appended it again) fails here, in tests,
// as it would against a real provider. Only the tail after the last
// assistant message is checked, so a long session's call costs what its
// new messages do (earlier calls checked the rest).
func checkPairs(msgs []agent.Message) error {
	last := len(msgs) - 1
	for last >= 0 && msgs[last].Role != agent.RoleAssistant {
		last--
	}
	var open map[string]bool // call id → answered
	if last >= 0 {
		for _, c := range msgs[last].Content {
			if c.Type == agent.ContentFunctionCall {
				if open == nil {
					open = map[string]bool{}
				}
				open[c.ID] = false
			}
		}
	}
	for i := last + 1; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role != agent.RoleFunctionResult {
			continue
		}
		answered, called := open[m.FunctionCallID]
		switch {
		case !called:
			return fmt.Errorf("invalid transcript: messages[%d] is the result of function call %q, which the assistant message before it did not make", i, m.FunctionCallID)
		case answered:
			return fmt.Errorf("invalid transcript: messages[%d] answers function call %q a second time", i, m.FunctionCallID)
		}
		open[m.FunctionCallID] = true
	}
	return nil
}

// runScript calls fn, turning a panic into an error.
func runScript(fn ScriptFunc, req StreamRequest) (r Reply, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("scripted: the script of model %q panicked: %v", req.Model, v)
		}
	}()
	return fn(req)
}

// build lays out r as the events of a stream.
func (p *Provider) build(req StreamRequest, r Reply) (*plan, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	calls, args, err := p.calls(req, r.Calls)
	if err != nil {
		return nil, err
	}
	ts := p.o.now().UnixMilli()
	// content starts empty, not nil: an answer with no blocks is done with
	// "content": [], as its start event and the other providers' are.
	b := builder{size: p.o.deltaSize, budget: -1, content: []agent.Content{}}
	if req.MaxTokens > 0 && req.MaxTokens <= math.MaxInt/4 {
		b.budget = req.MaxTokens * 4
	}
	b.events = append(b.events, agent.ModelEvent{Type: agent.ModelStart, Message: &agent.Message{
		Role: agent.RoleAssistant, Content: []agent.Content{}, Timestamp: ts, Model: req.Model, Provider: ProviderName,
	}})
	b.block(agent.ContentThinking, r.Thinking)
	b.block(agent.ContentText, r.Text)
	for i := range calls {
		b.call(calls[i], args[i])
	}
	msgBytes := p.messageBytes(req)
	usage := agent.Usage{InputTokens: tokens(len(req.SystemPrompt) + msgBytes + toolBytes(req.Tools)), OutputTokens: tokens(b.out)}
	msg := &agent.Message{
		Role: agent.RoleAssistant, Content: b.content, Timestamp: ts,
		Usage: &usage, Model: req.Model, Provider: ProviderName,
	}
	pl := &plan{first: 1, delay: r.Delay, pace: r.Pace, msgBytes: msgBytes}
	if pl.pace == 0 {
		pl.pace = p.o.pace
	}
	if r.Fail != "" {
		pl.stop, pl.kind, pl.retryAfter = agent.StopError, r.Fail, r.RetryAfter
		pl.failure = r.FailMessage
		if pl.failure == "" {
			pl.failure = "scripted failure: " + string(r.Fail)
		}
		msg.StopReason, msg.ErrorMessage = agent.StopError, pl.failure
		ev := agent.ModelEvent{Type: agent.ModelError, Kind: r.Fail, Error: pl.failure, RetryAfterMs: r.RetryAfter.Milliseconds()}
		if len(b.content) == 0 {
			// The call failed before anything streamed, as an HTTP error
			// of a real provider does: the error is the only event.
			pl.events, pl.first = []agent.ModelEvent{ev}, 0
			return pl, nil
		}
		ev.Message = msg
		pl.events = append(b.events, agent.ModelEvent{Type: agent.ModelUsage, Usage: &usage}, ev)
		return pl, nil
	}
	switch {
	case b.cut:
		msg.StopReason = agent.StopLength
	case r.StopReason != "":
		msg.StopReason = r.StopReason
	case len(calls) > 0:
		msg.StopReason = agent.StopFunctionCall
	default:
		msg.StopReason = agent.StopEnd
	}
	if err := msg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidReply, err)
	}
	pl.stop, pl.message = msg.StopReason, msg
	pl.events = append(b.events,
		agent.ModelEvent{Type: agent.ModelUsage, Usage: &usage},
		agent.ModelEvent{Type: agent.ModelStop, StopReason: msg.StopReason},
		agent.ModelEvent{Type: agent.ModelDone, Message: msg})
	return pl, nil
}

// calls turns the reply's calls into function_call blocks and their JSON
// arguments, deriving the missing ids.
func (p *Provider) calls(req StreamRequest, calls []Call) ([]agent.Content, []string, error) {
	if len(calls) == 0 {
		return nil, nil, nil
	}
	blocks := make([]agent.Content, len(calls))
	args := make([]string, len(calls))
	prefix := callIDPrefix(req)
	seen := make(map[string]bool, len(calls))
	for i, c := range calls {
		id := c.ID
		if id == "" {
			id = prefix + strconv.Itoa(i+1)
		}
		blocks[i] = agent.Content{Type: agent.ContentFunctionCall, ID: id, FunctionID: c.FunctionID, Arguments: c.Arguments}
		if err := blocks[i].Validate(); err != nil {
			return nil, nil, fmt.Errorf("%w: calls[%d]: %w", ErrInvalidReply, i, err)
		}
		if seen[id] {
			return nil, nil, fmt.Errorf("%w: calls[%d]: duplicate call id %q", ErrInvalidReply, i, id)
		}
		seen[id] = true
		args[i] = "{}"
		if len(c.Arguments) > 0 {
			js, err := wire.MarshalJSON(c.Arguments)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: calls[%d]: arguments do not encode as JSON: %v", ErrInvalidReply, i, err)
			}
			args[i] = string(js)
		}
	}
	return blocks, args, nil
}

// callIDPrefix derives the ids of a reply's calls from the request's
// position in its session (the number of messages so far) and its last
// message, so that the same request always gets the same ids and two model
// calls of one session never share one: "call_<12 hex digits>_<n>".
func callIDPrefix(req StreamRequest) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(req.Model))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(strconv.AppendInt(nil, int64(len(req.Messages)), 10))
	if n := len(req.Messages); n > 0 {
		last := req.Messages[n-1]
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(last.Role))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(textOf(last.Content)))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(last.FunctionCallID))
	}
	return fmt.Sprintf("call_%012x_", h.Sum64()>>16)
}

// tokens converts bytes into the scripted token count: one token per four
// bytes, rounded up.
func tokens(n int) int64 { return int64((n + 3) / 4) }

// messageBytes is the size of req's messages as the model reads them
// (text; a call's function id and arguments; a fixed size per image). A
// continuation of a transcript this provider answered before counts only
// its new messages: the bench's long session would otherwise rescan its
// whole transcript on every call. The figure is the scripted models' own
// estimate (real providers report usage), so two concurrent calls on one
// transcript may leave a slightly stale count for the next.
func (p *Provider) messageBytes(req StreamRequest) int {
	msgs, n := req.Messages, 0
	if ref := req.Transcript; ref != nil && ref.Base > 0 {
		if s, ok := p.sizes.get(ref.ID); ok && s.n == ref.Base && s.n <= len(msgs) {
			msgs, n = msgs[s.n:], s.bytes
		}
	}
	for _, m := range msgs {
		for _, c := range m.Content {
			switch c.Type {
			case agent.ContentImage:
				n += imageBytes
			case agent.ContentFunctionCall:
				n += len(c.FunctionID) + len("{}")
				if len(c.Arguments) > 0 {
					n += jsonLen(c.Arguments) - len("{}")
				}
			default:
				n += len(c.Text)
			}
		}
	}
	return n
}

func toolBytes(tools []any) int {
	n := 0
	for _, t := range tools {
		n += jsonLen(t)
	}
	return n
}

// transcriptSizes remembers the message bytes of the transcripts streamed
// last, by transcript id; bounded (it forgets everything past
// maxTranscriptSizes ids, as a cache may).
type transcriptSizes struct {
	mu sync.Mutex
	m  map[string]transcriptSize
}

type transcriptSize struct{ n, bytes int }

const maxTranscriptSizes = 4096

func (t *transcriptSizes) get(id string) (transcriptSize, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	return s, ok
}

func (t *transcriptSizes) put(id string, s transcriptSize) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[id]; !ok && len(t.m) >= maxTranscriptSizes {
		clear(t.m)
	}
	t.m[id] = s
}

func jsonLen(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

// builder accumulates the content blocks of an answer and their events,
// within an output budget.
type builder struct {
	size    int // largest delta
	budget  int // output bytes allowed; negative: unbounded
	out     int // output bytes so far
	cut     bool
	events  []agent.ModelEvent
	content []agent.Content
}

// block streams a text or thinking block, cut at the budget.
func (b *builder) block(t agent.ContentType, text string) {
	if text == "" || b.cut {
		return
	}
	if b.budget >= 0 && b.out+len(text) > b.budget {
		text = prefix(text, b.budget-b.out)
		b.cut = true
		if text == "" {
			return
		}
	}
	start, delta, end := agent.ModelTextStart, agent.ModelTextDelta, agent.ModelTextEnd
	if t == agent.ContentThinking {
		start, delta, end = agent.ModelThinkingStart, agent.ModelThinkingDelta, agent.ModelThinkingEnd
	}
	i := len(b.content)
	b.events = append(b.events, agent.ModelEvent{Type: start, Index: i})
	b.deltas(delta, i, text)
	c := agent.Content{Type: t, Text: text}
	b.content = append(b.content, c)
	b.events = append(b.events, agent.ModelEvent{Type: end, Index: i, Content: &c})
	b.out += len(text)
}

// call streams a function call; a call that does not fit the budget is
// dropped whole.
func (b *builder) call(c agent.Content, args string) {
	if b.cut {
		return
	}
	cost := len(c.FunctionID) + len(args)
	if b.budget >= 0 && b.out+cost > b.budget {
		b.cut = true
		return
	}
	i := len(b.content)
	b.events = append(b.events, agent.ModelEvent{Type: agent.ModelFunctionCallStart, Index: i, ID: c.ID, FunctionID: c.FunctionID})
	b.deltas(agent.ModelFunctionCallDelta, i, args)
	b.content = append(b.content, c)
	b.events = append(b.events, agent.ModelEvent{Type: agent.ModelFunctionCallEnd, Index: i, Content: &c})
	b.out += cost
}

// deltas splits s into deltas of at most size bytes that do not split a
// UTF-8 character (a character longer than size makes a delta alone).
func (b *builder) deltas(t agent.ModelEventType, i int, s string) {
	for s != "" {
		n := len(s)
		if n > b.size {
			n = len(prefix(s, b.size))
			if n == 0 {
				_, n = utf8.DecodeRuneInString(s)
			}
		}
		b.events = append(b.events, agent.ModelEvent{Type: t, Index: i, Delta: s[:n]})
		s = s[n:]
	}
}

// prefix is the longest prefix of s of at most n bytes that ends on a
// character boundary.
func prefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
