package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

type echoReq struct {
	Text  string         `json:"text"`
	N     int            `json:"n"`
	Extra map[string]any `json:"extra,omitempty"`
}

func (r echoReq) Validate() error {
	if r.Text == "" {
		return errors.New("text is required")
	}
	return nil
}

type echoResp struct {
	Text  string         `json:"text"`
	N     int            `json:"n"`
	Extra map[string]any `json:"extra,omitempty"`
}

func echoWorker(t *testing.T, e *engine.Engine, name string, hits *atomic.Int64) *engine.Worker {
	t.Helper()
	w, err := e.Worker(name)
	if err != nil {
		t.Fatal(err)
	}
	err = w.Register(engine.Function{
		ID:            "test::echo",
		Description:   "echo",
		RequestSchema: `{"type":"object"}`,
		Handler: engine.Typed(func(ctx context.Context, r echoReq) (echoResp, error) {
			if hits != nil {
				hits.Add(1)
			}
			return echoResp(r), nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestTriggerMsgpackAndJSON(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	echoWorker(t, e, "echo", nil)
	ctx := context.Background()

	got, err := engine.Call[echoResp](ctx, e, "test::echo", echoReq{Text: "hi", N: 3, Extra: map[string]any{"a": "b"}})
	if err != nil || got.Text != "hi" || got.N != 3 || got.Extra["a"] != "b" {
		t.Fatalf("msgpack call = %+v, %v", got, err)
	}

	// A plain JSON client, no Content-Type: what `nats req` sends.
	nc := enginetest.Connect(t, ns)
	reply, err := nc.Request("iii.fn.test.echo", []byte(`{"text":"yo","n":7}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ct := reply.Header.Get(wire.HeaderContentType); ct != wire.ContentJSON {
		t.Fatalf("reply content type %q", ct)
	}
	if string(reply.Data) != `{"text":"yo","n":7}` {
		t.Fatalf("json reply = %s", reply.Data)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(64<<10))
	e := enginetest.NewEngine(t, ns)
	w := echoWorker(t, e, "echo", nil)
	if err := w.Register(engine.Function{ID: "test::panic", Handler: func(context.Context, *engine.Request) (any, error) {
		panic("boom")
	}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "test::slow", Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}); err != nil {
		t.Fatal(err)
	}
	// Errors that quote their input: a message too long for the bus's
	// max payload (it travels in a header and the body), and one with line
	// breaks (a header value cannot hold them).
	if err := w.Register(engine.Function{ID: "test::quote", Handler: engine.Typed(func(_ context.Context, r echoReq) (echoResp, error) {
		return echoResp{}, wire.Errorf(wire.CodeInvalidPayload, "bad text %s", r.Text).WithDetails(map[string]any{"text": r.Text})
	})}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nc := enginetest.Connect(t, ns)
	quote := func(text string) error {
		body, _ := json.Marshal(echoReq{Text: text})
		m, err := nc.Request("iii.fn.test.quote", body, 5*time.Second)
		if err != nil {
			return err
		}
		we := wire.Decode(m)
		if we != nil && !strings.HasPrefix(we.Message, "bad text ") {
			return fmt.Errorf("message %.100q", we.Message)
		}
		return we
	}

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"unknown function", func() error { return e.Trigger(ctx, "test::nobody", nil, nil) }, wire.ErrFunctionNotFound},
		{"wildcard id", func() error { return e.Trigger(ctx, "test::*", nil, nil) }, wire.ErrFunctionNotFound},
		{"invalid id", func() error { return e.Trigger(ctx, "a b", nil, nil) }, wire.ErrInvalidPayload},
		{"validation", func() error { return e.Trigger(ctx, "test::echo", echoReq{}, nil) }, wire.ErrInvalidPayload},
		{"wrong type", func() error { return e.Trigger(ctx, "test::echo", map[string]any{"text": 5}, nil) }, wire.ErrInvalidPayload},
		{"oversized", func() error {
			return e.Trigger(ctx, "test::echo", echoReq{Text: strings.Repeat("x", 100<<10)}, nil)
		}, wire.ErrInvalidPayload},
		{"panic", func() error { return e.Trigger(ctx, "test::panic", nil, nil) }, wire.ErrInternal},
		{"timeout", func() error {
			ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			return e.Trigger(ctx, "test::slow", nil, nil)
		}, wire.ErrTimeout},
		{"error message over the max payload", func() error { return quote(strings.Repeat("é", 20<<10)) }, wire.ErrInvalidPayload},
		{"error message with line breaks", func() error { return quote("a\r\nb: c\nd") }, wire.ErrInvalidPayload},
		{"random bytes json", func() error {
			m, err := nc.Request("iii.fn.test.echo", []byte{0xff, 0x00, 0x13}, 5*time.Second)
			if err != nil {
				return err
			}
			return wire.Decode(m)
		}, wire.ErrInvalidPayload},
		{"random bytes msgpack", func() error {
			msg := nats.NewMsg("iii.fn.test.echo")
			msg.Header.Set(wire.HeaderContentType, wire.ContentMsgpack)
			msg.Data = []byte{0xc1, 0xff}
			m, err := nc.RequestMsg(msg, 5*time.Second)
			if err != nil {
				return err
			}
			return wire.Decode(m)
		}, wire.ErrInvalidPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}

	// The error reply is the SPEC envelope with service headers.
	m, err := nc.Request("iii.fn.test.echo", []byte(`{"text":""}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("Nats-Service-Error-Code") != "400" || !strings.Contains(string(m.Data), `"code":"invalid_payload"`) {
		t.Fatalf("error reply headers %v body %s", m.Header, m.Data)
	}
}

func TestReplicasShareLoad(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	var a, b atomic.Int64
	echoWorker(t, enginetest.NewEngine(t, ns), "echo", &a)
	echoWorker(t, enginetest.NewEngine(t, ns), "echo", &b)
	caller := enginetest.NewEngine(t, ns)
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := caller.Trigger(context.Background(), "test::echo", echoReq{Text: "x"}, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if a.Load()+b.Load() != 200 || a.Load() == 0 || b.Load() == 0 {
		t.Fatalf("replicas served %d and %d of 200", a.Load(), b.Load())
	}
}

func TestCatalogAndUnregister(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	if _, err := e.ServeCatalog(); err != nil {
		t.Fatal(err)
	}
	w := echoWorker(t, e, "echo", nil)
	if err := w.Register(engine.Function{ID: "test::other", Handler: func(context.Context, *engine.Request) (any, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	// A foreign worker: a plain NATS service, no engine package.
	nc := enginetest.Connect(t, ns)
	sub, err := nc.QueueSubscribe("iii.fn.py.hello", "q", func(m *nats.Msg) { _ = m.Respond([]byte(`{}`)) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	var got engine.FunctionsListResponse
	if err := e.Trigger(context.Background(), "engine::functions::list", nil, &got); err != nil {
		t.Fatal(err)
	}
	ids := map[string]engine.FunctionInfo{}
	for _, f := range got.Functions {
		ids[f.ID] = f
	}
	for _, want := range []string{"engine::functions::list", "engine::workers::list", "test::echo", "test::other"} {
		if _, ok := ids[want]; !ok {
			t.Fatalf("catalog lacks %s: %+v", want, got.Functions)
		}
	}
	if ids["test::echo"].Worker != "echo" || string(ids["test::echo"].RequestSchema) != `{"type":"object"}` {
		t.Fatalf("test::echo entry = %+v", ids["test::echo"])
	}

	if err := w.Unregister("test::other"); err != nil {
		t.Fatal(err)
	}
	if err := e.Trigger(context.Background(), "test::other", nil, nil); !errors.Is(err, wire.ErrFunctionNotFound) {
		t.Fatalf("after unregister: %v", err)
	}
	if err := e.Trigger(context.Background(), "test::echo", echoReq{Text: "still"}, nil); err != nil {
		t.Fatalf("echo after unregistering another: %v", err)
	}
	var ws engine.WorkersListResponse
	if err := e.Trigger(context.Background(), "engine::workers::list", nil, &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws.Workers) != 2 {
		t.Fatalf("workers = %+v", ws.Workers)
	}
}

// A caller's time budget (Iii-Timeout-Ms) shortens a call's timeout, never
// lengthens it; a value that is no positive number, or would overflow a
// time.Duration (any client can send one), leaves the timeout alone
// instead of ending the call before it starts.
func TestCallerBudget(t *testing.T) {
	t.Parallel()
	const d = 30 * time.Second
	tests := []struct {
		ms   string
		want time.Duration
	}{
		{"", d},
		{"5000", 5 * time.Second},
		{"60000", d},
		{"0", d},
		{"-5", d},
		{"x", d},
		{"9223372036854775807", d},
		{"9223372036854776", d},
		{"9223372036854", d},
	}
	for _, tt := range tests {
		if got := engine.CallerBudget(d, tt.ms); got != tt.want {
			t.Errorf("budget %q: %v, want %v", tt.ms, got, tt.want)
		}
	}
}

// A call's Iii-Timeout-Ms is the caller's time left, at least 1 while any
// is left (under a millisecond used to send no header, and the handler
// took the default timeout); none without a deadline or once it passed.
// The clock is synctest's: on a loaded machine a real 500µs can pass
// between setting the deadline and reading it (CI hit it).
func TestTimeoutHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		left time.Duration // 0: no deadline
		want string
	}{
		{"no deadline", 0, ""},
		{"seconds", 5 * time.Second, "5000"},
		{"under a millisecond", 500 * time.Microsecond, "1"},
		{"passed", -time.Second, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				if tc.left != 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithDeadline(ctx, time.Now().Add(tc.left))
					defer cancel()
				}
				msg := &nats.Msg{Header: nats.Header{}}
				engine.SetTimeoutHeader(ctx, msg)
				if got := msg.Header.Get(engine.HeaderTimeoutMs); got != tc.want {
					t.Errorf("header %q, want %q", got, tc.want)
				}
			})
		})
	}
}
