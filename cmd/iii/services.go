package main

import (
	"context"

	"github.com/iii-on-nats/iii/engine/queue"
	"github.com/iii-on-nats/iii/engine/state"
	"github.com/iii-on-nats/iii/engine/topic"
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
	return nil
}
