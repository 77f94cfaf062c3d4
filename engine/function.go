package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Endpoint metadata keys of a function on the NATS services framework.
const (
	MetaFunctionID     = "iii.function_id"
	MetaDescription    = "description"
	MetaRequestSchema  = "request_schema"
	MetaResponseSchema = "response_schema"
	MetaIdempotent     = "idempotent"
	// MetaTimeoutMs is the function's declared Timeout in milliseconds:
	// callers stop waiting after it (a request whose worker died with it
	// is never answered).
	MetaTimeoutMs = "timeout_ms"
)

// HeaderTimeoutMs carries the caller's remaining time budget in
// milliseconds, so a handler never works past the point its caller stopped
// waiting.
const HeaderTimeoutMs = "Iii-Timeout-Ms"

// Handler serves one function call. The returned value is encoded in the
// request's codec; a returned error is sent as a coded wire error (see
// [wire.From]: errors that are not *wire.Error become internal). A panic
// in the handler, or in the encoding of its value (a MarshalJSON of its
// own), is recovered and answered as internal.
type Handler func(ctx context.Context, req *Request) (any, error)

// Request is one call of a function.
type Request struct {
	FunctionID string
	Data       []byte
	Header     nats.Header
	Codec      wire.Codec
}

// Validator is implemented by request types that check themselves; [Bind]
// and [Typed] call it after decoding and answer invalid_payload on error.
type Validator interface {
	Validate() error
}

// Bind decodes the payload into v and validates it. Every failure is an
// invalid_payload wire error.
func (r *Request) Bind(v any) error {
	if err := r.Codec.Unmarshal(r.Data, v); err != nil {
		return wire.Wrap(wire.CodeInvalidPayload, nil, "payload does not decode as %s: %v", r.Codec.ContentType(), err)
	}
	if val, ok := v.(Validator); ok {
		if err := val.Validate(); err != nil {
			var we *wire.Error
			if errors.As(err, &we) {
				return we
			}
			return wire.Wrap(wire.CodeInvalidPayload, err, "")
		}
	}
	return nil
}

// Typed adapts a function of typed request and response into a [Handler]:
// the payload is decoded into Req (and validated if Req or *Req is a
// [Validator]) before fn runs.
func Typed[Req, Resp any](fn func(ctx context.Context, req Req) (Resp, error)) Handler {
	return func(ctx context.Context, r *Request) (any, error) {
		var req Req
		if err := r.Bind(&req); err != nil {
			return nil, err
		}
		return fn(ctx, req)
	}
}

// Raw is a pre-encoded response body; a handler that returns it skips
// encoding. Its codec must be the request's.
type Raw []byte

// Function is one function a worker serves.
type Function struct {
	// ID is the function id ("state::get").
	ID string
	// Description is a one-line summary shown in the catalog.
	Description string
	// RequestSchema and ResponseSchema are JSON Schema documents (optional).
	RequestSchema, ResponseSchema string
	// Idempotent declares that running a call twice is harmless; the turn
	// loop may re-run an interrupted idempotent call after a crash.
	Idempotent bool
	// Timeout bounds one invocation; zero means the engine default. A
	// caller's shorter remaining budget wins.
	Timeout time.Duration
	// Skill is the function's skill document (markdown, optional
	// frontmatter): how and when to use it. [Worker.Register] publishes it
	// to the skills bucket as "<worker>/<function id>" ([PublishSkill]),
	// where the directory serves it; without one, it publishes
	// [GeneratedSkill] (the description and the schemas).
	Skill string
	// Handler serves the calls.
	Handler Handler
}

// Worker is one NATS service: a named group of functions whose endpoints
// sit in a queue group, so replicas of the worker share the load.
type Worker struct {
	e           *Engine
	name        string
	version     string
	description string

	sem      chan struct{}
	inflight atomic.Int64

	mu     sync.Mutex
	svc    micro.Service
	fns    map[string]*Function
	order  []string
	closed bool
}

// WorkerOption configures a [Worker].
type WorkerOption func(*Worker) error

// WithVersion sets the worker's SemVer version (default "0.1.0").
func WithVersion(v string) WorkerOption {
	return func(w *Worker) error { w.version = v; return nil }
}

// WithDescription sets the worker's description.
func WithDescription(d string) WorkerOption {
	return func(w *Worker) error { w.description = d; return nil }
}

