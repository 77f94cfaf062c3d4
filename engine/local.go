package engine

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Local calls: see the package doc.

// localKey names a function served locally: the server its worker's
// connection was on when it registered, and its subject.
type localKey struct{ server, subject string }

type localFn struct {
	w *Worker
	f *Function
}

// locals is the process's functions served with local calls on. Two
// workers of one process may serve the same function on the same server
// (replicas in one process); a call goes to the first listed, and to the
// next once that one is withdrawn.
var locals = struct {
	mu sync.RWMutex
	m  map[localKey][]*localFn
}{m: map[localKey][]*localFn{}}

// addLocal lists f, served by w at subj, for local calls. Called with w.mu
// held.
func (w *Worker) addLocal(subj string, f *Function) {
	if !w.e.opts.localCalls {
		return
	}
	server := w.e.nc.ConnectedServerId()
	if server == "" {
		return
	}
	k := localKey{server, subj}
	locals.mu.Lock()
	locals.m[k] = append(slices.DeleteFunc(locals.m[k], func(lf *localFn) bool { return lf.w == w }), &localFn{w: w, f: f})
	locals.mu.Unlock()
}

// removeLocal withdraws w's functions (all of them when ids is empty)
// from local calls. Called with w.mu held.
func (w *Worker) removeLocal(ids ...string) {
	if !w.e.opts.localCalls {
		return
	}
	locals.mu.Lock()
	defer locals.mu.Unlock()
	for k, lfs := range locals.m {
		lfs = slices.DeleteFunc(lfs, func(lf *localFn) bool {
			return lf.w == w && (len(ids) == 0 || slices.Contains(ids, lf.f.ID))
		})
		if len(lfs) == 0 {
			delete(locals.m, k)
		} else {
			locals.m[k] = lfs
		}
	}
}

// local finds the function served at subject by this process, on the
// server e is connected to.
func (e *Engine) local(subject string) *localFn {
	if !e.opts.localCalls {
		return nil
	}
	server := e.nc.ConnectedServerId()
	if server == "" {
		return nil
	}
	locals.mu.RLock()
	defer locals.mu.RUnlock()
	for _, lf := range locals.m[localKey{server, subject}] {
		if lf.w.e.nc.ConnectedServerId() == server {
			return lf
		}
		// Its worker's connection moved to another server.
	}
	return nil
}

// ServesLocally reports whether function id is served by this process on
// the server e is connected to, so that a local call reaches it without
// the bus ([WithLocalCalls]; false when e does not make local calls). It
// needs no discovery: a worker's $SRV reply that comes late cannot make a
// function of this very process look absent.
func (e *Engine) ServesLocally(id string) bool {
	subj, err := subjects.FunctionSubject(id)
	if err != nil {
		return false
	}
	return e.local(subj) != nil
}

// LocalCalls reports whether the engine makes and serves local calls
// ([WithLocalCalls]).
func (e *Engine) LocalCalls() bool { return e.opts.localCalls }

// beforeBusKey is the context key of [BeforeBus].
type beforeBusKey struct{}

// BeforeBus returns ctx carrying fn, which a call made with it ([Engine.Trigger],
// [Call], [Engine.TriggerRaw]) runs just before its request goes on the
// bus; a call served locally does not run it, and an error from fn fails
// the call with it, unsent. It is how a caller prepares for a handler in
// another process only when there is one: a channel reader subscribes on
// the bus only then (channel.WithLocalFirst). The handler's own context
// does not carry fn.
func BeforeBus(ctx context.Context, fn func(context.Context) error) context.Context {
	return context.WithValue(ctx, beforeBusKey{}, fn)
}

// request sends msg to its function and returns the reply: a local call
// when the function is served here, else a request on the bus. aliased
// says msg's body is the caller's buffer (a [Raw] request): a local call
// gives the handler a copy, as the bus would, so neither side sees the
// other change it.
func (e *Engine) request(ctx context.Context, msg *nats.Msg, aliased bool) (*nats.Msg, error) {
	if lf := e.local(msg.Subject); lf != nil {
		// What a request on the bus checks before it is sent.
		if err := ctx.Err(); err != nil {
			return nil, wire.FromNATS(err)
		}
		limit := e.nc.MaxPayload()
		if wireSize(msg) > limit {
			return nil, wire.FromNATS(nats.ErrMaxPayload)
		}
		if aliased {
			msg.Data = bytes.Clone(msg.Data)
		}
		if reply, ok, err := lf.w.serveLocal(ctx, lf.f, msg, limit); ok {
			return reply, err
		}
	}
	if fn, _ := ctx.Value(beforeBusKey{}).(func(context.Context) error); fn != nil {
		if err := fn(ctx); err != nil {
			return nil, wire.FromNATS(err)
		}
	}
	reply, err := e.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return nil, wire.FromNATS(err)
	}
	return reply, nil
}

// wireSize is msg's size against a server's max payload, as nats.go
// counts it before it publishes: the body and the encoded headers.
func wireSize(msg *nats.Msg) int64 { return int64(len(msg.Data) + wire.HeaderSize(msg.Header)) }

// serveLocal runs f's handler for msg in the caller's goroutine. ok is
// false when w no longer serves f (closed, or f unregistered): the caller
// goes over the bus. A caller that gives up cancels the handler's context;
// a handler that does not watch it holds its caller until it returns,
// where over the bus the caller would return at once (a goroutine hand-off
// a call to avoid that measured 7 % of the turns' throughput: stop 34).
func (w *Worker) serveLocal(ctx context.Context, f *Function, msg *nats.Msg, limit int64) (reply *nats.Msg, ok bool, err error) {
	w.mu.Lock()
	if w.closed || w.fns[f.ID] != f {
		w.mu.Unlock()
		return nil, false, nil
	}
	w.inflight.Add(1)
	w.mu.Unlock()
	defer w.inflight.Add(-1)
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, true, wire.FromNATS(ctx.Err())
	}
	defer func() { <-w.sem }()
	r := &localRequest{msg: msg, limit: limit}
	w.serveFor(ctx, f, r)
	if err := ctx.Err(); err != nil {
		return nil, true, wire.FromNATS(err) // as a request on the bus gives up
	}
	if r.reply == nil {
		return nil, true, wire.Errorf(wire.CodeInternal, "function %s answered nothing", f.ID)
	}
	return r.reply, true, nil
}

// localRequest is a request served in-process: the handler's answer is
// kept instead of published.
type localRequest struct {
	msg   *nats.Msg
	limit int64 // the server's max payload
	reply *nats.Msg
}

// Respond keeps the answer, copied; one over the max payload with its
// headers fails as a reply published on the bus would.
func (r *localRequest) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Data: data}
	for _, o := range opts {
		o(m)
	}
	if wireSize(m) > r.limit {
		return fmt.Errorf("%w: %w", micro.ErrRespond, nats.ErrMaxPayload)
	}
	m.Data = bytes.Clone(data)
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	r.reply = m
	return nil
}

func (r *localRequest) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := wire.JSON.Marshal(v)
	if err != nil {
		return err
	}
	return r.Respond(b, opts...)
}

func (r *localRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	return r.Respond(data, append(opts, micro.WithHeaders(micro.Headers{
		micro.ErrorHeader:     []string{description},
		micro.ErrorCodeHeader: []string{code},
	}))...)
}

func (r *localRequest) Data() []byte           { return r.msg.Data }
func (r *localRequest) Headers() micro.Headers { return micro.Headers(r.msg.Header) }
func (r *localRequest) Subject() string        { return r.msg.Subject }

// Reply is never empty: the caller waits for an answer.
func (r *localRequest) Reply() string { return "_LOCAL" }
