package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/iii-on-nats/iii/engine/services"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/std"
)

// startServices starts the engine's functions and the worker stack on a.e,
// then serves the HTTP gateway: a request is taken only once every
// function it may reach runs. The gateway's address is bound first, so a
// port in use fails the start before anything else starts.
func (a *app) startServices(ctx context.Context, cfg upConfig) error {
	var opts []services.Option
	if cfg.httpAddr != "" {
		ln, err := net.Listen("tcp", cfg.httpAddr)
		if err != nil {
			return fmt.Errorf("--http %s: %w", cfg.httpAddr, err)
		}
		a.httpLn = ln
		// Closes it when the start fails before it is served.
		a.closers = append(a.closers, func(context.Context) error { _ = ln.Close(); return nil })
		opts = append(opts, services.WithGateway())
	}
	svc, err := services.Start(ctx, a.e, opts...)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, svc.Close)
	env := workers.Env{Home: cfg.home, Logger: cfg.logger, Settings: cfg.settings}
	if a.modules != nil {
		env.Engine = a.modules.engine
	}
	run, err := workers.Global().Start(ctx, a.e, env, modules(cfg)...)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, run.Close)
	if a.httpLn != nil {
		a.serveGateway(svc.Gateway())
	}
	return nil
}

// gatewayGrace bounds how long a stopping node waits for the HTTP
// requests in flight before it closes their connections and stops the
// workers.
const gatewayGrace = 5 * time.Second

// serveGateway serves the HTTP trigger gateway gw on a.httpLn.
func (a *app) serveGateway(gw http.Handler) {
	// The gateway bounds each request's body itself (httpgw.WithBodyTimeout);
	// IdleTimeout closes keep-alive connections left idle, which would
	// otherwise stay open (and hold a descriptor) for ever.
	a.httpSrv = &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := a.httpSrv.Serve(a.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.e.Logger().Error("http gateway stopped", "error", err)
		}
	}()
	// The last closer added, so the first to run: the node stops taking
	// requests and answers those in flight while the functions they call
	// still run. (It ran after the workers had closed: a request taken
	// during their drain, or in flight, reached a function that was gone.)
	a.closers = append(a.closers, a.stopGateway)
}

// stopGateway stops accepting HTTP requests and waits for those in
// flight, at most gatewayGrace; the connections of those still running
// then are closed, and their clients see the connection close.
func (a *app) stopGateway(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, gatewayGrace)
	defer cancel()
	if err := a.httpSrv.Shutdown(sctx); err != nil {
		a.e.Logger().Warn("http requests still running at shutdown; their connections are closed", "error", err)
		_ = a.httpSrv.Close()
	}
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
