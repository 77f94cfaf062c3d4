package traces_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/traces"
)

// An exporter whose stream was deleted under it (`nats stream rm
// III_SPANS`) creates it again, once however many publishes report it
// missing, with its own limits: every publish failed until a restart.
func TestExporterCreatesDeletedStream(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := ctxT(t)
	logs := &records{}
	x, err := traces.NewExporter(ctx, e, traces.WithStreamMaxAge(time.Hour), traces.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	// As `iii up` does: the engine the exporter was made on is closed,
	// its connection stays.
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	export := func() {
		t.Helper()
		if err := x.ExportSpans(ctx, stubs(50)); err != nil { // 5 traces, 5 messages
			t.Fatal(err)
		}
		if err := x.ForceFlush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	export()
	if st := x.Stats(); st.Acked != 50 {
		t.Fatalf("stats %+v", st)
	}
	if err := e.JetStream().DeleteStream(ctx, traces.StreamName); err != nil {
		t.Fatal(err)
	}
	export() // five publishes find no stream
	enginetest.Eventually(t, 5*time.Second, func() error {
		acked := x.Stats().Acked
		export()
		if st := x.Stats(); st.Acked != acked+50 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	s, err := e.JetStream().Stream(ctx, traces.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxAge != time.Hour || cfg.MaxMsgSize != traces.MaxSpanBytes {
		t.Fatalf("stream created again as %+v", cfg)
	}
	if st := x.Stats(); st.Failed == 0 {
		t.Fatalf("no publish failed: %+v", st)
	}
	if n := logs.countOf("span stream missing; creating it again"); n != 1 {
		t.Fatalf("%d re-creations logged: %v", n, logs.msgs)
	}
	if err := x.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// After Shutdown, a publish that finds no stream creates nothing, and
// Shutdown does not wait for a re-creation that cannot succeed.
func TestExporterShutdownStopsRecreation(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := ctxT(t)
	x, err := traces.NewExporter(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.JetStream().DeleteStream(ctx, traces.StreamName); err != nil {
		t.Fatal(err)
	}
	if err := x.ExportSpans(ctx, stubs(10)); err != nil {
		t.Fatal(err)
	}
	if err := x.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.JetStream().Stream(ctx, traces.StreamName); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream after Shutdown: %v", err)
	}
}

// spanMsg publishes span n (trace n) as one message of the stream.
func spanMsg(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	now := time.Now().UnixMilli()
	data, err := wire.MarshalJSON(span(n, n, -1, now-1, now, engine.AttrSessionID, "s"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctxT(t), traces.SpanSubject(tid(n)), data); err != nil {
		t.Fatal(err)
	}
}

// holds waits until s holds traces from..to-1.
func holds(t *testing.T, s *traces.Store, from, to int) {
	t.Helper()
	enginetest.Eventually(t, 15*time.Second, func() error {
		var missing []string
		for i := from; i < to; i++ {
			if _, err := s.Tree(tid(i)); err != nil {
				missing = append(missing, fmt.Sprint(i))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("traces %s not held; stats %+v", strings.Join(missing, ","), s.Stats())
		}
		return nil
	})
}

// A store whose stream is deleted and created again follows the new
// stream from its first message: its ordered consumer resumed after the
// old stream's last sequence and skipped as many of the new stream's
// messages. The spans it held stay.
func TestStoreFollowsRecreatedStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// gone is how long the stream stays deleted.
		gone time.Duration
		// opts of the store: a short check finds a re-creation nobody
		// reported.
		opts []traces.Option
	}{
		{name: "at once"},
		{name: "later", gone: 1500 * time.Millisecond},
		{name: "checked", opts: []traces.Option{traces.WithStreamCheck(100 * time.Millisecond)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			e := enginetest.NewEngine(t, ns)
			js := e.JetStream()
			ctx := ctxT(t)
			logs := &records{}
			s, err := traces.Open(ctx, e, append(tt.opts, traces.WithLogger(slog.New(logs)))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			const old = 5
			for i := range old {
				spanMsg(t, js, i)
			}
			holds(t, s, 0, old)
			if err := js.DeleteStream(ctx, traces.StreamName); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tt.gone)
			if _, err := js.CreateStream(ctx, traces.StreamConfig(1, time.Hour, 1<<20)); err != nil {
				t.Fatal(err)
			}
			// Fewer messages than the old stream had: all of them were
			// skipped.
			for i := old; i < old+3; i++ {
				spanMsg(t, js, i)
			}
			holds(t, s, 0, old+3)
			st := s.Stats()
			if st.Restarts != 1 || st.LastSeq != 3 || st.Spans != old+3 {
				t.Fatalf("stats %+v", st)
			}
			if n := logs.countOf("span stream created again; following it from its first message"); n != 1 {
				t.Fatalf("%d restarts logged: %v", n, logs.msgs)
			}
			// And it goes on following the new stream.
			spanMsg(t, js, old+3)
			holds(t, s, old+3, old+4)
		})
	}
}

// End to end on one node: after `nats stream rm III_SPANS`, the node's
// exporter creates the stream again and its store follows the new one,
// so spans ended after the deletion are served again.
func TestDeletedStreamEndToEnd(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	s := f.w.Store()
	export := func(spans []sdktrace.ReadOnlySpan) {
		t.Helper()
		if err := f.x.ExportSpans(ctx, spans); err != nil {
			t.Fatal(err)
		}
		if err := f.x.ForceFlush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := stubs(30)
	export(before)
	enginetest.Eventually(t, 5*time.Second, func() error {
		if st := s.Stats(); st.Spans != 30 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if err := f.base.JetStream().DeleteStream(ctx, traces.StreamName); err != nil {
		t.Fatal(err)
	}
	// Traces 3..5 of a batch of 60 are new; each export is tried until
	// the stream is back.
	after := stubs(60)[30:]
	enginetest.Eventually(t, 8*time.Second, func() error {
		export(after)
		if st := s.Stats(); st.Spans != 60 {
			return fmt.Errorf("stats %+v, exporter %+v", st, f.x.Stats())
		}
		return nil
	})
	if st := s.Stats(); st.Restarts != 1 {
		t.Fatalf("stats %+v", st)
	}
}
