package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/agent/modelframe"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/internal/httpbody"
)

// AuthFunction is the function asked for credentials:
// auth::get_token {provider} → agent.Credential or null.
const AuthFunction = "auth::get_token"

// authTimeout bounds one auth::get_token call.
const authTimeout = 5 * time.Second

// errStalled cancels an attempt whose server stayed silent for the idle
// timeout.
var errStalled = errors.New("the stream stalled")

// failFrameTimeout bounds the error frame a stream sends once its own
// context has ended.
const failFrameTimeout = 2 * time.Second

// Provider streams answers of an OpenAI-compatible Chat Completions server
// as model events. It keeps no state between calls but a short-lived
// credential cache, and is safe for concurrent use.
type Provider struct {
	o      options
	chat   sdk.ChatCompletionService
	models sdk.ModelService
	sc     scrubber

	mu    sync.Mutex
	cred  string
	until time.Time
}

// New returns a provider. Options: [WithName], [WithBaseURL],
// [WithHTTPClient], [WithHeader], [WithAPIKeyEnv], [WithRequireKey],
// [WithMaxRetries], [WithBackoff], [WithCredentialTTL], [WithIdleTimeout],
// [WithMaxTokensField], [WithReasoningEffort], [WithCoalesce],
// [WithLogger], [WithClock], [WithLookupEnv].
func New(opts ...Option) (*Provider, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	// The services are built without sdk.NewClient, which would read
	// OPENAI_* variables of the process: the settings alone decide.
	base := []option.RequestOption{
		option.WithBaseURL(o.baseURL),
		option.WithHTTPClient(o.client),
		option.WithMaxRetries(0),
		// The SDK reads an error response's body whole: cap it.
		option.WithMiddleware(httpbody.TruncateErrors(maxErrorResponse)),
	}
	var sc scrubber
	for _, h := range o.headers {
		base = append(base, option.WithHeader(h[0], h[1]))
		sc = sc.with(h[1])
	}
	return &Provider{
		o:      o,
		chat:   sdk.NewChatCompletionService(base...),
		models: sdk.NewModelService(base...),
		sc:     sc,
	}, nil
}

// Name is the provider name: the <name> of its function ids.
func (p *Provider) Name() string { return p.o.name }

// StreamFunction is the id of the provider's stream function,
// provider::<name>::stream.
func (p *Provider) StreamFunction() string { return "provider::" + p.o.name + "::stream" }

// CompleteFunction is provider::<name>::complete.
func (p *Provider) CompleteFunction() string { return "provider::" + p.o.name + "::complete" }

// ModelsFunction is provider::<name>::models.
func (p *Provider) ModelsFunction() string { return "provider::" + p.o.name + "::models" }

func (p *Provider) logger(e *engine.Engine) *slog.Logger {
	switch {
	case p.o.logger != nil:
		return p.o.logger
	case e != nil:
		return e.Logger()
	}
	return slog.New(slog.DiscardHandler)
}

