package workers

import (
	"context"
	"errors"
	"sync"

	"github.com/iii-on-nats/iii/engine"
)

// ErrStarted is returned by [Endpoints.Start] when called twice (modules
// re-export it as their own ErrStarted).
var ErrStarted = errors.New("workers: already started")

// Endpoints is the engine worker of a module with the lifecycle every
// module shares: started at most once, never after Close, closed once. The
// zero value is ready to use.
type Endpoints struct {
	mu     sync.Mutex
	ew     *engine.Worker
	closed bool
}

// Start registers the functions build returns on a new engine worker name
// of e. build runs only when the endpoints were neither started nor
// closed, under the lock (so it may set up what the handlers use). Start
// returns [ErrStarted] when called twice and engine.ErrClosed after Close;
// when a registration fails, the engine worker is closed again.
func (p *Endpoints) Start(ctx context.Context, e *engine.Engine, name, description string, build func() ([]engine.Function, error)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return engine.ErrClosed
	}
	if p.ew != nil {
		return ErrStarted
	}
	fns, err := build()
	if err != nil {
		return err
	}
	ew, err := e.Worker(name, engine.WithDescription(description))
	if err != nil {
		return err
	}
	for _, fn := range fns {
		if err := ew.Register(fn); err != nil {
			_ = ew.Close(ctx)
			return err
		}
	}
	p.ew = ew
	return nil
}

// Close stops the endpoints, waiting for calls in flight until ctx ends.
// before, if not nil, runs once, first (to stop what the handlers wait
// on). Close is idempotent.
func (p *Endpoints) Close(ctx context.Context, before func()) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ew := p.ew
	p.mu.Unlock()
	if before != nil {
		before()
	}
	if ew == nil {
		return nil
	}
	return ew.Close(ctx)
}

// Served is the engine worker of a module that serves a resource (a store,
// a ledger) opened at Start: the resource's functions are registered once
// it is open, and Close stops the endpoints, then the resource. The zero
// value is ready to use.
type Served[R Closer] struct {
	eps Endpoints

	mu       sync.Mutex
	resource R
	open     bool
}

// Start opens the resource with open (only when neither started nor
// closed) and registers the functions it returns on a new engine worker
// name of e; see [Endpoints.Start].
// A resource whose functions fail to register is closed again.
func (s *Served[R]) Start(ctx context.Context, e *engine.Engine, name, description string, open func() (R, []engine.Function, error)) error {
	opened := false
	err := s.eps.Start(ctx, e, name, description, func() ([]engine.Function, error) {
		r, fns, err := open()
		if err != nil {
			return nil, err
		}
		opened = true
		s.mu.Lock()
		s.resource, s.open = r, true
		s.mu.Unlock()
		return fns, nil
	})
	if err != nil && opened {
		s.mu.Lock()
		r := s.resource
		var zero R
		s.resource, s.open = zero, false
		s.mu.Unlock()
		_ = r.Close(ctx)
	}
	return err
}

// Resource is the open resource; ok is false before Start.
func (s *Served[R]) Resource() (r R, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resource, s.open
}

// Close stops the endpoints, waiting for calls in flight until ctx ends,
// then closes the resource. Close is idempotent.
func (s *Served[R]) Close(ctx context.Context) error {
	err := s.eps.Close(ctx, nil)
	s.mu.Lock()
	r, open := s.resource, s.open
	s.open = false
	s.mu.Unlock()
	if open {
		if cerr := r.Close(ctx); err == nil {
			err = cerr
		}
	}
	return err
}

// Shutdown ends a module's calls in flight when it closes: Bind derives a
// call's context that also ends, with the Shutdown's cause, at Close.
type Shutdown struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	cause  error
}

// NewShutdown returns a Shutdown whose Close ends bound contexts with
// cause (a wire error, say "unavailable: X is shutting down").
func NewShutdown(cause error) *Shutdown {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Shutdown{ctx: ctx, cancel: cancel, cause: cause}
}

// Bind derives from ctx a context that also ends at Close; release it
// when the call ends.
func (s *Shutdown) Bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.ctx, func() { cancel(s.cause) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// Close ends every bound context. It is idempotent; nil is a no-op.
func (s *Shutdown) Close() {
	if s != nil {
		s.cancel(s.cause)
	}
}
