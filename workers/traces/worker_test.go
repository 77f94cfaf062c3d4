package traces_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/traces"
)

type empty struct{}

// serveChain registers test::outer, which calls test::inner through
// e.Trigger, on e.
func serveChain(t *testing.T, e *engine.Engine) {
	t.Helper()
	w, err := e.Worker("chain")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	for _, fn := range []engine.Function{
		{ID: "test::outer", Handler: engine.Typed(func(ctx context.Context, _ empty) (empty, error) {
			return empty{}, e.Trigger(ctx, "test::inner", empty{}, nil)
		})},
		{ID: "test::inner", Handler: engine.Typed(func(context.Context, empty) (empty, error) {
			return empty{}, wire.Errorf(wire.CodeConflict, "busy")
		})},
	} {
		if err := w.Register(fn); err != nil {
			t.Fatal(err)
		}
	}
}

// runChain calls test::outer in session sid under a root span that links
// to linkTo, and returns the trace id.
func runChain(t *testing.T, f *fixture, sid string, linkTo trace.SpanContext) string {
	t.Helper()
	ctx := engine.WithSession(ctxT(t), sid, "m-"+sid)
	ctx, root := f.tp.Tracer("test").Start(ctx, "client", trace.WithLinks(trace.Link{SpanContext: linkTo}))
	err := f.e.Trigger(ctx, "test::outer", empty{}, nil)
	root.End()
	if !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("chain: %v", err)
	}
	return root.SpanContext().TraceID().String()
}

func TestChainReachesStore(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	serveChain(t, f.e)
	link := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9: 9}, SpanID: trace.SpanID{7: 7}})
	trace1 := runChain(t, f, "s-1", link)
	trace2 := runChain(t, f, "s-1", link)
	trace3 := runChain(t, f, "s-2", link)
	f.flush(t)
	if n := len(f.mem.GetSpans()); n != 9 {
		t.Fatalf("in-memory exporter has %d spans, want 9", n)
	}
	ctx := ctxT(t)

	var res traces.GroupByResponse
	enginetest.Eventually(t, 5*time.Second, func() error {
		var err error
		res, err = engine.Call[traces.GroupByResponse](ctx, f.base, traces.GroupByFunction,
			traces.GroupByRequest{Attribute: engine.AttrSessionID})
		if err != nil {
			return err
		}
		if len(res.Groups) != 2 || res.Groups[1].SpanCount != 4 || res.Groups[0].SpanCount != 2 {
			return fmt.Errorf("groups %+v", res.Groups)
		}
		return nil
	})
	// The root span has no session attribute (the engine sets it on
	// handler spans only): 2 spans per call.
	g := res.Groups[1]
	if g.Value != "s-1" || g.TraceCount != 2 || g.TraceIDs[0] != trace2 || g.TraceIDs[1] != trace1 || g.ErrorCount != 4 {
		t.Fatalf("s-1 %+v", g)
	}
	if g := res.Groups[0]; g.Value != "s-2" || g.TraceIDs[0] != trace3 {
		t.Fatalf("s-2 %+v", g)
	}

	fns, err := engine.Call[traces.GroupByResponse](ctx, f.base, traces.GroupByFunction,
		traces.GroupByRequest{Attribute: engine.AttrFunctionID})
	if err != nil || len(fns.Groups) != 2 || fns.Groups[0].SpanCount != 3 || fns.Groups[1].SpanCount != 3 {
		t.Fatalf("by function: %+v %v", fns, err)
	}

	tree, err := engine.Call[traces.TreeResponse](ctx, f.base, traces.TreeFunction, traces.TreeRequest{TraceID: trace1})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(tree.Spans); got != "client(test::outer(test::inner))" || tree.SpanCount != 3 || tree.ErrorCount != 2 {
		t.Fatalf("tree %s %+v", got, tree)
	}
	root := tree.Spans[0]
	if len(root.Links) != 1 || root.Links[0].TraceID != link.TraceID().String() || root.Links[0].SpanID != link.SpanID().String() {
		t.Fatalf("root links %+v", root.Links)
	}
	inner := root.Children[0].Children[0]
	if inner.Kind != "server" || inner.Status != traces.StatusError || inner.StatusMessage != "conflict" ||
		inner.Attributes[engine.AttrSessionID] != "s-1" || inner.Attributes[engine.AttrMessageID] != "m-s-1" ||
		inner.ParentSpanID != root.Children[0].SpanID || inner.Resource["service.name"] == nil {
		t.Fatalf("inner span %+v", inner.Span)
	}
}