// Stream answers req into the channel req.Channel: one [agent.ModelEvent]
// per frame (start, text/thinking/functioncall blocks, usage, stop, done;
// or an error event, with the partial message when something streamed),
// then the channel's end frame, in codec (the worker passes the request's;
// nil means the engine's).
//
// It returns why the model stopped; a model failure is reported in the
// channel and returns {stop_reason: "error", kind} with a nil error. A bad
// request is an invalid_payload wire error and nothing is written. A
// reader that left the channel is a canceled wire error; so is ctx's
// cancellation, and its deadline is a timeout one; in those cases nothing
// more is sent to the server and the channel ends with that error frame
// when the reader is still there.
func (p *Provider) Stream(ctx context.Context, e *engine.Engine, req agent.ProviderRequest, codec wire.Codec) (StreamResponse, error) {
	if e == nil {
		return StreamResponse{}, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	if err := ValidateRequest(req, true); err != nil {
		return StreamResponse{}, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	if codec == nil {
		codec = e.Codec()
	}
	copts := []channel.Option{channel.WithCodec(codec)}
	if len(p.o.channel) > 0 {
		copts = append(p.o.channel[:len(p.o.channel):len(p.o.channel)], copts...)
	}
	w, err := channel.NewWriter(e, req.Channel, copts...)
	if err != nil {
		return StreamResponse{}, err
	}
	// A reader that leaves (the run was aborted) stops the HTTP request at
	// once, not at the stream's next write.
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-w.Gone():
			cancel(channel.ErrReaderGone)
		case <-sctx.Done():
		}
	}()
	var frame []byte // reused: the writer copies a frame out before Write returns
	// The server may think for minutes before a byte: its silence is
	// bounded by the idle timeout and the retries here, not by the
	// channel's. The deferred done covers a panic the engine recovers.
	busy := w.Busy()
	defer busy()
	out, err := p.run(sctx, e, req, func(ev *agent.ModelEvent) error {
		if b := modelframe.AppendDelta(frame[:0], codec, ev); b != nil {
			frame = b
			return w.Write(ctx, b)
		}
		return w.Write(ctx, ev)
	})
	busy()
	if err != nil {
		if errors.Is(context.Cause(sctx), channel.ErrReaderGone) && ctx.Err() == nil {
			err = channel.ErrReaderGone
		}
		return p.abort(ctx, e, w, err)
	}
	if err := w.Close(ctx); err != nil {
		return p.abort(ctx, e, w, err)
	}
	if out.fail != nil {
		return StreamResponse{StopReason: agent.StopError, Kind: out.fail.kind}, nil
	}
	return StreamResponse{StopReason: out.msg.StopReason}, nil
}

// Complete answers req with the final assistant message (it streams from
// the server too, and drops the events). A model failure is a coded wire
// error whose details carry the kind ({"kind", "retry_after_ms"?}):
// rate_limited and transient are unavailable (retryable), auth_expired is
// forbidden, context_overflow is invalid_payload, permanent is internal. A
// bad request is invalid_payload; ctx's end is canceled or timeout.
func (p *Provider) Complete(ctx context.Context, e *engine.Engine, req agent.ProviderRequest) (CompleteResponse, error) {
	if err := ValidateRequest(req, false); err != nil {
		return CompleteResponse{}, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	out, err := p.run(ctx, e, req, func(*agent.ModelEvent) error { return nil })
	if err != nil {
		if ctx.Err() != nil {
			return CompleteResponse{}, ctxError(ctx)
		}
		return CompleteResponse{}, wire.From(err)
	}
	if out.fail != nil {
		return CompleteResponse{}, out.fail.wireError()
	}
	return CompleteResponse{Message: *out.msg}, nil
}

// Models lists the server's models (GET <base_url>/models), retrying as a
// stream does. Failures are coded as for [Provider.Complete]; a server
// silent for the idle timeout (no headers, or no byte of the body) is
// transient, as for a stream, and a body longer than [MaxModelsResponse]
// is permanent.
func (p *Provider) Models(ctx context.Context, e *engine.Engine) (ModelsResponse, error) {
	log := p.logger(e).With("provider", p.o.name)
	for attempt := 0; ; attempt++ {
		var page *pageOfModels
		f, err := p.authorized(ctx, e, log, "models", func() bool { return false }, func(secret string) (*failure, error) {
			var (
				f   *failure
				err error
			)
			page, f, err = p.listModels(ctx, secret)
			return f, err
		})
		if err != nil {
			return ModelsResponse{}, ctxError(ctx)
		}
		if f == nil {
			return page.response(), nil
		}
		retry, err := p.retry(ctx, log, attempt, f, false)
		if err != nil {
			return ModelsResponse{}, ctxError(ctx)
		}
		if !retry {
			return ModelsResponse{}, f.wireError()
		}
	}
}

type pageOfModels struct{ data []sdk.Model }

func (pg *pageOfModels) response() ModelsResponse {
	out := ModelsResponse{Models: make([]ModelInfo, 0, len(pg.data))}
	for _, m := range pg.data {
		mi := ModelInfo{ID: m.ID}
		if m.Created > 0 {
			mi.CreatedAt = m.Created * 1000
		}
		if f, ok := m.JSON.ExtraFields["display_name"]; ok {
			var s string
			if err := json.Unmarshal([]byte(f.Raw()), &s); err == nil {
				mi.DisplayName = s
			}
		}
		out.Models = append(out.Models, mi)
	}
	return out
}

// listModels does one GET /models. The idle timer cancels the request
// when the server keeps it waiting for the idle timeout: for its headers,
// or for a byte of its body. The error is ctx's.
func (p *Provider) listModels(ctx context.Context, secret string) (*pageOfModels, *failure, error) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(p.o.idleTimeout, func() { cancel(errStalled) })
	idle.Stop() // Watch arms it while the request waits
	defer idle.Stop()
	var resp *http.Response
	opts := append(p.requestOptions(secret, &resp), option.WithMiddleware(httpbody.Watch(idle, p.o.idleTimeout, MaxModelsResponse)))
	page, err := p.models.List(actx, opts...)
	var tooLarge *httpbody.TooLargeError
	switch {
	case err == nil:
		return &pageOfModels{data: page.Data}, nil, nil
	case ctx.Err() != nil:
		return nil, nil, ctx.Err()
	case errors.Is(context.Cause(actx), errStalled):
		return nil, &failure{kind: agent.ErrorTransient, text: fmt.Sprintf("%s: GET /models: nothing received for %v (idle timeout)", p.o.name, p.o.idleTimeout)}, nil
	case errors.As(err, &tooLarge):
		return nil, &failure{kind: agent.ErrorPermanent, text: fmt.Sprintf("%s: GET /models: %v", p.o.name, tooLarge)}, nil
	}
	return nil, p.requestFailure(err, resp, p.sc.with(secret)), nil
}

