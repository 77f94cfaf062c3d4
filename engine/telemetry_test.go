package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

// TestSpansAndPropagation: over the bus and with local calls alike, a
// handler's span is a child of its caller's, and carries the session ids.
func TestSpansAndPropagation(t *testing.T) {
	t.Parallel()
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("local=%v", local), func(t *testing.T) {
			t.Parallel()
			testSpansAndPropagation(t, local)
		})
	}
}

func testSpansAndPropagation(t *testing.T, local bool) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns, engine.WithTracerProvider(tp), engine.WithLocalCalls(local))
	w, err := e.Worker("tw")
	if err != nil {
		t.Fatal(err)
	}
	// outer calls inner: one trace, inner's parent is outer.
	_ = w.Register(engine.Function{ID: "t::inner", Handler: func(ctx context.Context, r *engine.Request) (any, error) { return map[string]any{}, nil }})
	_ = w.Register(engine.Function{ID: "t::outer", Handler: func(ctx context.Context, r *engine.Request) (any, error) {
		return nil, e.Trigger(ctx, "t::inner", map[string]any{"x": 1}, nil)
	}})

	ctx := engine.WithSession(context.Background(), "s-1", "m-1")
	ctx, root := tp.Tracer("test").Start(ctx, "root")
	if err := e.Trigger(ctx, "t::outer", nil, nil); err != nil {
		t.Fatal(err)
	}
	root.End()

	// payload ids when there is no baggage
	if err := e.Trigger(context.Background(), "t::inner", map[string]any{"session_id": "s-2", "message_id": "m-2"}, nil); err != nil {
		t.Fatal(err)
	}

	// A handler's span ends just after its reply is sent.
	byName := map[string][]sdktrace.ReadOnlySpan{}
	enginetest.Eventually(t, 5*time.Second, func() error {
		byName = map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			byName[s.Name()] = append(byName[s.Name()], s)
		}
		if len(byName["t::outer"]) != 1 || len(byName["t::inner"]) != 2 {
			return fmt.Errorf("spans so far: %v", byName)
		}
		return nil
	})
	outer, inner := byName["t::outer"], byName["t::inner"]
	if len(outer) != 1 || len(inner) != 2 {
		t.Fatalf("spans: %v", byName)
	}
	if outer[0].SpanContext().TraceID() != root.SpanContext().TraceID() || outer[0].Parent().SpanID() != root.SpanContext().SpanID() {
		t.Fatal("outer span is not a child of the caller's span")
	}
	var viaOuter, viaPayload sdktrace.ReadOnlySpan
	for _, s := range inner {
		if s.Parent().SpanID() == outer[0].SpanContext().SpanID() {
			viaOuter = s
		} else {
			viaPayload = s
		}
	}
	if viaOuter == nil || viaPayload == nil {
		t.Fatal("inner span not parented by outer")
	}
	want := map[attribute.Key]string{engine.AttrFunctionID: "t::inner", engine.AttrSessionID: "s-1", engine.AttrMessageID: "m-1"}
	for k, v := range want {
		if attrs(viaOuter)[k] != v {
			t.Fatalf("inner via outer: %s = %q, want %q (%v)", k, attrs(viaOuter)[k], v, attrs(viaOuter))
		}
	}
	if a := attrs(viaPayload); a[engine.AttrSessionID] != "s-2" || a[engine.AttrMessageID] != "m-2" {
		t.Fatalf("ids from payload: %v", a)
	}
}

// A W3C traceparent in lower case, as the nats CLI sends it, is honoured.
func TestLowerCaseTraceparent(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns, engine.WithTracerProvider(tp))
	w, _ := e.Worker("tw")
	_ = w.Register(engine.Function{ID: "t::x", Handler: func(context.Context, *engine.Request) (any, error) { return nil, nil }})
	nc := enginetest.Connect(t, ns)
	msg := nats.NewMsg("iii.fn.t.x")
	msg.Header["traceparent"] = []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	msg.Header["baggage"] = []string{"iii.session.id=s-cli"}
	msg.Data = []byte(`{}`)
	if _, err := nc.RequestMsg(msg, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var spans []sdktrace.ReadOnlySpan
	enginetest.Eventually(t, 5*time.Second, func() error {
		if spans = rec.Ended(); len(spans) != 1 {
			return fmt.Errorf("%d spans", len(spans))
		}
		return nil
	})
	if len(spans) != 1 || spans[0].SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("spans %v", spans)
	}
	if attrs(spans[0])[engine.AttrSessionID] != "s-cli" {
		t.Fatalf("baggage session id not applied: %v", attrs(spans[0]))
	}
}

// WithSession sets the session (and message) ids; a message id carried
// for another session is dropped rather than kept under the new one.
func TestWithSession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		ctx              context.Context
		sid, mid         string
		wantSID, wantMID string
	}{
		{"empty", context.Background(), "s1", "m1", "s1", "m1"},
		{"no message", context.Background(), "s1", "", "s1", ""},
		{"same session keeps its message", engine.WithSession(context.Background(), "s1", "m1"), "s1", "", "s1", "m1"},
		{"same session, new message", engine.WithSession(context.Background(), "s1", "m1"), "s1", "m2", "s1", "m2"},
		{"other session drops the message", engine.WithSession(context.Background(), "a", "ma"), "b", "", "b", ""},
		{"other session, its message", engine.WithSession(context.Background(), "a", "ma"), "b", "mb", "b", "mb"},
		{"no session keeps all", engine.WithSession(context.Background(), "a", "ma"), "", "", "a", "ma"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid, mid := engine.SessionFromContext(engine.WithSession(tc.ctx, tc.sid, tc.mid))
			if sid != tc.wantSID || mid != tc.wantMID {
				t.Errorf("got %q %q, want %q %q", sid, mid, tc.wantSID, tc.wantMID)
			}
		})
	}
}

// A payload's session_id and message_id become span attributes only when
// they are no longer than an id may be: a caller's megabyte "id" was kept
// in every span of the call (the SDK bounds no attribute by default), up to
// the exporter's queue of them while a collector is down.
func TestPayloadIDsBounded(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns, engine.WithTracerProvider(tp))
	w, err := e.Worker("tw")
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Register(engine.Function{ID: "t::ids", Handler: func(ctx context.Context, r *engine.Request) (any, error) { return map[string]any{}, nil }})
	long := strings.Repeat("s", 300<<10)
	if err := e.Trigger(context.Background(), "t::ids", map[string]any{"session_id": long, "message_id": "m-ok"}, nil); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if len(rec.Ended()) == 0 {
			return fmt.Errorf("no span yet")
		}
		return nil
	})
	a := attrs(rec.Ended()[0])
	if _, ok := a[engine.AttrSessionID]; ok || a[engine.AttrMessageID] != "m-ok" {
		t.Fatalf("span attributes: session id of %d bytes, message id %q; want no session id, the message id", len(a[engine.AttrSessionID]), a[engine.AttrMessageID])
	}
}
