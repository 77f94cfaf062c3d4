package main

import "context"

// startServices starts the engine's functions and the worker stack on a.e.
func (a *app) startServices(ctx context.Context, cfg upConfig) error {
	_ = ctx
	_ = cfg
	return nil
}