// requestOptions are the per-request options: the credential (none for a
// keyless server) and where to keep the raw response.
func (p *Provider) requestOptions(secret string, resp **http.Response) []option.RequestOption {
	opts := []option.RequestOption{option.WithResponseInto(resp)}
	if secret != "" {
		opts = append(opts, option.WithAPIKey(secret))
	}
	return opts
}

// outcome is the end of a model call: the final message, or the failure
// that was reported.
type outcome struct {
	msg  *agent.Message
	fail *failure
}

// run makes the model call of req, retrying while nothing was emitted, and
// emits its events. It returns an error only when emit fails or ctx ends;
// a model failure is emitted as an error event and returned in the
// outcome.
func (p *Provider) run(ctx context.Context, e *engine.Engine, req agent.ProviderRequest, emit func(*agent.ModelEvent) error) (outcome, error) {
	log := p.logger(e).With("provider", p.o.name, "model", req.Model)
	if req.SessionID != "" {
		log = log.With("session_id", req.SessionID)
	}
	ts := p.o.now().UnixMilli()
	names := toolNames(req)
	params := p.o.buildParams(req, names)
	for attempt := 0; ; attempt++ {
		a := newAssembler(p.o.name, req.Model, ts, names, log, emit)
		sent := false
		f, err := p.authorized(ctx, e, log, "chat", func() bool { return a.started }, func(secret string) (*failure, error) {
			if sent { // a retry after a 401 starts over
				a = newAssembler(p.o.name, req.Model, ts, names, log, emit)
			}
			sent = true
			return p.attempt(ctx, params, secret, a)
		})
		if err != nil {
			return outcome{}, err
		}
		if f == nil {
			msg, err := a.complete()
			return outcome{msg: msg}, err
		}
		retry, err := p.retry(ctx, log, attempt, f, a.started)
		if err != nil {
			return outcome{}, err
		}
		if retry {
			continue
		}
		if err := a.fail(f); err != nil {
			return outcome{}, err
		}
		return outcome{fail: f}, nil
	}
}

