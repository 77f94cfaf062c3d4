package traces_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/traces"
)

func TestGroupBy(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	adds := []traces.Span{
		span(1, 1, -1, 1000, 1900, engine.AttrSessionID, "s1", engine.AttrFunctionID, "a::b"),
		span(1, 2, 1, 1100, 1500, engine.AttrSessionID, "s1", engine.AttrFunctionID, "c::d"),
		span(1, 3, 1, 1200, 1300), // no attribute: skipped
		span(2, 4, -1, 3000, 3500, engine.AttrSessionID, "s1", engine.AttrMessageID, "m2"),
		span(3, 5, -1, 2000, 2600, engine.AttrSessionID, "s2", engine.AttrFunctionID, "a::b"),
	}
	failed := span(3, 6, 5, 2100, 2200, engine.AttrSessionID, "s2")
	failed.Status, failed.StatusMessage = traces.StatusError, "internal"
	adds = append(adds, failed)
	for _, sp := range adds {
		if !s.Add(sp) {
			t.Fatalf("add %s refused", sp.SpanID)
		}
	}
	if s.Add(adds[0]) {
		t.Fatal("duplicate added")
	}

	res, err := s.GroupBy(traces.GroupByRequest{Attribute: engine.AttrSessionID})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != 2 || res.Truncated {
		t.Fatalf("groups %+v", res)
	}
	g := res.Groups[0]
	if g.Value != "s1" || g.SpanCount != 3 || g.TraceCount != 2 || len(g.TraceIDs) != 2 ||
		g.TraceIDs[0] != tid(2) || g.TraceIDs[1] != tid(1) || g.FirstSeenMs != 1000 || g.LastSeenMs != 3500 ||
		g.DurationMs != 2500 || g.ErrorCount != 0 {
		t.Fatalf("s1 group %+v", g)
	}
	g = res.Groups[1]
	if g.Value != "s2" || g.SpanCount != 2 || g.ErrorCount != 1 || g.TraceIDs[0] != tid(3) {
		t.Fatalf("s2 group %+v", g)
	}

	tests := []struct {
		name string
		req  traces.GroupByRequest
		want []string
		more bool
	}{
		{"function", traces.GroupByRequest{Attribute: engine.AttrFunctionID}, []string{"a::b", "c::d"}, false},
		{"message", traces.GroupByRequest{Attribute: engine.AttrMessageID}, []string{"m2"}, false},
		{"since", traces.GroupByRequest{Attribute: engine.AttrSessionID, SinceMs: 2700}, []string{"s1"}, false},
		{"limit", traces.GroupByRequest{Attribute: engine.AttrSessionID, Limit: 1}, []string{"s1"}, true},
	}
	for _, tt := range tests {
		res, err := s.GroupBy(tt.req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var got []string
		for _, g := range res.Groups {
			got = append(got, g.Value)
		}
		if len(got) != len(tt.want) || res.Truncated != tt.more {
			t.Fatalf("%s: got %v truncated=%v, want %v %v", tt.name, got, res.Truncated, tt.want, tt.more)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Fatalf("%s: got %v, want %v", tt.name, got, tt.want)
			}
		}
	}
	if res, _ := s.GroupBy(traces.GroupByRequest{Attribute: engine.AttrSessionID, SinceMs: 2700}); res.Groups[0].SpanCount != 1 {
		t.Fatalf("since counts spans before it: %+v", res.Groups[0])
	}
}

func TestTree(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	linked := span(1, 4, 2, 1300, 1400)
	linked.Links = []traces.Link{{TraceID: tid(9), SpanID: sid(9)}}
	for _, sp := range []traces.Span{
		span(1, 3, 1, 1200, 1250), // arrives before its parent
		linked,
		span(1, 2, 1, 1100, 1500),
		span(1, 1, -1, 1000, 2000),
		span(1, 5, 77, 1050, 1060),           // parent never exported
		span(1, 6, 7, 1600, 1700),            // 6 and 7 form a loop
		span(1, 7, 6, 1650, 1680),            //
		span(1, 8, 8, 1800, 1810),            // its own parent
		span(2, 9, -1, 1000, 1001),           // another trace
		span(1, 10, 3, 1210, 1220, "k", "v"), // grandchild
	} {
		s.Add(sp)
	}
	res, err := s.Tree(tid(1))
	if err != nil {
		t.Fatal(err)
	}
	want := "span-1(span-2(span-4),span-3(span-10)),span-5!,span-6!(span-7),span-8!"
	if got := names(res.Spans); got != want || res.SpanCount != 9 {
		t.Fatalf("tree %s (%d spans), want %s", got, res.SpanCount, want)
	}
	if l := res.Spans[0].Children[0].Children[0].Links; len(l) != 1 || l[0].TraceID != tid(9) {
		t.Fatalf("link lost: %+v", l)
	}
	if res.StartMs != 1000 || res.DurationMs != 1000 {
		t.Fatalf("times %d %d", res.StartMs, res.DurationMs)
	}
	// Upper case is accepted.
	if _, err := s.Tree("000000000000000000000000000000" + "0A"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("unknown upper-case id: %v", err)
	}
}