// Worker starts a worker named name (letters, digits, '-' and '_'). Its
// functions are added with [Worker.Register].
func (e *Engine) Worker(name string, opts ...WorkerOption) (*Worker, error) {
	w := &Worker{
		e:       e,
		name:    name,
		version: "0.1.0",
		sem:     make(chan struct{}, e.opts.concurrency),
		fns:     map[string]*Function{},
	}
	for _, opt := range opts {
		if err := opt(w); err != nil {
			return nil, err
		}
	}
	svc, err := w.newService()
	if err != nil {
		return nil, err
	}
	w.svc = svc
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		_ = svc.Stop()
		return nil, ErrClosed
	}
	e.workers[w] = struct{}{}
	e.mu.Unlock()
	return w, nil
}

// Name is the worker's service name.
func (w *Worker) Name() string { return w.name }

func (w *Worker) newService() (micro.Service, error) {
	svc, err := micro.AddService(w.e.nc, micro.Config{
		Name:        w.name,
		Version:     w.version,
		Description: w.description,
		QueueGroup:  "iii",
		// nats.go reports a slow consumer once until the subscription
		// catches up; the code says what the loss is to a caller
		// (unavailable: the dropped requests time out, and are retried).
		ErrorHandler: func(_ micro.Service, err *micro.NATSError) {
			w.e.opts.logger.Warn("worker subscription error", "worker", w.name, "subject", err.Subject,
				"code", wire.FromNATS(err).Code, "error", err.Description)
		},
	})
	if errors.Is(err, micro.ErrConfigValidation) {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidWorker, w.name, err)
	}
	if err != nil {
		// The connection, not the worker: closed or draining.
		return nil, fmt.Errorf("engine: start service %q: %w", w.name, err)
	}
	return svc, nil
}

// Register adds fn to the worker. The function is reachable as soon as
// Register returns nil. An error from the last step, the round trip that
// confirms the subscription (the connection is down), leaves fn
// registered: nats.go sends its subscription when the connection is
// back, and a second Register of it answers [ErrDuplicateFunction].
func (w *Worker) Register(fn Function) error {
	subj, err := subjects.FunctionSubject(fn.ID)
	if err != nil {
		return err
	}
	if fn.Handler == nil {
		return fmt.Errorf("%w: function %q has no handler", ErrInvalidOption, fn.ID)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if _, ok := w.fns[fn.ID]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicateFunction, fn.ID)
	}
	f := fn
	if err := w.addEndpoint(w.svc, &f, subj); err != nil {
		return err
	}
	w.fns[fn.ID] = &f
	w.order = append(w.order, fn.ID)
	w.addLocal(subj, &f)
	// The subscription is only buffered client-side until flushed; a round
	// trip makes the function reachable from other connections on return.
	if err := w.e.nc.Flush(); err != nil {
		return wire.FromNATS(err)
	}
	doc := fn.Skill
	if doc == "" {
		doc = GeneratedSkill(fn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), skillPublishTimeout)
	defer cancel()
	if err := w.e.PublishSkill(ctx, w.name, fn.ID, doc); err != nil {
		// The function serves without it; the directory lacks one page.
		w.e.opts.logger.Warn("skill not published", "worker", w.name, "function_id", fn.ID, "error", err)
	}
	return nil
}

// Unregister removes the function id. The NATS services framework cannot drop
// one endpoint, so the worker restarts its service with the remaining
// functions; replicas elsewhere keep serving meanwhile. A restart that
// fails (the connection closed or draining) leaves the worker closed, its
// error wrapping [ErrClosed]: it serves nothing, on the bus or by local
// calls, Register and Unregister return ErrClosed, and [Worker.Close]
// (or the engine's) still waits for its handlers in flight.
func (w *Worker) Unregister(id string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if _, ok := w.fns[id]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownFunction, id)
	}
	if err := w.restartWithout(id); err != nil {
		// Half stopped, or stopped with no service to replace it: its
		// functions are gone from the bus, so they go from local calls
		// too, and the worker refuses what it could no longer serve.
		w.closed = true
		w.removeLocal()
		_ = w.svc.Stop()
		return fmt.Errorf("%w: worker %q could not restart without %q: %w", ErrClosed, w.name, id, err)
	}
	delete(w.fns, id)
	w.removeLocal(id)
	w.order = slices.DeleteFunc(w.order, func(x string) bool { return x == id })
	if err := w.e.nc.Flush(); err != nil {
		return wire.FromNATS(err)
	}
	return nil
}