// retry decides what follows failure f of attempt: a rate limit or a
// transient failure before anything streamed is retried after the backoff
// (doubling, capped at the max retry wait) or the server's Retry-After,
// unless the attempts are used up or the hint is longer than the max retry
// wait. It waits, and reports whether to try again; the error is ctx's.
func (p *Provider) retry(ctx context.Context, log *slog.Logger, attempt int, f *failure, streamed bool) (bool, error) {
	if streamed || !f.kind.Retryable() || attempt >= p.o.maxRetries {
		log.Warn("openai: model call failed", "kind", string(f.kind), "error", f.text)
		return false, nil
	}
	wait := f.retryAfter
	if wait <= 0 {
		// The doubling stops at the max wait (and before it could
		// overflow): only a server's hint beyond it ends the call.
		wait = p.o.maxRetryWait
		if attempt < 62 && p.o.backoff <= p.o.maxRetryWait>>attempt {
			wait = p.o.backoff << attempt
		}
	}
	if wait > p.o.maxRetryWait {
		log.Warn("openai: model call failed, retry hint too long", "kind", string(f.kind), "retry_after", wait, "error", f.text)
		return false, nil
	}
	log.Info("openai: retrying model call", "attempt", attempt+1, "kind", string(f.kind), "wait", wait, "error", f.text)
	if err := p.o.sleep(ctx, wait); err != nil {
		return false, err
	}
	return true, nil
}

