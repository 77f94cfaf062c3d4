package traces_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/traces"
)

// fat is span (trace t, span s) with an attribute of n bytes.
func fat(t, s, p int, startMs int64, n int, kv ...string) traces.Span {
	sp := span(t, s, p, startMs, startMs+1, kv...)
	if sp.Attributes == nil {
		sp.Attributes = map[string]any{}
	}
	sp.Attributes["blob"] = strings.Repeat("x", n)
	return sp
}

// A flood of large spans stays within the store's byte bound, evicting
// the oldest traces; a span over MaxStoredSpanBytes (huge attributes, or
// a huge number of them) is held trimmed, its group attributes kept.
func TestStoreMaxBytes(t *testing.T) {
	t.Parallel()
	many := span(5000, 1, -1, 1, 2, engine.AttrSessionID, "s-many")
	for i := range 10_000 {
		many.Attributes[fmt.Sprint("k", i)] = i
	}
	many.Events = []traces.Event{{Name: strings.Repeat("e", 100_000), TimeNs: 1}}
	tests := []struct {
		name    string
		spans   func(i int) traces.Span
		n       int
		trimmed bool
	}{
		{"32 KiB attribute", func(i int) traces.Span { return fat(i, i, -1, int64(i), 32<<10) }, 200, false},
		{"900 KiB attribute", func(i int) traces.Span { return fat(i, i, -1, int64(i), 900<<10, engine.AttrSessionID, "s") }, 5, true},
		{"10,000 attributes", func(i int) traces.Span { sp := many; sp.TraceID = tid(i); return sp }, 5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, traces.WithMaxBytes(traces.MinMaxBytes))
			for i := range tt.n {
				s.Add(tt.spans(i))
			}
			st := s.Stats()
			if st.Bytes > traces.MinMaxBytes || st.Spans == 0 || st.Spans+int(st.EvictedSpans) != tt.n {
				t.Fatalf("stats %+v", st)
			}
			if tt.trimmed != (st.Trimmed == uint64(tt.n)) || (!tt.trimmed && st.EvictedTraces == 0) {
				t.Fatalf("stats %+v", st)
			}
			res, err := s.Tree(tid(tt.n - 1))
			if err != nil {
				t.Fatal(err)
			}
			sp := res.Spans[0].Span
			if _, ok := sp.Attributes[traces.AttrTrimmedBytes]; ok != tt.trimmed {
				t.Fatalf("attributes %v", len(sp.Attributes))
			}
			if tt.trimmed {
				if v, _ := sp.StringAttribute(engine.AttrSessionID); v == "" || len(sp.Attributes) != 2 || len(sp.Events) != 0 {
					t.Fatalf("trimmed span %+v", sp)
				}
			}
		})
	}
}

