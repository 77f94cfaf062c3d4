package traces_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/traces"
)

// tid and sid make valid trace and span ids from small numbers.
func tid(n int) string { return fmt.Sprintf("%032x", n+1) }
func sid(n int) string { return fmt.Sprintf("%016x", n+1) }

// span is a span of trace t, id s, parent p (-1: none), from startMs to
// endMs, with attributes kv (pairs).
func span(t, s, p int, startMs, endMs int64, kv ...string) traces.Span {
	sp := traces.Span{
		TraceID: tid(t), SpanID: sid(s), Name: fmt.Sprintf("span-%d", s), Kind: "server",
		StartNs: startMs * 1e6, EndNs: endMs * 1e6, DurationMs: float64(endMs - startMs), Status: traces.StatusOK,
	}
	if p >= 0 {
		sp.ParentSpanID = sid(p)
	}
	if len(kv) > 0 {
		sp.Attributes = map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			sp.Attributes[kv[i]] = kv[i+1]
		}
	}
	return sp
}

func newStore(t testing.TB, opts ...traces.Option) *traces.Store {
	t.Helper()
	s, err := traces.NewStore(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fixture is a server, an engine "base" that serves the traces worker,
// an exporter on it, a tracer provider exporting to it (and to mem), and
// an engine "e" whose handler spans go to that provider.
type fixture struct {
	ns   *server.Server
	base *engine.Engine
	e    *engine.Engine
	x    *traces.Exporter
	tp   *sdktrace.TracerProvider
	mem  *tracetest.InMemoryExporter
	w    *traces.Worker
}

func newFixture(t testing.TB, opts ...traces.Option) *fixture {
	t.Helper()
	ctx := ctxT(t)
	f := &fixture{ns: enginetest.RunServer(t)}
	f.base = enginetest.NewEngine(t, f.ns)
	var err error
	if f.x, err = traces.NewExporter(ctx, f.base, opts...); err != nil {
		t.Fatal(err)
	}
	f.mem = tracetest.NewInMemoryExporter()
	f.tp = sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(traces.NewSpanProcessor(f.x, sdktrace.WithBatchTimeout(10*time.Millisecond))),
		sdktrace.WithSyncer(f.mem),
	)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.tp.Shutdown(ctx)
	})
	f.e = enginetest.NewEngine(t, f.ns, engine.WithTracerProvider(f.tp))
	f.w = startWorker(t, f.base, opts...)
	return f
}

func startWorker(t testing.TB, e *engine.Engine, opts ...traces.Option) *traces.Worker {
	t.Helper()
	w := traces.NewWorker(opts...)
	if err := w.Start(ctxT(t), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return w
}

// flush ends with every span ended so far acknowledged by the stream.
func (f *fixture) flush(t testing.TB) {
	t.Helper()
	if err := f.tp.ForceFlush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// names flattens a tree into "name(child,child)" form.
func names(nodes []*traces.TreeNode) string {
	out := ""
	for i, n := range nodes {
		if i > 0 {
			out += ","
		}
		out += n.Name
		if n.MissingParent {
			out += "!"
		}
		if len(n.Children) > 0 {
			out += "(" + names(n.Children) + ")"
		}
	}
	return out
}