// A parent loop is cut at its earliest span; a span hanging below the
// loop stays under its parent, even when it starts before every span of
// the loop (it was cut from its parent and flagged missing_parent).
func TestTreeLoops(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		spans []traces.Span
		want  string
	}{
		{"two spans", []traces.Span{span(1, 1, 2, 1100, 1200), span(1, 2, 1, 1200, 1300)}, "span-1!(span-2)"},
		{"own parent", []traces.Span{span(1, 1, 1, 1100, 1200)}, "span-1!"},
		{"branch starts first", []traces.Span{
			span(1, 1, 2, 1100, 1200), span(1, 2, 1, 1200, 1300), span(1, 3, 1, 1050, 1060),
		}, "span-1!(span-3,span-2)"},
		{"chain below a loop", []traces.Span{
			span(1, 1, 3, 1300, 1400), span(1, 2, 1, 1200, 1300), span(1, 3, 2, 1100, 1200),
			span(1, 4, 2, 1000, 1010), span(1, 5, 4, 1001, 1002),
		}, "span-3!(span-1(span-2(span-4(span-5))))"},
		{"two loops and a root", []traces.Span{
			span(1, 1, -1, 900, 2000), span(1, 2, 3, 1500, 1600), span(1, 3, 2, 1400, 1500),
			span(1, 4, 5, 1100, 1200), span(1, 5, 4, 1150, 1200), span(1, 6, 5, 1000, 1001),
		}, "span-1,span-4!(span-5(span-6)),span-3!(span-2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			for _, sp := range tt.spans {
				if !s.Add(sp) {
					t.Fatalf("span %s refused", sp.SpanID)
				}
			}
			res, err := s.Tree(tid(1))
			if err != nil {
				t.Fatal(err)
			}
			if got := names(res.Spans); got != tt.want {
				t.Fatalf("tree %s, want %s", got, tt.want)
			}
		})
	}
}

func TestStoreBadInput(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	s.Add(span(1, 1, -1, 1, 2, engine.AttrSessionID, "s"))
	for _, tt := range []struct {
		name string
		err  error
		want error
	}{
		{"attribute", second(s.GroupBy(traces.GroupByRequest{Attribute: "iii.other"})), wire.ErrInvalidPayload},
		{"no attribute", second(s.GroupBy(traces.GroupByRequest{})), wire.ErrInvalidPayload},
		{"limit", second(s.GroupBy(traces.GroupByRequest{Attribute: engine.AttrSessionID, Limit: 1001})), wire.ErrInvalidPayload},
		{"negative limit", second(s.GroupBy(traces.GroupByRequest{Attribute: engine.AttrSessionID, Limit: -1})), wire.ErrInvalidPayload},
		{"since", second(s.GroupBy(traces.GroupByRequest{Attribute: engine.AttrSessionID, SinceMs: -5})), wire.ErrInvalidPayload},
		{"short id", second(s.Tree("abc")), wire.ErrInvalidPayload},
		{"not hex", second(s.Tree("zz000000000000000000000000000001")), wire.ErrInvalidPayload},
		{"zero id", second(s.Tree("00000000000000000000000000000000")), wire.ErrInvalidPayload},
		{"unknown", second(s.Tree(tid(5))), wire.ErrNotFound},
	} {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	bad := span(1, 2, -1, 5, 4)
	if s.Add(bad) || s.Stats().Invalid != 1 {
		t.Fatalf("span ending before it starts added: %+v", s.Stats())
	}
}

func second[T any](_ T, err error) error { return err }

func TestEviction(t *testing.T) {
	t.Parallel()
	s := newStore(t, traces.WithMaxSpans(5))
	for i := range 3 {
		s.Add(span(1, i, -1, 1, 2)) // trace 1: 3 spans, oldest
	}
	s.Add(span(2, 10, -1, 1, 2))
	s.Add(span(2, 11, -1, 1, 2))
	s.Add(span(1, 3, -1, 1, 2)) // full: evicts trace 2, sparing trace 1
	if _, err := s.Tree(tid(2)); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("trace 2 not evicted: %v", err)
	}
	s.Add(span(3, 20, -1, 1, 2))
	st := s.Stats()
	if st.Spans != 5 || st.Traces != 2 || st.EvictedTraces != 1 || st.EvictedSpans != 2 {
		t.Fatalf("stats %+v", st)
	}
	for i := 21; i < 30; i++ {
		s.Add(span(3, i, -1, 1, 2)) // evicts trace 1 whole, then fills the store alone
	}
	st = s.Stats()
	if st.Spans != 5 || st.Traces != 1 || st.Dropped != 5 || st.EvictedTraces != 2 || st.EvictedSpans != 6 {
		t.Fatalf("stats %+v", st)
	}
	// Many traces through a small store stay bounded.
	for i := range 5000 {
		s.Add(span(100+i, i, -1, 1, 2))
	}
	if st := s.Stats(); st.Spans != 5 || st.Traces != 5 {
		t.Fatalf("stats %+v", st)
	}
}