// A tree answer stays within the server's max payload however large the
// trace's spans: the earliest that fit, truncated.
func TestTreeFitsOneMessage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	const n = 40
	for i := range n {
		data, err := json.Marshal(fat(1, i, -1, int64(1000+i), 50<<10))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.base.JetStream().Publish(ctx, traces.SpanSubject(tid(1)), data); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if st := f.w.Store().Stats(); st.Spans != n {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	body, _, err := f.e.TriggerRaw(ctx, traces.TreeFunction, []byte(`{"trace_id":"`+tid(1)+`"}`), wire.JSON)
	if err != nil {
		t.Fatal(err)
	}
	var res traces.TreeResponse
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.SpanCount != n || len(res.Spans) < 10 || len(res.Spans) >= n || res.Spans[0].SpanID != sid(0) {
		t.Fatalf("%d bytes: truncated=%v span_count=%d, %d roots", len(body), res.Truncated, res.SpanCount, len(res.Spans))
	}
}

// A tree answer fits the max payload in either codec: msgpack writes a
// float in nine bytes where its JSON may take four, and a trace of spans
// with float attributes came back to a Go caller (msgpack) as internal
// (the reply over the max payload) where JSON's was truncated.
func TestTreeFitsOneMessageInEveryCodec(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	floats := make([]any, 12_000)
	for i := range floats {
		floats[i] = 0.1
	}
	const n = 12 // 580 KiB of JSON, 1.3 MiB of msgpack
	for i := range n {
		sp := span(1, i, -1, int64(1000+i), int64(1001+i))
		sp.Attributes = map[string]any{"f": floats}
		data, err := json.Marshal(sp)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.base.JetStream().Publish(ctx, traces.SpanSubject(tid(1)), data); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if st := f.w.Store().Stats(); st.Spans != n {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
		t.Run(codec.ContentType(), func(t *testing.T) {
			req, err := codec.Marshal(traces.TreeRequest{TraceID: tid(1)})
			if err != nil {
				t.Fatal(err)
			}
			body, _, err := f.e.TriggerRaw(ctxT(t), traces.TreeFunction, req, codec)
			if err != nil {
				t.Fatal(err)
			}
			var res traces.TreeResponse
			if err := codec.Unmarshal(body, &res); err != nil {
				t.Fatal(err)
			}
			if !res.Truncated || res.SpanCount != n || len(res.Spans) < 4 || res.Spans[0].SpanID != sid(0) {
				t.Fatalf("%d bytes: truncated=%v span_count=%d, %d roots", len(body), res.Truncated, res.SpanCount, len(res.Spans))
			}
		})
	}
}

// group_by sizes its answer by the groups' real JSON: values of control
// characters take six bytes each.
func TestGroupByEscapedValues(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	value := strings.Repeat("\x01", 2000)
	for i := range 1000 {
		s.Add(span(i, i, -1, int64(i), int64(i)+1, engine.AttrSessionID, fmt.Sprint(i, value)))
	}
	res, err := s.GroupBy(traces.GroupByRequest{Attribute: engine.AttrSessionID, Limit: traces.MaxGroupLimit})
	if err != nil {
		t.Fatal(err)
	}
	b, err := wire.MarshalJSON(res)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(b) > 1<<20 || len(res.Groups) == 0 {
		t.Fatalf("truncated=%v, %d bytes, %d groups", res.Truncated, len(b), len(res.Groups))
	}
}

// Bad spans are refused or sanitized, never stored as they came.
func TestSpanSanitized(t *testing.T) {
	t.Parallel()
	now := time.Now()
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	tooDeep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	base := func(extra string, startNs, endNs int64) string {
		return fmt.Sprintf(`{"trace_id":%q,"span_id":%q,"name":"n`+"\xff\xfe"+`","start_ns":%d,"end_ns":%d,"status":"ok"%s}`,
			tid(1), sid(1), startNs, endNs, extra)
	}
	start := now.Add(-time.Second).UnixNano()
	tests := []struct {
		name   string
		data   string
		stored bool
		check  func(traces.Span) bool
	}{
		{"negative duration", base(`,"duration_ms":-5`, start, start+2e6), true,
			func(sp traces.Span) bool { return sp.DurationMs == 2 }},
		{"non-UTF-8 name", base("", start, start+1), true,
			func(sp traces.Span) bool { return utf8.ValidString(sp.Name) }},
		{"deep attribute", base(`,"attributes":{"a":`+deep+`}`, start, start+1), true,
			func(sp traces.Span) bool {
				return sp.Attributes[traces.AttrTrimmedBytes] != nil && sp.Attributes["a"] == nil
			}},
		{"too deep attribute", base(`,"attributes":{"a":`+tooDeep+`}`, start, start+1), false, nil},
		{"end in the far future", base("", start, now.Add(48*time.Hour).UnixNano()), false, nil},
		{"end before start", base("", start, start-1), false, nil},
		{"negative start", base("", -5, 1), false, nil},
		{"long ago", base("", 1, 2), true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			sp, err := traces.DecodeSpan([]byte(tt.data))
			refused := err != nil
			if err == nil {
				refused = !s.Add(sp) && s.Stats().Invalid == 1
			} else if !errors.Is(err, traces.ErrInvalidSpan) {
				t.Fatalf("decode: %v", err)
			}
			res, err := s.Tree(tid(1))
			if !tt.stored {
				if !refused || !errors.Is(err, wire.ErrNotFound) {
					t.Fatalf("stored: %v, stats %+v", err, s.Stats())
				}
				return
			}
			if err != nil {
				t.Fatalf("%v, stats %+v", err, s.Stats())
			}
			if tt.check != nil && !tt.check(res.Spans[0].Span) {
				t.Fatalf("span %+v", res.Spans[0].Span)
			}
			if _, err := wire.MarshalJSON(res); err != nil {
				t.Fatal(err)
			}
		})
	}
	// since_ms whose nanoseconds overflow is refused, not read as "all".
	s := newStore(t)
	s.Add(span(1, 1, -1, 1, 2, engine.AttrSessionID, "s"))
	if _, err := s.GroupBy(traces.GroupByRequest{Attribute: engine.AttrSessionID, SinceMs: traces.MaxSinceMs + 1}); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("since_ms overflow: %v", err)
	}
	if res, err := s.GroupBy(traces.GroupByRequest{Attribute: engine.AttrSessionID, SinceMs: traces.MaxSinceMs}); err != nil || len(res.Groups) != 0 {
		t.Fatalf("since_ms max: %+v %v", res, err)
	}
}

