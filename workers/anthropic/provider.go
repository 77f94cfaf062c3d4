package anthropic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/agent/modelframe"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/internal/httpbody"
)

// ProviderName is the provider of the assistant messages this worker
// writes, and the <name> of its function ids.
const ProviderName = "anthropic"

// The function ids the worker serves.
const (
	StreamFunction   = "provider::anthropic::stream"
	CompleteFunction = "provider::anthropic::complete"
	ModelsFunction   = "provider::anthropic::models"
)

// oauthBeta is the anthropic-beta flag the Messages API wants with an
// OAuth bearer token.
const oauthBeta = "oauth-2025-04-20"

// failFrameTimeout bounds the error frame a stream sends once its own
// context has ended.
const failFrameTimeout = 2 * time.Second

// MaxModels bounds the models provider::anthropic::models lists (and so
// the pages it fetches): models::reconcile takes no more
// (models.MaxProviderModels). A longer listing fails rather than being
// cut, since reconcile would read a cut one as the whole list and mark the
// models past the cut missing.
const MaxModels = 4096

var (
	// errReaderGone ends a stream whose reader cancelled the channel while
	// the provider waited on the API.
	errReaderGone = fmt.Errorf("%w: the reader cancelled the channel", channel.ErrReaderGone)
	// errStalled ends an attempt whose server stayed silent for the idle
	// timeout.
	errStalled = errors.New("the stream stalled (nothing received for the idle timeout)")
	// errDropped ends an attempt whose stream ended before message_stop.
	errDropped = fmt.Errorf("the stream ended before message_stop: %w", io.ErrUnexpectedEOF)
)

// Provider calls the Anthropic Messages API for agent.ProviderRequests and
// streams the answers as model events. It is safe for concurrent use; the
// only state it keeps between calls is the cached credential.
type Provider struct {
	o      options
	client sdk.Client
	creds  *credentials
}

// New returns a provider. Options: [WithHTTPClient], [WithBaseURL],
// [WithMaxRetries], [WithBackoff], [WithMaxRetryWait],
// [WithCredentialTTL], [WithIdleTimeout], [WithAPIKeyEnv],
// [WithCoalesce], [WithEnvLookup], [WithLogger], [WithClock].
func New(opts ...Option) (*Provider, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	client := sdk.NewClient(
		// The provider resolves credentials itself, per call; the SDK must
		// read nothing from the environment or a profile on disk.
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(o.baseURL),
		option.WithHTTPClient(o.httpClient),
		// Retries are the provider's, and only before anything streamed.
		option.WithMaxRetries(0),
		// The engine traces the function call; request and answer content
		// stay out of the SDK's spans whatever the environment says.
		option.WithOpenTelemetryTracesContentMode(option.OpenTelemetryContentModeMetadataOnly),
		// The SDK reads an error response's body whole: cap it.
		option.WithMiddleware(httpbody.TruncateErrors(maxErrorResponse)),
	)
	return &Provider{
		o:      o,
		client: client,
		creds:  &credentials{ttl: o.credentialTTL, now: o.now, lookupEnv: o.lookupEnv, envName: o.apiKeyEnv},
	}, nil
}

func (p *Provider) logger(e *engine.Engine) *slog.Logger {
	if p.o.logger != nil {
		return p.o.logger
	}
	return e.Logger()
}

// Stream answers req into the channel req.Channel: one [agent.ModelEvent]
// per frame (start, the content blocks' start/delta/end, usage, stop,
// done), then the channel's end frame. opts configure the channel writer
// (the worker passes the request's codec, so a JSON caller reads JSON
// frames).
//
// A failure of the API (after the retries, which happen only before the
// first event) is an error event {kind, error, message: the partial
// answer} and the reply {stop_reason: "error", kind}. A bad request is an
// invalid_payload wire error and nothing is written. A reader that closed
// the channel stops the call at once (the reply is canceled); ctx's end is
// canceled or timeout, sent to the reader as the channel's error frame.
func (p *Provider) Stream(ctx context.Context, e *engine.Engine, req StreamRequest, opts ...channel.Option) (StreamResponse, error) {
	return p.stream(ctx, e, req, nil, opts...)
}