func TestGroupByFitsOneMessage(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	for i := range 50_000 {
		s.Add(span(i, i, -1, int64(i), int64(i)+1, engine.AttrSessionID, fmt.Sprint("s", i%1000)))
	}
	res, err := s.GroupBy(traces.GroupByRequest{Attribute: engine.AttrSessionID, Limit: traces.MaxGroupLimit})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	if !res.Truncated || len(b) > 1<<20 || len(res.Groups) == 0 || len(res.Groups[0].TraceIDs) != 50 {
		t.Fatalf("truncated=%v, %d bytes, %d groups", res.Truncated, len(b), len(res.Groups))
	}
}

func TestDecodeSpans(t *testing.T) {
	t.Parallel()
	valid := `{"trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"0102030405060708","name":"a","start_ns":1,"end_ns":2,"status":"ok"}`
	tests := []struct {
		name    string
		data    string
		spans   int
		invalid int
		err     bool
	}{
		{"one object", valid, 1, 0, false},
		{"array", "[" + valid + "," + valid + "]", 2, 0, false},
		{"array with a bad span", "[" + valid + `,{"trace_id":"x"}]`, 1, 1, false},
		{"empty array", "[]", 0, 0, false},
		{"not JSON", "[nope", 0, 0, true},
		{"bad object", `{"trace_id":"x"}`, 0, 0, true},
	}
	for _, tt := range tests {
		spans, invalid, err := traces.DecodeSpans([]byte(tt.data))
		if len(spans) != tt.spans || invalid != tt.invalid || (err != nil) != tt.err {
			t.Errorf("%s: %d spans, %d invalid, %v", tt.name, len(spans), invalid, err)
		}
	}
}

// Open's replay pulls a bounded number of bytes ahead of the store: it
// pulled nats.go's default of 500 messages with no byte limit, up to
// 500 MiB of spans held outside max_bytes. The pulls are watched on the
// JetStream API subject; a stream of more than the bound, in messages
// near the max payload, still replays to its end.
func TestOpenReplayBoundedInBytes(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	if _, err := e.EnsureStream(ctx, traces.StreamConfig(1, time.Hour, 64<<20)); err != nil {
		t.Fatal(err)
	}
	maxPayload := e.Conn().MaxPayload()
	// ≈ 12 MiB, past the bound, not JSON: the store counts them invalid
	// at their first byte (a 1 MiB span takes a second to decode under
	// -race).
	const msgs = 12
	junk := []byte(strings.Repeat("x", int(maxPayload)-16<<10))
	for i := range msgs {
		if _, err := e.JetStream().Publish(ctx, traces.SpanSubject(tid(i)), junk); err != nil {
			t.Fatal(err)
		}
	}

	type pull struct {
		Batch    int `json:"batch"`
		MaxBytes int `json:"max_bytes"`
	}
	pulls := make(chan pull, 1000)
	watch := enginetest.Connect(t, ns)
	if _, err := watch.Subscribe("$JS.API.CONSUMER.MSG.NEXT."+traces.StreamName+".>", func(m *nats.Msg) {
		var p pull
		if json.Unmarshal(m.Data, &p) == nil {
			select {
			case pulls <- p:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}

	s, err := traces.Open(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	enginetest.Eventually(t, 10*time.Second, func() error {
		if st := s.Stats(); st.Invalid != msgs || st.LastSeq != msgs {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	bound := max(traces.MinReplayBytes, 3*int(maxPayload))
	n := 0
	for len(pulls) > 0 {
		p := <-pulls
		n++
		if p.MaxBytes <= 0 || p.MaxBytes > bound {
			t.Errorf("pull of %d messages, max_bytes %d: want 1..%d", p.Batch, p.MaxBytes, bound)
		}
	}
	if n < 2 {
		t.Fatalf("%d pulls seen for %d messages of ≈ %d bytes", n, msgs, maxPayload)
	}
}
