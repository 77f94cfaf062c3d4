package main

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
)

// moduleConns gives each worker module of a process its own NATS
// connection and engine, as if it ran in a process of its own: the
// server reads every connection on its own goroutine, so the modules'
// traffic is not serialized through one (measured in docs/PERFORMANCE.md,
// "One connection per worker module"). The engines share the process's
// options (logger, tracer and meter providers, replicas, region).
type moduleConns struct {
	dial func(name string) (*nats.Conn, error)
	opts []engine.Option

	mu   sync.Mutex
	made []moduleConn
}

type moduleConn struct {
	nc *nats.Conn
	e  *engine.Engine
}

// engine is workers.Env.Engine: a new connection named "iii-<module>" and
// an engine over it.
func (m *moduleConns) engine(_ context.Context, module string) (*engine.Engine, error) {
	nc, err := m.dial("iii-" + module)
	if err != nil {
		return nil, err
	}
	e, err := engine.New(nc, m.opts...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	m.mu.Lock()
	m.made = append(m.made, moduleConn{nc: nc, e: e})
	m.mu.Unlock()
	return e, nil
}

// close closes the engines and drains their connections, newest first;
// call it after the workers closed.
func (m *moduleConns) close(ctx context.Context) error {
	m.mu.Lock()
	made := m.made
	m.made = nil
	m.mu.Unlock()
	var errs []error
	for i := len(made) - 1; i >= 0; i-- {
		if err := made[i].e.Close(ctx); err != nil {
			errs = append(errs, err)
		}
		_ = made[i].nc.Drain()
	}
	return errors.Join(errs...)
}
