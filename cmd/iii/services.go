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

// startServices starts the engine's functions and the worker stack on a.e.
func (a *app) startServices(ctx context.Context, cfg upConfig) error {
	var opts []services.Option
	if cfg.httpAddr != "" {
		opts = append(opts, services.WithGateway())
	}
	svc, err := services.Start(ctx, a.e, opts...)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, svc.Close)
	if cfg.httpAddr != "" {
		if err := a.serveGateway(svc.Gateway(), cfg.httpAddr); err != nil {
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

// serveGateway serves the HTTP trigger gateway gw on addr.
func (a *app) serveGateway(gw http.Handler, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--http %s: %w", addr, err)
	}
	a.httpLn = ln
	// The gateway bounds each request's body itself (httpgw.WithBodyTimeout);
	// IdleTimeout closes keep-alive connections left idle, which would
	// otherwise stay open (and hold a descriptor) for ever.
	a.httpSrv = &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
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
