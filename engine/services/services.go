package services

import (
	"context"
	"errors"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/cron"
	"github.com/iii-on-nats/iii/engine/httpgw"
	"github.com/iii-on-nats/iii/engine/queue"
	"github.com/iii-on-nats/iii/engine/state"
	"github.com/iii-on-nats/iii/engine/topic"
)

// DefaultQueue is the durable queue every node consumes unless told
// otherwise ([WithDefaultQueue]), so that `queue::enqueue {queue:"default",
// ...}` runs without extra set-up.
const DefaultQueue = "default"

// Option configures [Start].
type Option func(*options)

type options struct {
	queue   string
	gateway bool
}

// WithDefaultQueue names the queue the node consumes ("" consumes none).
func WithDefaultQueue(name string) Option { return func(o *options) { o.queue = name } }

// WithGateway also serves the HTTP route functions (http::*) and builds
// their gateway ([Running.Gateway]).
func WithGateway() Option { return func(o *options) { o.gateway = true } }

// Running is the started services; Close stops what they run.
type Running struct {
	gateway *httpgw.Gateway
	closers []func(context.Context) error
}

// Start serves the engine's functions on e (see the package doc). On an
// error it closes what it started.
func Start(ctx context.Context, e *engine.Engine, opts ...Option) (*Running, error) {
	o := options{queue: DefaultQueue}
	for _, opt := range opts {
		opt(&o)
	}
	r := &Running{}
	if err := r.start(ctx, e, o); err != nil {
		return nil, errors.Join(err, r.Close(context.WithoutCancel(ctx)))
	}
	return r, nil
}

func (r *Running) start(ctx context.Context, e *engine.Engine, o options) error {
	store, err := state.New(ctx, e)
	if err != nil {
		return err
	}
	if err := r.served(state.Serve(ctx, e, store)); err != nil {
		return err
	}
	if err := r.served(queue.Serve(ctx, e)); err != nil {
		return err
	}
	if err := r.served(topic.Serve(ctx, e)); err != nil {
		return err
	}
	sched, err := cron.Start(ctx, e)
	if err != nil {
		return err
	}
	r.closers = append(r.closers, sched.Close)
	if err := r.served(cron.Serve(ctx, e, sched)); err != nil {
		return err
	}
	if o.gateway {
		gw, err := httpgw.New(ctx, e)
		if err != nil {
			return err
		}
		r.closers = append(r.closers, gw.Close)
		if err := r.served(httpgw.Serve(ctx, e, gw)); err != nil {
			return err
		}
		r.gateway = gw
	}
	// The default queue's consumer starts last, so it closes first: the
	// jobs it is running finish while every function they may call is
	// still served.
	if o.queue != "" {
		q, err := queue.Consume(ctx, e, o.queue)
		if err != nil {
			return err
		}
		r.closers = append(r.closers, q.Close)
	}
	return nil
}

// served records a started worker, so that Close (and a failed Start)
// stops serving its functions before what they use is closed.
func (r *Running) served(w *engine.Worker, err error) error {
	if err != nil {
		return err
	}
	r.closers = append(r.closers, w.Close)
	return nil
}

// Gateway is the HTTP trigger gateway ([WithGateway]), nil without it.
func (r *Running) Gateway() *httpgw.Gateway { return r.gateway }

// Close stops the services in the reverse order of their start: each
// worker of the engine's functions stops serving them (a caller gets
// function_not_found) before the consumer, scheduler or gateway it drives
// is closed.
func (r *Running) Close(ctx context.Context) error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		errs = append(errs, r.closers[i](ctx))
	}
	r.closers = nil
	return errors.Join(errs...)
}