func TestRestartRebuilds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	serveChain(t, f.e)
	id := runChain(t, f, "s-r", trace.SpanContext{})
	f.flush(t)
	ctx := ctxT(t)
	enginetest.Eventually(t, 5*time.Second, func() error {
		_, err := f.w.Store().Tree(id)
		return err
	})
	if err := f.w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A new worker, on another engine, replays the stream.
	w2 := startWorker(t, enginetest.NewEngine(t, f.ns))
	enginetest.Eventually(t, 5*time.Second, func() error {
		res, err := engine.Call[traces.TreeResponse](ctx, f.base, traces.TreeFunction, traces.TreeRequest{TraceID: id})
		if err != nil {
			return err
		}
		if res.SpanCount != 3 {
			return fmt.Errorf("%d spans", res.SpanCount)
		}
		return nil
	})
	if st := w2.Store().Stats(); st.Spans != 3 || st.LastSeq == 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBadInputOverTheWire(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	startWorker(t, e)
	ctx := ctxT(t)
	for _, tt := range []struct {
		fn, body string
		want     error
	}{
		{traces.GroupByFunction, `{"attribute":"http.method"}`, wire.ErrInvalidPayload},
		{traces.GroupByFunction, `{}`, wire.ErrInvalidPayload},
		{traces.GroupByFunction, `{"attribute":"iii.session.id","limit":5000}`, wire.ErrInvalidPayload},
		{traces.GroupByFunction, `{"attribute":"iii.session.id","since_ms":"x"}`, wire.ErrInvalidPayload},
		{traces.GroupByFunction, `not json`, wire.ErrInvalidPayload},
		{traces.TreeFunction, `{"trace_id":"1234"}`, wire.ErrInvalidPayload},
		{traces.TreeFunction, `{"trace_id":"` + strings.Repeat("g", 32) + `"}`, wire.ErrInvalidPayload},
		{traces.TreeFunction, `{}`, wire.ErrInvalidPayload},
		{traces.TreeFunction, `{"trace_id":"` + tid(3) + `"}`, wire.ErrNotFound},
		{traces.GroupByFunction, `{"attribute":"iii.message.id"}`, nil},
	} {
		_, _, err := e.TriggerRaw(ctx, tt.fn, []byte(tt.body), wire.JSON)
		if (tt.want == nil && err != nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("%s %s: %v, want %v", tt.fn, tt.body, err, tt.want)
		}
	}
}

func TestExporterWindow(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := ctxT(t)
	x, err := traces.NewExporter(ctx, e, traces.WithMaxPending(1))
	if err != nil {
		t.Fatal(err)
	}
	spans := stubs(200)
	if err := x.ExportSpans(ctx, spans); err != nil {
		t.Fatal(err)
	}
	if err := x.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	st := x.Stats()
	if st.Published+st.Dropped+st.Failed != 200 || st.Dropped == 0 || st.Failed != 0 || st.Acked != st.Published || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := x.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_ = x.ExportSpans(ctx, spans[:3])
	if st2 := x.Stats(); st2.Dropped != st.Dropped+3 || st2.Published != st.Published {
		t.Fatalf("after shutdown %+v", st2)
	}
	// What was acked is in the stream: one message per trace of a batch
	// (ten spans per trace here), so no more messages than spans.
	s, err := e.JetStream().Stream(ctx, traces.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 || info.State.Msgs > st.Acked || info.Config.MaxAge != traces.DefaultStreamMaxAge || info.Config.MaxBytes != traces.DefaultStreamMaxBytes {
		t.Fatalf("stream %+v %+v", info.State, info.Config)
	}
}

func TestProvision(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		settings map[string]string
		ok       bool
	}{
		{nil, true},
		{map[string]string{"max_spans": "1000", "stream_max_age": "1h", "stream_max_bytes": "2097152"}, true},
		{map[string]string{"max_bytes": "1048576"}, true},
		{map[string]string{"max_bytes": "1000"}, false},
		{map[string]string{"max_bytes": "lots"}, false},
		{map[string]string{"max_spans": "0"}, false},
		{map[string]string{"max_spans": "many"}, false},
		{map[string]string{"stream_max_age": "-1s"}, false},
		{map[string]string{"stream_max_bytes": "12"}, false},
		{map[string]string{"colour": "blue"}, false},
	} {
		err := traces.NewWorker().Provision(context.Background(), workers.Env{Settings: map[string]map[string]string{"traces": tt.settings}})
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, engine.ErrInvalidOption)) {
			t.Errorf("%v: %v", tt.settings, err)
		}
	}
	if _, err := workers.Global().Module(traces.WorkerName); err != nil {
		t.Fatal(err)
	}
}

func TestSmallStoreOverStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t, traces.WithMaxSpans(4))
	serveChain(t, f.e)
	var ids []string
	for i := range 3 {
		ids = append(ids, runChain(t, f, fmt.Sprint("s", i), trace.SpanContext{}))
	}
	f.flush(t)
	enginetest.Eventually(t, 5*time.Second, func() error {
		if st := f.w.Store().Stats(); st.Received != 9 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	st := f.w.Store().Stats()
	if st.Spans > 4 || st.EvictedTraces != 2 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := f.w.Store().Tree(ids[2]); err != nil {
		t.Fatalf("newest trace: %v", err)
	}
}