// restartWithout replaces w's service by one serving its functions but
// id. Called with w.mu held; on success w.svc is the new service.
func (w *Worker) restartWithout(id string) error {
	if err := w.svc.Stop(); err != nil {
		return fmt.Errorf("stop service: %w", err)
	}
	svc, err := w.newService()
	if err != nil {
		return err
	}
	for _, fid := range w.order {
		if fid == id {
			continue
		}
		subj, _ := subjects.FunctionSubject(fid)
		if err := w.addEndpoint(svc, w.fns[fid], subj); err != nil {
			_ = svc.Stop()
			return err
		}
	}
	w.svc = svc
	return nil
}

// endpointName derives a micro endpoint name (letters, digits, '-', '_')
// from a subject; the subject, not the name, identifies the function.
func endpointName(subj string) string {
	b := []byte(subj[len(subjects.FunctionPrefix):])
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

func (w *Worker) addEndpoint(svc micro.Service, f *Function, subj string) error {
	meta := map[string]string{MetaFunctionID: f.ID}
	if f.Description != "" {
		meta[MetaDescription] = f.Description
	}
	if f.RequestSchema != "" {
		meta[MetaRequestSchema] = f.RequestSchema
	}
	if f.ResponseSchema != "" {
		meta[MetaResponseSchema] = f.ResponseSchema
	}
	if f.Idempotent {
		meta[MetaIdempotent] = "true"
	}
	if f.Timeout > 0 {
		meta[MetaTimeoutMs] = strconv.FormatInt(f.Timeout.Milliseconds(), 10)
	}
	err := svc.AddEndpoint(endpointName(subj), micro.HandlerFunc(func(r micro.Request) {
		w.dispatch(f, r)
	}), micro.WithEndpointSubject(subj), micro.WithEndpointMetadata(meta))
	if err != nil {
		return fmt.Errorf("engine: add endpoint %q: %w", f.ID, err)
	}
	return nil
}

// dispatch hands one request to a goroutine, so a slow call never holds up
// the subscription; the semaphore bounds the worker's concurrency and pushes
// back into the subscription's pending buffer when full.
func (w *Worker) dispatch(f *Function, r micro.Request) {
	w.sem <- struct{}{}
	w.inflight.Add(1)
	w.e.pool.Go(func() {
		defer func() {
			<-w.sem
			w.inflight.Add(-1)
		}()
		w.serveFor(nil, f, r)
	})
}

// callerBudget is timeout, or less when the caller's remaining budget
// (the HeaderTimeoutMs value ms) is shorter. A value that is no positive
// number, or too large for a time.Duration, leaves timeout as it is.
func callerBudget(timeout time.Duration, ms string) time.Duration {
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n <= 0 || n > int64(math.MaxInt64/time.Millisecond) {
		return timeout
	}
	return min(timeout, time.Duration(n)*time.Millisecond)
}

// serveFor serves request r of f. caller, when not nil, is the context of
// an in-process caller (a local call): its end cancels the handler.
func (w *Worker) serveFor(caller context.Context, f *Function, r micro.Request) {
	e := w.e
	hdr := nats.Header(r.Headers())
	codec := wire.ForContentType(hdr.Get(wire.HeaderContentType))
	req := &Request{FunctionID: f.ID, Data: r.Data(), Header: hdr, Codec: codec}

	timeout := f.Timeout
	if timeout <= 0 {
		timeout = e.opts.timeout
	}
	timeout = callerBudget(timeout, hdr.Get(HeaderTimeoutMs))
	ctx, cancel := context.WithTimeout(e.base, timeout)
	defer cancel()
	if caller != nil {
		defer context.AfterFunc(caller, cancel)()
	}
	ctx = e.Extract(ctx, hdr)
	ctx, span := e.startHandlerSpan(ctx, f.ID, req)
	defer span.End()

	start := time.Now()
	resp, err := w.call(ctx, f, req)
	if err == nil {
		err = w.respond(r, f, codec, resp)
		if err != nil && errors.Is(err, micro.ErrRespond) && !e.nc.IsConnected() {
			// The connection is gone (closed, or reconnecting past its
			// buffer): no reply, error reply included, reaches the
			// caller, who times out. Not the function's failure.
			e.opts.logger.WarnContext(ctx, "reply not sent: connection lost", "function_id", f.ID,
				"code", wire.CodeUnavailable, "error", err)
			return
		}
	}
	if e.opts.measure { // building the attribute set is not free
		outcome := "ok"
		if err != nil {
			outcome = string(wire.From(err).Code)
		}
		e.fnDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(
			attribute.String(AttrFunctionID, f.ID), attribute.String("outcome", outcome)))
	}
	if err != nil {
		we := wire.From(err)
		span.SetStatus(codes.Error, string(we.Code))
		span.RecordError(we)
		if we.Code == wire.CodeInternal {
			e.opts.logger.ErrorContext(ctx, "function failed", "function_id", f.ID, "error", err)
		}
		if r.Reply() == "" {
			return // void call: nobody to tell
		}
		msg := wire.ReplyWithin(we, codec, e.nc.MaxPayload())
		if rerr := r.Respond(msg.Data, micro.WithHeaders(micro.Headers(msg.Header))); rerr != nil {
			e.opts.logger.WarnContext(ctx, "error reply failed", "function_id", f.ID, "error", rerr)
		}
	}
}