// attempt makes one streaming request and feeds its chunks to a. A
// goroutine reads and decodes the stream while this one assembles and
// emits, so reading overlaps writing; plain deltas of one kind that were
// already read when the previous event went out are merged into one (up
// to the coalesce size, see [coalescer]), which costs no latency and
// spares the bus a frame per token when the reader of the channel falls
// behind. It returns the failure of the call (nil when the answer
// finished), or emit's or ctx's error.
func (p *Provider) attempt(ctx context.Context, params sdk.ChatCompletionNewParams, secret string, a *assembler) (*failure, error) {
	sc := p.sc.with(secret)
	// Cancelling actx aborts the read of the body, so the reading goroutine
	// ends when this one returns early; a server silent for the idle
	// timeout cancels it with errStalled.
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(p.o.idleTimeout, func() { cancel(errStalled) })
	defer idle.Stop()
	stalled := func() bool { return errors.Is(context.Cause(actx), errStalled) }
	var resp *http.Response
	opened := p.chat.NewStreaming(actx, params, p.requestOptions(secret, &resp)...)
	if err := opened.Err(); err != nil {
		_ = opened.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if stalled() {
			return p.stalledFailure(), nil
		}
		return p.requestFailure(err, resp, sc), nil
	}
	// From here the timer runs only while the stream is read.
	idle.Stop()
	resp.Body = httpbody.Events(httpbody.Idle(resp.Body, idle, p.o.idleTimeout), MaxStreamEvent)
	if f := p.notEventStream(resp, sc); f != nil {
		_ = opened.Close()
		return f, nil
	}
	// The SDK's stream would decode every event into its
	// ChatCompletionChunk; the provider reads the same body with the SDK's
	// SSE decoder and decodes the events itself (see chunk).
	items := make(chan item, itemBuffer)
	in := coalescer{items: items, limit: p.o.coalesce}
	go p.read(actx, ssestream.NewDecoder(resp), sc, items)
	finished := false // [DONE] came: the body ends next
	defer func() {
		if finished {
			// Reading the body to its end lets the connection be reused.
			t := time.NewTimer(drainGrace)
			select {
			case <-t.C:
			case <-items: // nothing but the close follows [DONE]
			}
			t.Stop()
		}
		cancel(nil)
		for range items { // until the reading goroutine has closed the body
		}
	}()
	// held is the failure of an answer that finished but cannot be used
	// (a call's arguments are not JSON): it is returned once the rest of
	// the stream was read, since the usage, which the failure costs all
	// the same, comes after the finish_reason.
	var held *failure
loop:
	for {
		it, ok := in.next()
		if !ok {
			break
		}
		switch {
		case it.done:
			finished = true
			break loop
		case it.bad != nil:
			if a.done {
				break loop // a malformed tail after the answer finished
			}
			return &failure{kind: agent.ErrorTransient, text: p.o.name + ": the server sent a malformed chunk: " + it.bad.Error()}, nil
		case it.fail != nil:
			if held != nil {
				break loop
			}
			return it.fail, nil
		case it.err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(it.err, httpbody.ErrTooLarge) && !a.done {
				// No retry reads it better.
				return &failure{kind: agent.ErrorPermanent, text: p.o.name + ": the server sent a malformed stream: " + it.err.Error()}, nil
			}
			why := transportText(it.err)
			switch {
			case stalled() && !a.done:
				return p.stalledFailure(), nil
			case !a.done:
				return &failure{kind: agent.ErrorTransient, text: sc.clean(p.o.name + ": the stream broke: " + why)}, nil
			case stalled():
				why = errStalled.Error()
			}
			// The answer is complete; only its tail (usage, [DONE]) is lost.
			a.log.Debug("openai: stream broke after the answer finished", "error", sc.clean(why))
			break loop
		}
		if err := a.chunk(&it.c); err != nil {
			var f *failure
			if !errors.As(err, &f) {
				return nil, err
			}
			if !a.done {
				return f, nil
			}
			held = f
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if held != nil {
		return held, nil
	}
	if !a.done {
		if stalled() {
			return p.stalledFailure(), nil
		}
		return &failure{kind: agent.ErrorTransient, text: p.o.name + ": the stream ended before the model finished"}, nil
	}
	return nil, nil
}

// stalledFailure is the failure of an attempt whose server stayed silent
// for the idle timeout: transient, as a dropped connection is.
func (p *Provider) stalledFailure() *failure {
	return &failure{kind: agent.ErrorTransient, text: fmt.Sprintf("%s: %v: nothing received for %v (idle timeout)", p.o.name, errStalled, p.o.idleTimeout)}
}

// credential returns the secret to send: from auth::get_token (cached for
// the credential TTL), else from the environment variable; "" for a
// keyless server. cached says whether the secret came from the cache
// rather than from a fetch for this call. No credential at all is an
// auth_expired failure; a failing auth function is a transient one. The
// error is ctx's.
func (p *Provider) credential(ctx context.Context, e *engine.Engine) (secret string, cached bool, f *failure, err error) {
	now := p.o.now()
	p.mu.Lock()
	if p.cred != "" && now.Before(p.until) {
		s := p.cred
		p.mu.Unlock()
		return s, true, nil, nil
	}
	p.mu.Unlock()
	if e != nil {
		actx, cancel := context.WithTimeout(ctx, authTimeout)
		cred, err := engine.Call[*agent.Credential](actx, e, AuthFunction, authRequest{Provider: p.o.name})
		cancel()
		switch {
		case err == nil && cred != nil && cred.Secret() != "":
			secret := cred.Secret()
			ttl := p.o.credentialTTL
			if cred.ExpiresAt > 0 {
				ttl = min(ttl, time.UnixMilli(cred.ExpiresAt).Sub(now))
			}
			if ttl > 0 {
				p.mu.Lock()
				p.cred, p.until = secret, now.Add(ttl)
				p.mu.Unlock()
			}
			return secret, false, nil, nil
		case err == nil, errors.Is(err, wire.ErrFunctionNotFound):
			// No credential stored, or no auth worker: the environment.
		default:
			if ctx.Err() != nil {
				return "", false, nil, ctx.Err()
			}
			return "", false, &failure{kind: agent.ErrorTransient, text: fmt.Sprintf("%s: %s failed: %v", p.o.name, AuthFunction, err)}, nil
		}
	}
	if v, ok := p.o.lookupEnv(p.o.apiKeyEnv); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v), false, nil, nil
	}
	if p.o.requireKey {
		return "", false, &failure{kind: agent.ErrorAuthExpired, text: fmt.Sprintf("%s: %v: %s has none for provider %q and $%s is not set",
			p.o.name, ErrNoCredential, AuthFunction, p.o.name, p.o.apiKeyEnv)}, nil
	}
	return "", false, nil, nil
}