// records counts the log records, of any level.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	r.mu.Unlock()
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }
func (r *records) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// countOf counts the records with message msg.
func (r *records) countOf(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.HasSuffix(m, " "+msg) {
			n++
		}
	}
	return n
}

// Lost spans are counted and logged once, not once per span: a full
// window, then a stream that is gone.
func TestExporterLossLoggedOnce(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := ctxT(t)
	logs := &records{}
	x, err := traces.NewExporter(ctx, e, traces.WithMaxPending(1), traces.WithLogger(slog.New(logs)), traces.WithAckTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := x.ExportSpans(ctx, stubs(200)); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := x.Stats(); st.Dropped == 0 || logs.count() != 1 {
		t.Fatalf("stats %+v, %d records %v", st, logs.count(), logs.msgs)
	}
	if err := e.JetStream().DeleteStream(ctx, traces.StreamName); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = x.ExportSpans(ctx, stubs(10))
		_ = x.ForceFlush(ctx)
	}
	// The exporter creates the stream again (and says so): the loss is
	// what is logged once.
	if st := x.Stats(); st.Failed == 0 || logs.countOf("spans not exported") != 1 {
		t.Fatalf("stats %+v, %d records %v", st, logs.count(), logs.msgs)
	}
}

// TestEvictedTracesReleased: a trace evicted while an older one still
// receives spans stays in the arrival order behind it; its spans are
// released at once, so the store's memory stays what max_bytes counts
// rather than up to twice that.
func TestEvictedTracesReleased(t *testing.T) {
	t.Parallel()
	s := newStore(t, traces.WithMaxBytes(traces.MinMaxBytes))
	// Trace 0 is the oldest and keeps receiving spans; traces 1.. fill
	// the store and are evicted behind it.
	s.Add(fat(0, 1, -1, 0, 32<<10))
	n := 1
	for s.Stats().Bytes < traces.MinMaxBytes-(128<<10) { // fill the store, evicting nothing
		s.Add(fat(n, 1, -1, int64(n), 32<<10))
		n++
	}
	for i := range n / 2 {
		s.Add(fat(0, i+2, -1, int64(n+i), 32<<10))
	}
	if st := s.Stats(); st.EvictedTraces == 0 {
		t.Fatalf("nothing evicted: %+v", st)
	}
	if n := traces.HeldByEvicted(s); n != 0 {
		t.Fatalf("%d spans of evicted traces still held", n)
	}
}
