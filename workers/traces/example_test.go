package traces_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/traces"
)

// Example exports the spans of a function call made in a session, and
// reads them back from the trace store by session and as a tree.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The node's side: an exporter in the tracer provider of the engine.
	exp, err := traces.NewExporter(ctx, x.Engine)
	if err != nil {
		panic(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(traces.NewSpanProcessor(exp)))
	defer tp.Shutdown(ctx)
	e, err := engine.New(x.Conn, engine.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	defer e.Close(ctx)
	ew, err := e.Worker("greeter")
	if err != nil {
		panic(err)
	}
	if err := ew.Register(engine.Function{ID: "greet::hello", Handler: engine.Typed(func(context.Context, struct{}) (string, error) {
		return "hello", nil
	})}); err != nil {
		panic(err)
	}

	// The store.
	w := traces.NewWorker()
	if err := w.Start(ctx, x.Engine); err != nil {
		panic(err)
	}
	defer w.Close(ctx)

	if err := e.Trigger(engine.WithSession(ctx, "s-1", "m-1"), "greet::hello", struct{}{}, nil); err != nil {
		panic(err)
	}
	_ = tp.ForceFlush(ctx) // the span is in the stream now

	var res traces.GroupByResponse
	for len(res.Groups) == 0 && ctx.Err() == nil {
		res, err = engine.Call[traces.GroupByResponse](ctx, x.Engine, traces.GroupByFunction,
			traces.GroupByRequest{Attribute: engine.AttrSessionID})
		if err != nil {
			panic(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	g := res.Groups[0]
	fmt.Println("session:", g.Value, "traces:", g.TraceCount, "spans:", g.SpanCount)

	tree, err := engine.Call[traces.TreeResponse](ctx, x.Engine, traces.TreeFunction, traces.TreeRequest{TraceID: g.TraceIDs[0]})
	if err != nil {
		panic(err)
	}
	root := tree.Spans[0]
	fmt.Println("root:", root.Name, root.Kind, root.Status, root.Attributes[engine.AttrMessageID])
	// Output:
	// session: s-1 traces: 1 spans: 1
	// root: greet::hello server unset m-1
}
