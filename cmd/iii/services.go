package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/iii-on-nats/iii/workers/std"
	"net"
	"net/http"
	"time"

	"github.com/iii-on-nats/iii/engine/cron"
	"github.com/iii-on-nats/iii/engine/httpgw"
	"github.com/iii-on-nats/iii/engine/queue"
	"github.com/iii-on-nats/iii/engine/state"
	"github.com/iii-on-nats/iii/engine/topic"
	"github.com/iii-on-nats/iii/workers"
)

// DefaultQueue is the durable queue every `iii up` node consumes, so that
// `queue::enqueue {queue:"default", ...}` runs without extra set-up.
const DefaultQueue = "default"

// startServices starts the engine's functions and the worker stack on a.e.
func (a *app) startServices(ctx context.Context, cfg upConfig) error {
	store, err := state.New(ctx, a.e)
	if err != nil {
		return err
	}
	if _, err := state.Serve(ctx, a.e, store); err != nil {
		return err
	}
	if _, err := queue.Serve(ctx, a.e); err != nil {
		return err
	}
	q, err := queue.Consume(ctx, a.e, DefaultQueue)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, q.Close)
	if _, err := topic.Serve(ctx, a.e); err != nil {
		return err
	}
	sched, err := cron.Start(ctx, a.e)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, sched.Close)
	if _, err := cron.Serve(ctx, a.e, sched); err != nil {
		return err
	}
	if cfg.httpAddr != "" {
		if err := a.startGateway(ctx, cfg.httpAddr); err != nil {
			return err
		}
	}
	env := workers.Env{Home: cfg.home, Logger: cfg.logger, Settings: cfg.settings}
	if a.modules != nil {
		env.Engine = a.modules.engine
	}
	run, err := workers.Global().Start(ctx, a.e, env, modules(cfg)...)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, run.Close)
	return nil
}

// startGateway serves the HTTP trigger gateway on addr.
func (a *app) startGateway(ctx context.Context, addr string) error {
	gw, err := httpgw.New(ctx, a.e)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, gw.Close)
	if _, err := httpgw.Serve(ctx, a.e, gw); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--http %s: %w", addr, err)
	}
	a.httpLn = ln
	a.httpSrv = &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := a.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.e.Logger().Error("http gateway stopped", "error", err)
		}
	}()
	// Stop accepting requests first: it is the last closer added, so it
	// runs before the gateway and the engine close.
	a.closers = append(a.closers, a.httpSrv.Shutdown)
	return nil
}

// modules are the worker modules a node starts: --workers, or the
// standard set.
func modules(cfg upConfig) []string {
	if cfg.modules == nil {
		return std.Default
	}
	return cfg.modules
}
