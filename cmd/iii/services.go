package main

import (
	"context"

	"github.com/iii-on-nats/iii/engine/state"
)

// startServices starts the engine's functions and the worker stack on a.e.
func (a *app) startServices(ctx context.Context, cfg upConfig) error {
	store, err := state.New(ctx, a.e)
	if err != nil {
		return err
	}
	if _, err := state.Serve(ctx, a.e, store); err != nil {
		return err
	}
	return nil
}