// call runs the handler, turning a panic into an internal error.
func (w *Worker) call(ctx context.Context, f *Function, req *Request) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			w.e.opts.logger.Error("function panicked", "function_id", f.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			resp, err = nil, wire.Errorf(wire.CodeInternal, "function %s panicked", f.ID)
		}
	}()
	resp, err = f.Handler(ctx, req)
	if err != nil && ctx.Err() != nil && !errors.As(err, new(*wire.Error)) {
		err = wire.Wrap(wire.CodeTimeout, err, "function %s ran out of time", f.ID)
	}
	return resp, err
}

func (w *Worker) respond(r micro.Request, f *Function, codec wire.Codec, resp any) error {
	if r.Reply() == "" {
		return nil
	}
	var body []byte
	switch v := resp.(type) {
	case Raw:
		body = v
	default:
		b, err := w.encode(f, codec, resp)
		if err != nil {
			return err
		}
		body = b
	}
	if int64(len(body)) > w.e.nc.MaxPayload() {
		return wire.Errorf(wire.CodeInternal, "response of %d bytes exceeds the server's max payload", len(body))
	}
	return r.Respond(body, micro.WithHeaders(micro.Headers{wire.HeaderContentType: []string{codec.ContentType()}}))
}

// encode encodes f's response in codec. The response's own marshalers
// are the handler's code: a panic there is an internal error, as one in
// the handler is, not the end of the process (or, in a local call, of
// the caller's goroutine).
func (w *Worker) encode(f *Function, codec wire.Codec, resp any) (body []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			w.e.opts.logger.Error("function response panicked as it encoded", "function_id", f.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			body, err = nil, wire.Errorf(wire.CodeInternal, "function %s: response panicked as it encoded", f.ID)
		}
	}()
	body, err = codec.Marshal(resp)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "response does not encode")
	}
	return body, nil
}

// Functions lists the ids the worker serves, in registration order.
func (w *Worker) Functions() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.order...)
}

// Close stops the worker's endpoints and waits, until ctx ends, for handlers
// in flight. Closing a closed worker waits for them too (a worker a failed
// [Worker.Unregister] closed still has its handlers' ends to wait for).
func (w *Worker) Close(ctx context.Context) error {
	w.mu.Lock()
	var err error
	if !w.closed {
		w.closed = true
		w.removeLocal()
		err = w.svc.Stop()
	}
	w.mu.Unlock()
	w.e.mu.Lock()
	delete(w.e.workers, w)
	w.e.mu.Unlock()
	// Stop drains the subscriptions asynchronously, so count rather than
	// wait on a WaitGroup that late deliveries could still add to.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for w.inflight.Load() > 0 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("engine: worker %q: %d handlers still running: %w", w.name, w.inflight.Load(), ctx.Err())
		}
	}
	if err != nil {
		return fmt.Errorf("engine: stop worker %q: %w", w.name, err)
	}
	return nil
}

// MaxReplyMargin bounds the time [WithReplyMargin] keeps for the answer.
const MaxReplyMargin = 250 * time.Millisecond

// WithReplyMargin ends a handler's work before ctx's deadline (the
// caller's budget, counted from when the request arrived, so transit is
// not in it): a quarter of the time left, at most [MaxReplyMargin]. The
// handler's own answer — a partial result or a timeout — then reaches a
// caller that still listens. Without a deadline it changes nothing.
func WithReplyMargin(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	margin := min(time.Until(dl)/4, MaxReplyMargin)
	if margin <= 0 {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, dl.Add(-margin))
}