// authorized makes one request of op with the credential: do gets the
// secret and returns the request's failure, or ctx's error. Whatever do
// fails with as auth_expired drops the secret it used from the cache. A
// 401 to a cached secret asks for the credential again, once: an operator
// who replaced the key with auth::set_token and revoked the old one within
// the TTL should not fail a call. When the secret changed, do runs once
// more with the new one, unless started reports that events went out;
// when it did not, the 401 stands.
func (p *Provider) authorized(ctx context.Context, e *engine.Engine, log *slog.Logger, op string, started func() bool, do func(secret string) (*failure, error)) (*failure, error) {
	secret, cached, f, err := p.credential(ctx, e)
	if err != nil || f != nil {
		return f, err
	}
	f, err = do(secret)
	if err != nil || f == nil || f.kind != agent.ErrorAuthExpired {
		return f, err
	}
	p.dropCredential(secret)
	if !cached || f.status != http.StatusUnauthorized || started() || ctx.Err() != nil {
		return f, nil
	}
	fresh, _, ff, err := p.credential(ctx, e)
	if err != nil {
		return nil, err
	}
	if ff != nil || fresh == secret {
		p.dropCredential(secret)
		return f, nil
	}
	log.Info("openai: the server refused the cached credential and auth has another, retrying with it", "op", op, "status", f.status)
	f, err = do(fresh)
	if f != nil && f.kind == agent.ErrorAuthExpired {
		p.dropCredential(fresh)
	}
	return f, err
}

// authRequest is the payload of auth::get_token.
type authRequest struct {
	Provider string `json:"provider"`
}

// dropCredential forgets the cached credential when it is still stale,
// the one the server refused (a 401): a secret another call has cached
// since is kept.
func (p *Provider) dropCredential(stale string) {
	p.mu.Lock()
	if p.cred == stale {
		p.cred, p.until = "", time.Time{}
	}
	p.mu.Unlock()
}

// abort ends a stream that could not finish and returns the function's
// error: canceled when the reader is gone, else the cause (ctx's end, an
// oversized frame, a connection error), which the reader gets as an error
// frame.
func (p *Provider) abort(ctx context.Context, e *engine.Engine, w *channel.Writer, err error) (StreamResponse, error) {
	if errors.Is(err, channel.ErrReaderGone) {
		_ = w.Close(ctx) // releases the writer; nothing is sent to a reader that is gone
		p.logger(e).Debug("openai: the reader left the stream", "provider", p.o.name)
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
	if cause == nil {
		cause = context.Canceled
	}
	var werr *wire.Error
	if errors.As(cause, &werr) {
		return werr
	}
	if errors.Is(cause, context.DeadlineExceeded) {
		return wire.Wrap(wire.CodeTimeout, cause, "the model call ran out of time")
	}
	return wire.Wrap(wire.CodeCanceled, cause, "the model call was canceled")
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MaxStreamEvent bounds one event of a model stream, in bytes: the SDK's
// decoder gathers an event's data lines in memory until a blank line, and
// a server that never sent one would fill it (httpbody.Events). Past it
// the answer fails (permanent: a retry reads it no better).
const MaxStreamEvent = 8 << 20
