package orchestrator

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
)

// traceCarrier is ctx's trace context (traceparent, tracestate, baggage)
// as the engine would send it, to be stored in the run's record: every
// step of the run, on any node, after any crash or approval wait, then
// continues run::start's trace. nil when ctx carries none.
func traceCarrier(ctx context.Context, e *engine.Engine) map[string]string {
	h := nats.Header{}
	e.Inject(ctx, h)
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) > 0 {
			out[k] = v[0]
		}
	}
	return out
}

// traceExtractor turns a stored carrier back into a parent context.
func traceExtractor(e *engine.Engine) func(ctx context.Context, carrier map[string]string) context.Context {
	return func(ctx context.Context, carrier map[string]string) context.Context {
		h := make(nats.Header, len(carrier))
		for k, v := range carrier {
			h[k] = []string{v}
		}
		return e.Extract(ctx, h)
	}
}
