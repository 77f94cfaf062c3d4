package orchestrator

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
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

// startModelSpan starts the client span of one model call, named and
// tagged after the OpenTelemetry GenAI semantic conventions
// ("chat <model>", gen_ai.*), plus the iii ids.
func startModelSpan(ctx context.Context, e *engine.Engine, req session.ModelRequest) (context.Context, trace.Span) {
	_, mid := engine.SessionFromContext(ctx)
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", req.Provider),
		attribute.String("gen_ai.system", req.Provider),
		attribute.String("gen_ai.request.model", req.Model),
		attribute.String("gen_ai.conversation.id", req.SessionID),
		attribute.String(engine.AttrSessionID, req.SessionID),
		attribute.String(engine.AttrFunctionID, "provider::"+req.Provider+"::stream"),
	}
	if mid != "" {
		attrs = append(attrs, attribute.String(engine.AttrMessageID, mid))
	}
	if req.Run.MaxTokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.request.max_tokens", req.Run.MaxTokens))
	}
	return e.Tracer().Start(ctx, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endModelSpan records the call's outcome: finish reason, token usage,
// cost (when the catalog prices the model), and an error status for a
// failed call.
func endModelSpan(span trace.Span, in turn.Input, usage *agent.Usage, priced bool) {
	defer span.End()
	if usage != nil {
		span.SetAttributes(
			attribute.Int64("gen_ai.usage.input_tokens", usage.InputTokens+usage.CacheReadTokens+usage.CacheWriteTokens),
			attribute.Int64("gen_ai.usage.output_tokens", usage.OutputTokens),
		)
		if priced {
			span.SetAttributes(attribute.Float64("iii.cost_usd", usage.CostUSD))
		}
	}
	switch out := in.(type) {
	case turn.ModelDone:
		span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{string(out.Message.StopReason)}))
		if out.Message.Model != "" {
			span.SetAttributes(attribute.String("gen_ai.response.model", out.Message.Model))
		}
	case turn.ModelFailed:
		kind := string(out.Kind)
		if kind == "" {
			kind = "aborted"
		}
		span.SetAttributes(attribute.String("error.type", kind))
		span.SetStatus(codes.Error, out.Message)
	}
}
