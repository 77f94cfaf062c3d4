package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// parityMaxPayload is the max payload of the parity test's servers.
const parityMaxPayload = 64 << 10

// parityEnv is one side of the parity test: a worker and two callers (one
// msgpack, the engine default, and one JSON) on one server, with local
// calls on everywhere or nowhere.
type parityEnv struct {
	local      bool
	mp, json   *engine.Engine // callers
	w          *engine.Worker
	bus        *atomic.Int64 // function calls seen on the bus
	registered atomic.Int64
}

func newParityEnv(t *testing.T, local bool) *parityEnv {
	t.Helper()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(parityMaxPayload))
	x := &parityEnv{local: local, bus: busCalls(t, ns)}
	callee := enginetest.NewEngine(t, ns, engine.WithLocalCalls(local))
	x.mp = enginetest.NewEngine(t, ns, engine.WithLocalCalls(local))
	x.json = enginetest.NewEngine(t, ns, engine.WithLocalCalls(local), engine.WithCodec(wire.JSON))
	w, err := callee.Worker("parity")
	if err != nil {
		t.Fatal(err)
	}
	x.w = w
	return x
}

// fn registers h under a new id and returns the id.
func (x *parityEnv) fn(t *testing.T, h engine.Handler) string {
	t.Helper()
	id := fmt.Sprintf("parity::f%d", x.registered.Add(1))
	if err := x.w.Register(engine.Function{ID: id, Handler: h}); err != nil {
		t.Fatal(err)
	}
	return id
}

// outcome is what a caller got, as text: the reply or the error's code
// and message.
func outcome(reply any, err error) string {
	if err != nil {
		we := wire.From(err)
		return fmt.Sprintf("error %s: %s", we.Code, we.Message)
	}
	return fmt.Sprintf("ok %v", reply)
}

// typesOf describes m's values with their Go types, keys sorted.
func typesOf(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%v(%T) ", k, m[k], m[k])
	}
	return strings.TrimSpace(b.String())
}

type parityReq struct {
	N int `json:"n" msgpack:"n"`
}

func (r parityReq) Validate() error {
	if r.N < 0 {
		return errors.New("n must not be negative")
	}
	return nil
}

// panicky is a reply whose encoding panics, in either codec.
type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error)    { panic("MarshalJSON boom") }
func (panicky) MarshalMsgpack() ([]byte, error) { panic("MarshalMsgpack boom") }

// ctxIgnorer is a handler that does blocking work that does not watch
// its context, for d, after saying on entered that it started.
func ctxIgnorer(entered chan<- struct{}, d time.Duration) engine.Handler {
	return func(context.Context, *engine.Request) (any, error) {
		entered <- struct{}{}
		time.Sleep(d)
		return map[string]any{}, nil
	}
}

// quick says whether a call took less than bound.
func quick(start time.Time, bound time.Duration) string {
	if time.Since(start) < bound {
		return "at once"
	}
	return fmt.Sprintf("after %v", time.Since(start).Round(100*time.Millisecond))
}