// stream is [Provider.Stream] with the codec of the frames when the caller
// knows it (the worker: the request's), so that delta events are encoded
// by hand ([modelframe.AppendDelta]); nil leaves every event to the writer's
// codec, which opts set.
func (p *Provider) stream(ctx context.Context, e *engine.Engine, req StreamRequest, codec wire.Codec, opts ...channel.Option) (StreamResponse, error) {
	if e == nil {
		return StreamResponse{}, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	if err := req.Validate(); err != nil {
		return StreamResponse{}, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	m, err := buildParams(agent.ProviderRequest(req))
	if err != nil {
		return StreamResponse{}, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if codec != nil {
		opts = append(opts, channel.WithCodec(codec))
	}
	if len(p.o.channel) > 0 {
		opts = append(p.o.channel[:len(p.o.channel):len(p.o.channel)], opts...)
	}
	w, err := channel.NewWriter(e, req.Channel, opts...)
	if err != nil {
		return StreamResponse{}, err
	}
	// A reader that cancels the channel (the run was aborted) stops the
	// API call at once, not at the stream's next write; the writer learns
	// it on the bus or, for a reader of this process, directly.
	go func() {
		select {
		case <-w.Gone():
			cancel(errReaderGone)
		case <-ctx.Done():
		}
	}()
	log := p.logger(e)
	var frame []byte // reused: the writer copies a frame out before Write returns
	write := func(ev *agent.ModelEvent) error {
		if b := modelframe.AppendDelta(frame[:0], codec, ev); b != nil {
			frame = b
			return w.Write(ctx, b)
		}
		return w.Write(ctx, ev)
	}
	// The API may think for minutes before a byte: its silence is bounded
	// by the idle timeout and the retries here, not by the channel's. The
	// deferred done covers a panic the engine recovers.
	busy := w.Busy()
	defer busy()
	msg, err := p.call(ctx, e, agent.ProviderRequest(req), m, write, true)
	busy()
	var f *failure
	switch {
	case err == nil:
		if err := w.Close(ctx); err != nil {
			return abort(ctx, w, err)
		}
		log.Debug("anthropic: stream done", "model", msg.Model, "stop_reason", msg.StopReason, "session_id", req.SessionID)
		return StreamResponse{StopReason: msg.StopReason}, nil
	case errors.As(err, &f):
		log.Warn("anthropic: stream failed", "model", req.Model, "kind", f.kind, "status", f.status, "error", f.text, "session_id", req.SessionID)
		ev := &agent.ModelEvent{Type: agent.ModelError, Kind: f.kind, Error: f.text, Message: f.partial, RetryAfterMs: f.retryAfter.Milliseconds()}
		if err := w.Write(ctx, ev); err != nil {
			return abort(ctx, w, err)
		}
		if err := w.Close(ctx); err != nil {
			return abort(ctx, w, err)
		}
		return StreamResponse{StopReason: agent.StopError, Kind: f.kind}, nil
	default:
		return abort(ctx, w, err)
	}
}

// Complete answers req with the final assistant message. A failure of the
// API (after the retries) is a coded wire error whose details carry the
// kind ({"kind", "retry_after_ms"?, "status"?}): rate_limited and transient
// are unavailable (retryable), auth_expired is forbidden, context_overflow
// is invalid_payload, permanent is internal. A bad request is
// invalid_payload; ctx's end is canceled or timeout.
func (p *Provider) Complete(ctx context.Context, e *engine.Engine, req CompleteRequest) (agent.Message, error) {
	if e == nil {
		return agent.Message{}, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	if err := req.Validate(); err != nil {
		return agent.Message{}, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	req.Channel = ""
	m, err := buildParams(agent.ProviderRequest(req))
	if err != nil {
		return agent.Message{}, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	msg, err := p.call(ctx, e, agent.ProviderRequest(req), m, func(*agent.ModelEvent) error { return nil }, false)
	var f *failure
	switch {
	case err == nil:
		return *msg, nil
	case errors.As(err, &f):
		p.logger(e).Warn("anthropic: complete failed", "model", req.Model, "kind", f.kind, "status", f.status, "error", f.text, "session_id", req.SessionID)
		return agent.Message{}, f.wireError()
	default:
		return agent.Message{}, ctxError(ctx, err)
	}
}

// Models lists the models GET /v1/models returns. A failure is a coded
// wire error as for [Provider.Complete]; a server silent for the idle
// timeout (no headers, or no byte of a page's body) is transient, as for a
// stream, and a page longer than [MaxModelsResponse] is permanent.
func (p *Provider) Models(ctx context.Context, e *engine.Engine) (ModelsResponse, error) {
	if e == nil {
		return ModelsResponse{}, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	log := p.logger(e)
	var out ModelsResponse
	never := func() bool { return false }
	err := p.withRetries(ctx, log, "models", never, func() error {
		return p.authorized(ctx, e, log, "models", never, func(cred agent.Credential) error {
			var err error
			out.Models, err = p.listModels(ctx, cred, out.Models[:0])
			return err
		})
	})
	var f *failure
	switch {
	case err == nil:
		if out.Models == nil {
			out.Models = []ModelInfo{}
		}
		return out, nil
	case errors.As(err, &f):
		return ModelsResponse{}, f.wireError()
	default:
		return ModelsResponse{}, ctxError(ctx, err)
	}
}

// listModels is one attempt of [Provider.Models] with cred: it appends the
// models of every page to models. A failure of the API is a *failure;
// ctx's end is its cause.
func (p *Provider) listModels(ctx context.Context, cred agent.Credential, models []ModelInfo) ([]ModelInfo, error) {
	red := redactor(cred.Secret())
	// The idle timer cancels actx when the API keeps a request waiting for
	// the idle timeout: for its headers, or for a byte of its body. Watch
	// arms it only during those waits, page by page.
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(p.o.idleTimeout, func() { cancel(errStalled) })
	idle.Stop() // Watch arms it while a request waits
	defer idle.Stop()
	opts := append(credentialOptions(cred), option.WithMiddleware(httpbody.Watch(idle, p.o.idleTimeout, MaxModelsResponse)))
	pager := p.client.Models.ListAutoPaging(actx, sdk.ModelListParams{Limit: sdk.Int(1000)}, opts...)
	for pager.Next() {
		mi := pager.Current()
		info := ModelInfo{ID: mi.ID, DisplayName: mi.DisplayName, ContextWindow: mi.MaxInputTokens, MaxOutputTokens: mi.MaxTokens}
		if !mi.CreatedAt.IsZero() {
			info.CreatedAt = mi.CreatedAt.UTC().Format(time.RFC3339)
		}
		if len(models) == MaxModels {
			return models, &failure{kind: agent.ErrorPermanent, text: fmt.Sprintf("anthropic: GET /v1/models: the API lists more than %d models", MaxModels), status: http.StatusOK}
		}
		models = append(models, info)
	}
	err := pager.Err()
	var tooLarge *httpbody.TooLargeError
	switch {
	case err == nil:
		return models, nil
	case ctx.Err() != nil:
		return models, context.Cause(ctx)
	case errors.Is(context.Cause(actx), errStalled):
		return models, &failure{kind: agent.ErrorTransient, text: fmt.Sprintf("anthropic: GET /v1/models: nothing received for %v (idle timeout)", p.o.idleTimeout), cause: errStalled}
	case errors.As(err, &tooLarge):
		return models, &failure{kind: agent.ErrorPermanent, text: "anthropic: GET /v1/models: " + tooLarge.Error(), status: http.StatusOK, cause: err}
	}
	f := classify(err, p.o.now())
	f.text = red.text(f.text)
	return models, f
}

// call runs req against the API, with retries before the first visible
// event, and returns the final message. A provider failure is a *failure
// (carrying the partial message); emit's error or ctx's cause is returned
// as it is. visible says whether emitted events reach anyone (a stream)
// or not (complete, which may retry after a partial answer).
func (p *Provider) call(ctx context.Context, e *engine.Engine, req agent.ProviderRequest, m mapped, emit emitFunc, visible bool) (*agent.Message, error) {
	log := p.logger(e)
	if m.thinkingDropped {
		log.Debug("anthropic: thinking off for a request that continues a tool loop whose turn has no signed thinking", "model", req.Model, "session_id", req.SessionID)
	}
	written := false
	counted := emit
	if visible {
		counted = func(ev *agent.ModelEvent) error {
			written = true
			return emit(ev)
		}
	}
	var final *agent.Message
	wrote := func() bool { return written }
	err := p.withRetries(ctx, log, "messages", wrote, func() error {
		return p.authorized(ctx, e, log, "messages", wrote, func(cred agent.Credential) error {
			msg, err := p.attempt(ctx, e, req, m, cred, counted)
			final = msg
			return err
		})
	})
	return final, err
}

// attempt is one call of the Messages API with cred. A goroutine reads and
// decodes the stream while this one translates and emits, so reading
// overlaps writing; deltas of one block that are already read when the
// previous one is emitted go out as one (up to the coalesce size), which
// costs no latency and spares the bus a frame per token when the reader
// falls behind.
func (p *Provider) attempt(ctx context.Context, e *engine.Engine, req agent.ProviderRequest, m mapped, cred agent.Credential, emit emitFunc) (*agent.Message, error) {
	red := redactor(cred.Secret())
	fail := func(err error, tr *translator) error {
		f := classify(err, p.o.now())
		f.text = red.text(f.text)
		if tr != nil {
			f.partial = tr.partial(f.text)
		}
		return f
	}
	// Cancelling actx aborts the request and the read of its body. The idle
	// timer times only the waits for the server: for the response, then
	// each read of the body (see httpbody.Idle).
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(p.o.idleTimeout, func() { cancel(errStalled) })
	defer idle.Stop()

	var resp *http.Response
	opts := append(credentialOptions(cred), option.WithJSONSet("stream", true), option.WithHeader("Accept", "text/event-stream"))
	if err := p.client.Post(actx, "v1/messages", m.params, &resp, opts...); err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if errors.Is(context.Cause(actx), errStalled) {
			err = errStalled
		}
		return nil, fail(err, nil)
	}
	// From here the timer runs only inside reads of the body.
	idle.Stop()
	resp.Body = httpbody.Events(httpbody.Idle(resp.Body, idle, p.o.idleTimeout), MaxStreamEvent)

	if f := notEventStream(resp, p.o.now()); f != nil {
		_ = resp.Body.Close()
		return nil, fail(f, nil)
	}
	items := make(chan item, itemBuffer)
	go read(actx, resp, items)
	finished := false
	defer func() {
		if finished {
			// The API ends the body right after message_stop: reading it to
			// the end lets the connection be reused.
			t := time.NewTimer(drainGrace)
		drain:
			for {
				select {
				case _, ok := <-items:
					if !ok {
						break drain
					}
				case <-t.C:
					break drain
				}
			}
			t.Stop()
		}
		cancel(nil) // stops the read, which closes items
		for range items {
		}
	}()

	tr := newTranslator(m.names, req.Model, p.o.now().UnixMilli())
	var (
		pending    item
		hasPending bool
		closed     bool
		buf        []byte
		serr       error
	)
	next := func() (item, bool) {
		if hasPending {
			hasPending = false
			return pending, true
		}
		if closed {
			return item{}, false
		}
		it, ok := <-items
		closed = !ok
		return it, ok
	}
	for !tr.done {
		it, ok := next()
		if !ok {
			break
		}
		if it.err != nil {
			serr = it.err
			break
		}
		ev := &it.ev
		if field := deltaField(ev); field != nil && p.o.coalesce > 0 && !closed {
			buf = append(buf[:0], *field...)
		merge:
			for len(buf) < p.o.coalesce {
				select {
				case nx, ok := <-items:
					if !ok {
						closed = true
						break merge
					}
					if nf := deltaField(&nx.ev); nx.err == nil && nf != nil && nx.ev.Index == ev.Index && nx.ev.Delta.Type == ev.Delta.Type {
						buf = append(buf, *nf...)
						continue
					}
					pending, hasPending = nx, true
					break merge
				default:
					break merge
				}
			}
			if len(buf) > len(*field) {
				*field = string(buf)
			}
		}
		if err := tr.event(ev, emit); err != nil {
			if !errors.Is(err, ErrMalformedStream) {
				return nil, err
			}
			return nil, fail(err, tr)
		}
	}
	if tr.done {
		finished = true
		return tr.final, nil
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	var apiErr *sdk.Error
	if tr.stopped && !errors.As(serr, &apiErr) && !errors.Is(serr, ErrMalformedStream) {
		// message_delta said why the model stopped, so the answer is whole:
		// only message_stop was lost with the end of the stream, as a
		// proxy may lose the last event. The stop event went out already;
		// an error event after it would fail a finished answer.
		why := "end of stream"
		if errors.Is(context.Cause(actx), errStalled) {
			why = errStalled.Error()
		} else if serr != nil {
			why = red.text(networkText(serr))
		}
		p.logger(e).Debug("anthropic: the stream ended after its stop reason without message_stop", "model", req.Model, "why", why)
		if err := tr.event(&streamEvent{Type: "message_stop"}, emit); err != nil {
			if !errors.Is(err, ErrMalformedStream) {
				return nil, err
			}
			return nil, fail(err, tr)
		}
		return tr.final, nil
	}
	switch {
	case errors.Is(context.Cause(actx), errStalled):
		serr = errStalled
	case serr == nil:
		serr = errDropped
	}
	return nil, fail(serr, tr)
}

// itemBuffer is how many decoded events the reading goroutine may be ahead.
const itemBuffer = 256

// drainGrace bounds the wait for the end of a body after message_stop.
const drainGrace = 250 * time.Millisecond

// item is one decoded stream event, or the error that ended the stream.
type item struct {
	ev  streamEvent
	err error
}

// deltaField is the text a content_block_delta adds (text, thinking or
// tool input), nil for any other event.
func deltaField(ev *streamEvent) *string {
	if ev.Type != "content_block_delta" {
		return nil
	}
	switch ev.Delta.Type {
	case "text_delta":
		return &ev.Delta.Text
	case "thinking_delta":
		return &ev.Delta.Thinking
	case "input_json_delta":
		return &ev.Delta.PartialJSON
	}
	return nil
}

// read decodes the SSE stream of resp into items until it ends, fails or
// ctx ends, then closes items. An error event of the stream is sent as the
// SDK's API error.
func read(ctx context.Context, resp *http.Response, items chan<- item) {
	defer close(items)
	dec := ssestream.NewDecoder(resp)
	defer func() { _ = dec.Close() }()
	send := func(it item) bool {
		select {
		case items <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// One item for the whole stream, reset per event: decoding takes its
	// address, which would move a fresh one to the heap every time.
	var it item
	for dec.Next() {
		e := dec.Event()
		data := bytes.TrimSuffix(e.Data, []byte("\n"))
		it = item{}
		switch e.Type {
		case "", "ping":
			continue // as the SDK's own stream does
		case "error":
			it.err = streamError(resp, data)
		default:
			if len(data) == 0 {
				continue
			}
			if err := decodeEvent(data, &it.ev); err != nil {
				it.err = malformed("a %s event does not decode: %v", e.Type, err)
			}
		}
		if !send(it) || it.err != nil {
			return
		}
	}
	if err := dec.Err(); err != nil {
		if errors.Is(err, httpbody.ErrTooLarge) {
			err = malformed("%v", err) // no retry reads it better
		}
		send(item{err: err})
	}
}

// MaxStreamEvent bounds one event of a model stream, in bytes: the SDK's
// decoder gathers an event's data lines in memory until a blank line, and
// a server that never sent one would fill it (httpbody.Events). Past it
// the answer fails as a malformed stream.
const MaxStreamEvent = 8 << 20

// streamError is the API error an error event of the stream carries.
func streamError(resp *http.Response, data []byte) error {
	aerr := &sdk.Error{Request: resp.Request, Response: resp, StatusCode: resp.StatusCode, RequestID: resp.Header.Get("request-id")}
	if err := aerr.UnmarshalJSON(data); err != nil {
		return fmt.Errorf("an error event does not decode: %w", err)
	}
	return aerr
}

// withRetries runs try until it succeeds, fails with anything but a
// retryable *failure, has retried max_retries times, or written reports
// that events went out. The wait doubles from the backoff (capped at the
// max retry wait) unless the API hinted one; a hint longer than the max
// retry wait is not waited for.
func (p *Provider) withRetries(ctx context.Context, log *slog.Logger, op string, written func() bool, try func() error) error {
	for attempt := 0; ; attempt++ {
		err := try()
		var f *failure
		if err == nil || !errors.As(err, &f) {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if written() || !f.kind.Retryable() || attempt >= p.o.maxRetries {
			return f
		}
		wait := min(p.o.backoff<<attempt, p.o.maxRetryWait)
		if f.retryAfter > 0 {
			if f.retryAfter > p.o.maxRetryWait {
				return f
			}
			wait = f.retryAfter
		}
		log.Warn("anthropic: call failed, retrying", "op", op, "attempt", attempt+1, "kind", f.kind, "status", f.status, "wait", wait, "error", f.text)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// credentialOptions authenticates one request: an API key as x-api-key,
// an OAuth access token as a bearer token with the OAuth beta flag.
func credentialOptions(c agent.Credential) []option.RequestOption {
	if c.Type == agent.CredentialOAuth {
		return []option.RequestOption{option.WithAuthToken(c.AccessToken), option.WithHeaderAdd("anthropic-beta", oauthBeta)}
	}
	return []option.RequestOption{option.WithHeader("x-api-key", c.Key)}
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
	werr := ctxError(ctx, err)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failFrameTimeout)
	defer cancel()
	_ = w.Fail(fctx, werr)
	return StreamResponse{}, werr
}

// ctxError is the wire error of err: when ctx has ended, its cause when
// that is a *wire.Error, timeout for a deadline, canceled otherwise; else
// err as a wire error.
func ctxError(ctx context.Context, err error) *wire.Error {
	if ctx.Err() == nil {
		return wire.From(err)
	}
	cause := context.Cause(ctx)
	var werr *wire.Error
	if errors.As(cause, &werr) {
		return werr
	}
	if errors.Is(cause, context.DeadlineExceeded) {
		return wire.Wrap(wire.CodeTimeout, cause, "the call ran out of time")
	}
	return wire.Wrap(wire.CodeCanceled, cause, "the call was canceled")
}
