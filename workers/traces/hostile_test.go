package traces_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/traces"
)

// deepAttr is sp with an attribute of depth nested arrays: the span's
// encoding nests depth+2 levels.
func deepAttr(sp traces.Span, depth int) traces.Span {
	var v any = "x"
	for range depth {
		v = []any{v}
	}
	sp.Attributes = map[string]any{"deep": v, engine.AttrSessionID: "s"}
	return sp
}

// A tree answer nests no deeper than JSON decoders take, however deep
// the trace (a chain of thousands of spans, each the child of the one
// before) and however deep a span's attributes: a msgpack reply is
// refused past 256 levels, Go's JSON decoder stops at 10,000. Every span
// stays in the answer once; a span cut from its parent for depth is a
// root flagged detached.
func TestTreeDepthBounded(t *testing.T) {
	t.Parallel()
	chain := func(n int) []traces.Span {
		out := make([]traces.Span, n)
		for i := range out {
			out[i] = span(1, i, i-1, int64(1000+i), int64(100_000-i))
		}
		return out
	}
	tests := []struct {
		name  string
		spans []traces.Span
	}{
		{"chain of 3000", chain(3000)},
		{"chain of 1000", chain(1000)},
		{"chain of 600 with deep attributes", func() []traces.Span {
			c := chain(600)
			c[599] = deepAttr(c[599], 5000)
			return c
		}()},
		{"root with a deep attribute", []traces.Span{deepAttr(span(1, 0, -1, 1000, 2000), 9000)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			for _, sp := range tt.spans {
				if !s.Add(sp) {
					t.Fatalf("span %s refused: %+v", sp.SpanID, s.Stats())
				}
			}
			res, err := s.Tree(tid(1))
			if err != nil {
				t.Fatal(err)
			}
			b, err := wire.MarshalJSON(res)
			if err != nil {
				t.Fatal(err)
			}
			if d := traces.JSONDepth(b); d > 256 {
				t.Fatalf("answer nests %d deep", d)
			}
			var back traces.TreeResponse
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("answer does not decode: %v", err)
			}
			seen := map[string]int{}
			var walk func(ns []*traces.TreeNode, root bool)
			walk = func(ns []*traces.TreeNode, root bool) {
				for _, n := range ns {
					seen[n.SpanID]++
					if n.Detached && (!root || n.MissingParent || n.ParentSpanID == "") {
						t.Fatalf("span %s detached but not a root with a parent: %+v", n.SpanID, n)
					}
					walk(n.Children, false)
				}
			}
			walk(back.Spans, true)
			if len(seen) != len(tt.spans) || back.SpanCount != len(tt.spans) || back.Truncated {
				t.Fatalf("%d spans in the tree of %d, truncated=%v", len(seen), len(tt.spans), back.Truncated)
			}
			for id, n := range seen {
				if n != 1 {
					t.Fatalf("span %s %d times", id, n)
				}
			}
		})
	}
}

// A deep trace published on the stream by anyone is answered over the
// bus: the caller decodes it.
func TestDeepTreeOverTheWire(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	const n = 3000
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		sp := span(1, i, i-1, int64(1000+i), int64(100_000-i))
		switch i {
		case traces.MaxTreeDepth - 1: // the deepest level, as deep as a span is kept
			sp = deepAttr(sp, traces.MaxStoredSpanDepth-2)
		case n - 1:
			sp = deepAttr(sp, 1000)
		}
		data, err := json.Marshal(sp)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	b.WriteByte(']')
	if _, err := f.base.JetStream().Publish(ctx, traces.SpanSubject(tid(1)), []byte(b.String())); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if st := f.w.Store().Stats(); st.Spans != n {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	res, err := engine.Call[traces.TreeResponse](ctx, f.e, traces.TreeFunction, traces.TreeRequest{TraceID: tid(1)})
	if err != nil {
		t.Fatal(err)
	}
	if res.SpanCount != n || len(res.Spans) != n/traces.MaxTreeDepth || res.Spans[0].SpanID != sid(0) || res.Truncated {
		t.Fatalf("span_count %d, %d roots, truncated=%v", res.SpanCount, len(res.Spans), res.Truncated)
	}
	deepest := res.Spans[0]
	for len(deepest.Children) > 0 {
		deepest = deepest.Children[0]
	}
	if deepest.SpanID != sid(traces.MaxTreeDepth-1) || deepest.Attributes["deep"] == nil {
		t.Fatalf("deepest span %+v", deepest.Span)
	}
}

// Integer attributes past 2^53 (an int64 id, a uint64) come back from
// the store exactly, over the bus in JSON and in msgpack; the numbers of
// a published span were read as float64s and rounded.
func TestSpanNumbersExact(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	const data = `{"trace_id":"%s","span_id":"%s","name":"n","kind":"server","start_ns":1,"end_ns":2,"status":"ok",` +
		`"attributes":{"id":1234567890123456789,"big":18446744073709551615,"neg":-9007199254740993,"f":1.5,"nested":[{"n":9007199254740993}]},` +
		`"events":[{"name":"e","time_ns":1,"attributes":{"seq":9007199254740993}}]}`
	if _, err := f.base.JetStream().Publish(ctx, traces.SpanSubject(tid(1)), fmt.Appendf(nil, data, tid(1), sid(1))); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if st := f.w.Store().Stats(); st.Spans != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	body, _, err := f.e.TriggerRaw(ctx, traces.TreeFunction, []byte(`{"trace_id":"`+tid(1)+`"}`), wire.JSON)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"id":1234567890123456789`, `"big":18446744073709551615`, `"neg":-9007199254740993`, `"f":1.5`, `"n":9007199254740993`, `"seq":9007199254740993`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("JSON answer without %s: %s", want, body)
		}
	}
	res, err := engine.Call[traces.TreeResponse](ctx, f.e, traces.TreeFunction, traces.TreeRequest{TraceID: tid(1)})
	if err != nil {
		t.Fatal(err)
	}
	a := res.Spans[0].Attributes
	if fmt.Sprint(a["id"], " ", a["big"], " ", a["neg"], " ", a["f"], " ", a["nested"], " ", res.Spans[0].Events[0].Attributes["seq"]) !=
		"1234567890123456789 18446744073709551615 -9007199254740993 1.5 [map[n:9007199254740993]] 9007199254740993" {
		t.Fatalf("msgpack answer %v %v", a, res.Spans[0].Events)
	}
}