// TestLocalCallParity: every case gives its caller the same outcome over
// the bus and as a local call.
func TestLocalCallParity(t *testing.T) {
	t.Parallel()
	const max = parityMaxPayload
	cases := []struct {
		name string
		run  func(t *testing.T, x *parityEnv) string
		want string
	}{
		{"request over the max payload", func(t *testing.T, x *parityEnv) string {
			var runs atomic.Int64
			id := x.fn(t, func(context.Context, *engine.Request) (any, error) { runs.Add(1); return nil, nil })
			_, _, err := x.mp.TriggerRaw(context.Background(), id, make([]byte, max+1), wire.JSON)
			return fmt.Sprintf("%s; runs=%d", codeOf(err), runs.Load())
		}, "invalid_payload; runs=0"},
		{"request body fits, with its headers does not", func(t *testing.T, x *parityEnv) string {
			var runs atomic.Int64
			id := x.fn(t, func(context.Context, *engine.Request) (any, error) { runs.Add(1); return nil, nil })
			_, _, err := x.mp.TriggerRaw(context.Background(), id, make([]byte, max-20), wire.JSON)
			return fmt.Sprintf("%s; runs=%d", codeOf(err), runs.Load())
		}, "invalid_payload; runs=0"},
		{"reply over the max payload", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, func(context.Context, *engine.Request) (any, error) { return engine.Raw(make([]byte, max+1)), nil })
			_, _, err := x.mp.TriggerRaw(context.Background(), id, nil, wire.JSON)
			return codeOf(err)
		}, "internal"},
		{"reply body fits, with its headers does not", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, func(context.Context, *engine.Request) (any, error) { return engine.Raw(make([]byte, max-10)), nil })
			_, _, err := x.mp.TriggerRaw(context.Background(), id, nil, wire.JSON)
			return codeOf(err)
		}, "internal"},
		{"caller's deadline reaches the handler, reply margin kept", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, func(ctx context.Context, _ *engine.Request) (any, error) {
				dl, ok := ctx.Deadline()
				if !ok {
					return "no deadline", nil
				}
				left := time.Until(dl)
				mctx, cancel := engine.WithReplyMargin(ctx)
				defer cancel()
				mdl, _ := mctx.Deadline()
				return fmt.Sprintf("left in (1.5s,2s]=%v margin=%v", left > 1500*time.Millisecond && left <= 2*time.Second, dl.Sub(mdl)), nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var got string
			err := x.mp.Trigger(ctx, id, nil, &got)
			return outcome(got, err)
		}, "ok left in (1.5s,2s]=true margin=250ms"},
		{"function timeout shorter than the caller's", func(t *testing.T, x *parityEnv) string {
			id := fmt.Sprintf("parity::short%d", x.registered.Add(1))
			if err := x.w.Register(engine.Function{ID: id, Timeout: 400 * time.Millisecond, Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
				dl, _ := ctx.Deadline()
				return fmt.Sprintf("left <= 400ms=%v", time.Until(dl) <= 400*time.Millisecond), nil
			}}); err != nil {
				t.Fatal(err)
			}
			var got string
			err := x.mp.Trigger(context.Background(), id, nil, &got)
			return outcome(got, err)
		}, "ok left <= 400ms=true"},
		{"caller cancels mid-call", func(t *testing.T, x *parityEnv) string {
			entered := make(chan struct{}, 1)
			id := x.fn(t, func(ctx context.Context, _ *engine.Request) (any, error) {
				entered <- struct{}{}
				select { // over the bus, the caller's end does not reach here
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(time.Second):
					return nil, nil
				}
			})
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-entered; cancel() }()
			err := x.mp.Trigger(ctx, id, nil, nil)
			return codeOf(err)
		}, "canceled"},
		{"caller's context already ended", func(t *testing.T, x *parityEnv) string {
			var runs atomic.Int64
			id := x.fn(t, func(context.Context, *engine.Request) (any, error) { runs.Add(1); return nil, nil })
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var codes []string
			for range 20 {
				codes = append(codes, codeOf(x.mp.Trigger(ctx, id, nil, nil)))
			}
			return fmt.Sprintf("%s; runs=%d", strings.Join(slices.Compact(codes), ","), runs.Load())
		}, "canceled; runs=0"},
		{"handler panics, then serves again", func(t *testing.T, x *parityEnv) string {
			var n atomic.Int64
			id := x.fn(t, func(context.Context, *engine.Request) (any, error) {
				if n.Add(1) == 1 {
					panic("boom")
				}
				return "fine", nil
			})
			var first, second string
			err1 := x.mp.Trigger(context.Background(), id, nil, &first)
			err2 := x.mp.Trigger(context.Background(), id, nil, &second)
			return codeOf(err1) + "; then " + outcome(second, err2)
		}, "internal; then ok fine"},
		{"reply panics as it encodes, then serves again", func(t *testing.T, x *parityEnv) string {
			var n atomic.Int64
			id := x.fn(t, func(context.Context, *engine.Request) (any, error) {
				if n.Add(1) == 1 {
					return panicky{}, nil
				}
				return "fine", nil
			})
			var first, second string
			err1 := x.json.Trigger(context.Background(), id, nil, &first)
			err2 := x.mp.Trigger(context.Background(), id, nil, &second)
			return codeOf(err1) + "; then " + outcome(second, err2)
		}, "internal; then ok fine"},
		{"handler returns a plain error", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, func(context.Context, *engine.Request) (any, error) { return nil, errors.New("disk on fire") })
			return outcome(nil, x.mp.Trigger(context.Background(), id, nil, nil))
		}, "error internal: disk on fire"},
		{"handler returns a *wire.Error with details", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, func(context.Context, *engine.Request) (any, error) {
				return nil, wire.Errorf(wire.CodeNotFound, "no such thing").WithDetails(map[string]any{"key": "k1"})
			})
			err := x.json.Trigger(context.Background(), id, nil, nil)
			we := wire.From(err)
			return fmt.Sprintf("%s %s %v retryable=%v", we.Code, we.Message, we.Details, we.Retryable)
		}, "not_found no such thing map[key:k1] retryable=false"},
		{"typed request fails validation", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, engine.Typed(func(_ context.Context, r parityReq) (parityReq, error) { return r, nil }))
			var got parityReq
			bad := x.mp.Trigger(context.Background(), id, parityReq{N: -1}, &got)
			good := x.json.Trigger(context.Background(), id, parityReq{N: 7}, &got)
			return outcome(nil, bad) + "; " + outcome(got.N, good)
		}, "error invalid_payload: n must not be negative; ok 7"},
		{"handler sees the caller's codec and values", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, func(_ context.Context, r *engine.Request) (any, error) {
				var m map[string]any
				if err := r.Bind(&m); err != nil {
					return nil, err
				}
				return r.Codec.ContentType() + " " + typesOf(m), nil
			})
			req := map[string]any{"i": int64(3), "f": 2.0, "g": 2.5, "s": "x"}
			var a, b string
			errA := x.mp.Trigger(context.Background(), id, req, &a)
			errB := x.json.Trigger(context.Background(), id, req, &b)
			return outcome(a, errA) + "; " + outcome(b, errB)
		}, "ok application/msgpack f=2(int8) g=2.5(float64) i=3(int8) s=x(string); ok application/json f=2(float64) g=2.5(float64) i=3(float64) s=x(string)"},
		{"raw body in, raw body out", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, func(_ context.Context, r *engine.Request) (any, error) {
				return engine.Raw(fmt.Sprintf(`{"ct":%q,"body":%q}`, r.Codec.ContentType(), r.Data)), nil
			})
			body, codec, err := x.mp.TriggerRaw(context.Background(), id, []byte(`{"a":1}`), wire.JSON)
			if err != nil {
				return outcome(nil, err)
			}
			return codec.ContentType() + " " + string(body)
		}, `application/json {"ct":"application/json","body":"{\"a\":1}"}`},
		{"returned values' types", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, func(context.Context, *engine.Request) (any, error) {
				return map[string]any{"i": int64(3), "f": 2.0, "g": 2.5}, nil
			})
			var a, b map[string]any
			errA := x.mp.Trigger(context.Background(), id, nil, &a)
			errB := x.json.Trigger(context.Background(), id, nil, &b)
			return outcome(typesOf(a), errA) + "; " + outcome(typesOf(b), errB)
		}, "ok f=2(int8) g=2.5(float64) i=3(int8); ok f=2(float64) g=2.5(float64) i=3(float64)"},
		{"handler keeps a Raw request body the caller then reuses", func(t *testing.T, x *parityEnv) string {
			var kept []byte
			id := x.fn(t, func(_ context.Context, r *engine.Request) (any, error) { kept = r.Data; return nil, nil })
			buf := []byte(`{"a":1}`)
			if err := x.json.Trigger(context.Background(), id, engine.Raw(buf), nil); err != nil {
				return outcome(nil, err)
			}
			copy(buf, `{"b":2}`)
			return string(kept)
		}, `{"a":1}`},
		{"handler scribbles on its request body", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, func(_ context.Context, r *engine.Request) (any, error) {
				copy(r.Data, "XXXXXXX")
				return nil, nil
			})
			buf := []byte(`{"a":1}`)
			if err := x.json.Trigger(context.Background(), id, engine.Raw(buf), nil); err != nil {
				return outcome(nil, err)
			}
			return string(buf)
		}, `{"a":1}`},
		{"handler changes its Raw reply after the call; caller changes the reply it got", func(t *testing.T, x *parityEnv) string {
			reply := []byte(`{"r":1}`)
			id := x.fn(t, func(context.Context, *engine.Request) (any, error) { return engine.Raw(reply), nil })
			got, _, err := x.json.TriggerRaw(context.Background(), id, nil, wire.JSON)
			if err != nil {
				return outcome(nil, err)
			}
			copy(reply, `{"r":0}`)
			gotChanged := string(got)
			copy(reply, `{"r":1}`)
			copy(got, "caller!")
			return fmt.Sprintf("caller's %s; handler's %s", gotChanged, reply)
		}, `caller's {"r":1}; handler's {"r":1}`},
		{"trace context: the handler's parent is the caller's span", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, func(_ context.Context, r *engine.Request) (any, error) {
				return r.Header.Get("traceparent"), nil
			})
			sc := trace.NewSpanContext(trace.SpanContextConfig{
				TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
				SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
				TraceFlags: trace.FlagsSampled,
			})
			ctx := trace.ContextWithSpanContext(context.Background(), sc)
			var got string
			err := x.mp.Trigger(ctx, id, nil, &got)
			return outcome(got, err)
		}, "ok 00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"},
		{"headers the handler can read", func(t *testing.T, x *parityEnv) string {
			id := x.fn(t, func(_ context.Context, r *engine.Request) (any, error) {
				keys := make([]string, 0, len(r.Header))
				for k := range r.Header {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				return strings.Join(keys, ","), nil
			})
			ctx := engine.WithSession(context.Background(), "s-1", "m-1")
			var got string
			err := x.mp.Trigger(ctx, id, nil, &got)
			return outcome(got, err)
		}, "ok Content-Type,Iii-Timeout-Ms,baggage"},
	}
	envs := []*parityEnv{newParityEnv(t, false), newParityEnv(t, true)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, x := range envs {
				before := x.bus.Load()
				if got := c.run(t, x); got != c.want {
					t.Errorf("local=%v: got  %s\nwant %s", x.local, got, c.want)
				}
				if n := x.bus.Load() - before; x.local && n != 0 {
					t.Errorf("local=%v: %d calls went over the bus", x.local, n)
				}
			}
		})
	}
}

// codeOf is err's wire code, or "ok".
func codeOf(err error) string {
	if err == nil {
		return "ok"
	}
	return string(wire.From(err).Code)
}
