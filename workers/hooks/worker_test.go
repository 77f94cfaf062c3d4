package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/hook"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

const fnSubject = "iii.fn.hooks.publish_collect"

// start starts a server, an engine and the worker.
func start(t *testing.T, opts ...enginetest.ServerOption) (*server.Server, *engine.Engine) {
	t.Helper()
	ns := enginetest.RunServer(t, opts...)
	e := enginetest.NewEngine(t, ns)
	w := NewWorker()
	if err := w.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return ns, e
}

// subscribe answers every message on subj with answer (nil: no reply), on a
// plain connection of its own.
func subscribe(t *testing.T, ns *server.Server, subj string, answer func(*nats.Msg) []byte) {
	t.Helper()
	nc := enginetest.Connect(t, ns)
	if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
		if b := answer(m); b != nil {
			_ = m.Respond(b)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestWorkerOverNATS(t *testing.T) {
	t.Parallel()
	ns, e := start(t)
	ctx := context.Background()
	nc := enginetest.Connect(t, ns)

	// Nobody subscribed: an empty answer at once, from JSON (`nats req`).
	began := time.Now()
	m, err := nc.Request(fnSubject, []byte(`{"topic":"agent::before_function_call","payload":{"x":1},"merge_rule":"first_block_wins","timeout_ms":10000}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != `{"replies":[],"merged":{}}` || time.Since(began) > 2*time.Second {
		t.Fatalf("answer %s after %v", m.Data, time.Since(began))
	}

	// A blocking subscriber and a rewriting one, from Go (msgpack).
	var traceparent atomic.Value
	subscribe(t, ns, "iii.hook.agent.before_function_call", func(m *nats.Msg) []byte {
		traceparent.Store(m.Header.Get("traceparent"))
		return []byte(`{"block":true,"reason":"no"}`)
	})
	subscribe(t, ns, "iii.hook.agent.before_function_call", func(*nats.Msg) []byte { return []byte(`{"args":{"path":"/safe"}}`) })
	req := hook.Request{
		Topic:           hook.TopicBeforeCall,
		Payload:         hook.BeforeCall{SessionID: "s1", FunctionCallID: "c1", FunctionID: "fs::write", Args: map[string]any{"path": "/etc"}},
		MergeRule:       hook.FirstBlockWins,
		ExpectedReplies: 2,
		TimeoutMs:       5000,
	}
	res, err := engine.Call[hook.Result](ctx, e, PublishCollectFunction, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Replies) != 2 || !hook.Blocks(res.Merged) || res.Merged["reason"] != "no" || res.PublishFailed {
		t.Fatalf("result %+v", res)
	}

	// The same from JSON, with a caller's trace context that reaches the
	// subscribers.
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	body, _ := json.Marshal(req)
	m, err = nc.RequestMsg(&nats.Msg{Subject: fnSubject, Data: body, Header: nats.Header{"traceparent": {tp}}}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if werr := wire.Decode(m); werr != nil {
		t.Fatal(werr)
	}
	if !strings.Contains(string(m.Data), `"merged":{"block":true,"reason":"no"}`) {
		t.Fatalf("answer %s", m.Data)
	}
	if got, _ := traceparent.Load().(string); !strings.Contains(got, "0af7651916cd43dd8448eb211c80319c") {
		t.Fatalf("subscriber saw traceparent %q", got)
	}
}

func TestWorkerInvalidPayload(t *testing.T) {
	t.Parallel()
	ns, e := start(t)
	nc := enginetest.Connect(t, ns)
	bodies := map[string]string{
		"bad topic":               `{"topic":"agent::","merge_rule":"field_merge"}`,
		"topic with space":        `{"topic":"a b","merge_rule":"field_merge"}`,
		"missing topic":           `{"merge_rule":"field_merge"}`,
		"unknown merge rule":      `{"topic":"a::b","merge_rule":"last_wins"}`,
		"missing merge rule":      `{"topic":"a::b"}`,
		"negative timeout":        `{"topic":"a::b","merge_rule":"field_merge","timeout_ms":-1}`,
		"huge timeout":            `{"topic":"a::b","merge_rule":"field_merge","timeout_ms":60001}`,
		"overflowing timeout":     `{"topic":"a::b","merge_rule":"field_merge","timeout_ms":1e30}`,
		"huge expected":           `{"topic":"a::b","merge_rule":"field_merge","expected_replies":1001}`,
		"negative expected":       `{"topic":"a::b","merge_rule":"field_merge","expected_replies":-1}`,
		"quiescence over timeout": `{"topic":"a::b","merge_rule":"field_merge","timeout_ms":100,"quiescence_ms":200}`,
		"timeout as string":       `{"topic":"a::b","merge_rule":"field_merge","timeout_ms":"1000"}`,
		"not json":                `{topic`,
		"array":                   `[]`,
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := nc.Request(fnSubject, []byte(body), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if werr := wire.Decode(m); !errors.Is(werr, wire.ErrInvalidPayload) {
				t.Fatalf("answer %s (%v), want invalid_payload", m.Data, werr)
			}
		})
	}
	// And from Go.
	_, err := engine.Call[hook.Result](context.Background(), e, PublishCollectFunction, hook.Request{Topic: "a::b", MergeRule: "x"})
	if !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("err %v", err)
	}
}

// A hook that cannot be published is an answer with publish_failed, not an
// error: the request fits the server's max payload as msgpack, its payload
// re-encoded as JSON does not.
func TestWorkerPublishFailed(t *testing.T) {
	t.Parallel()
	_, e := start(t, enginetest.WithMaxPayload(64<<10))
	zeros := make([]int, 40000) // msgpack: 1 byte each; JSON: 2
	res, err := engine.Call[hook.Result](context.Background(), e, PublishCollectFunction,
		hook.Request{Topic: hook.TopicAfterCall, Payload: zeros, MergeRule: hook.FieldMerge})
	if err != nil {
		t.Fatal(err)
	}
	if !res.PublishFailed || len(res.Replies) != 0 || res.Merged == nil {
		t.Fatalf("result %+v", res)
	}
}

// A caller whose budget is shorter than timeout_ms still gets the answer:
// the collect ends a little before the caller gives up.
func TestWorkerCallerBudget(t *testing.T) {
	t.Parallel()
	ns, e := start(t)
	subscribe(t, ns, "iii.hook.slow.hook", func(*nats.Msg) []byte { return nil }) // listens, never answers
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err := engine.Call[hook.Result](ctx, e, PublishCollectFunction, hook.Request{Topic: "slow::hook", MergeRule: hook.FieldMerge, TimeoutMs: 10000})
	if err != nil {
		t.Fatalf("err %v", err)
	}
	if len(res.Replies) != 0 || res.PublishFailed {
		t.Fatalf("result %+v", res)
	}
}

func TestWorkerLifecycle(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()

	m, err := workers.Global().Module(WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	run, err := workers.Global().Start(ctx, e, workers.Env{}, m.Name)
	if err != nil {
		t.Fatal(err)
	}
	fns, err := e.FunctionsList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fns {
		if f.ID == PublishCollectFunction {
			found = f.Worker == WorkerName && json.Valid(f.RequestSchema) && json.Valid(f.ResponseSchema)
		}
	}
	if !found {
		t.Fatalf("catalog %+v", fns)
	}
	if err := run.Close(ctx); err != nil {
		t.Fatal(err)
	}

	w := NewWorker()
	if err := w.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx, e); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := w.Start(ctx, e); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
	if err := NewWorker().Close(ctx); err != nil {
		t.Fatalf("Close unstarted = %v", err)
	}
}

// The subscribers get the payload the caller sent: a JSON caller's
// integers past 2^53 (int64 ids) arrive unchanged, not rounded through a
// float64; a msgpack caller's integers too.
func TestWorkerPayloadExact(t *testing.T) {
	t.Parallel()
	ns, e := start(t)
	seen := make(chan string, 1)
	subscribe(t, ns, "iii.hook.exact.payload", func(m *nats.Msg) []byte {
		seen <- string(m.Data)
		return []byte(`{}`)
	})
	nc := enginetest.Connect(t, ns)
	tests := []struct{ payload, want string }{
		{`{"id":12345678901234567891}`, `{"id":12345678901234567891}`},
		{`[9007199254740993, -9223372036854775808, 1.10]`, `[9007199254740993,-9223372036854775808,1.10]`},
		{`18446744073709551615`, `18446744073709551615`},
		{`{"a":{"b":[{"n":9007199254740993}]}}`, `{"a":{"b":[{"n":9007199254740993}]}}`},
		{``, `null`},
		{`null`, `null`},
		{`{"html":"<b>a & b</b>"}`, `{"html":"<b>a & b</b>"}`}, // not HTML-escaped
	}
	for _, tc := range tests {
		body := `{"topic":"exact::payload","merge_rule":"field_merge","expected_replies":1`
		if tc.payload != "" {
			body += `,"payload":` + tc.payload
		}
		m, err := nc.Request(fnSubject, []byte(body+`}`), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if werr := wire.Decode(m); werr != nil {
			t.Fatalf("%s: %v", tc.payload, werr)
		}
		if got := <-seen; got != tc.want {
			t.Errorf("payload %s reached the subscriber as %s, want %s", tc.payload, got, tc.want)
		}
	}
	// From Go (msgpack).
	if _, err := engine.Call[hook.Result](context.Background(), e, PublishCollectFunction, hook.Request{
		Topic: "exact::payload", MergeRule: hook.FieldMerge, ExpectedReplies: 1,
		Payload: map[string]any{"id": int64(math.MaxInt64), "u": uint64(math.MaxUint64)},
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := <-seen, `{"id":9223372036854775807,"u":18446744073709551615}`; got != want {
		t.Errorf("msgpack payload reached the subscriber as %s, want %s", got, want)
	}
	// A JSON payload that is not JSON is still invalid_payload.
	m, err := nc.Request(fnSubject, []byte(`{"topic":"exact::payload","merge_rule":"field_merge","payload":{x}}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if werr := wire.Decode(m); !errors.Is(werr, wire.ErrInvalidPayload) {
		t.Fatalf("bad payload: %s (%v)", m.Data, werr)
	}
}

// The worker has no settings: a mistyped one is an error, not ignored.
func TestProvisionRefusesSettings(t *testing.T) {
	t.Parallel()
	w := NewWorker()
	if err := w.Provision(context.Background(), workers.Env{}); err != nil {
		t.Fatal(err)
	}
	err := w.Provision(context.Background(), workers.Env{Settings: map[string]map[string]string{WorkerName: {"timeout": "1s"}}})
	if !errors.Is(err, engine.ErrInvalidOption) || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("error %v", err)
	}
}

// An answer over the server's max payload leaves the newest replies out of
// replies (counted in omitted) and keeps merged, in either codec; it was an
// internal error as soon as one reply was over half the max payload (it is
// in replies and in merged).
func TestWorkerAnswerFitsMaxPayload(t *testing.T) {
	t.Parallel()
	ns, e := start(t, enginetest.WithMaxPayload(64<<10))
	big := strings.Repeat("a", 40<<10)
	subscribe(t, ns, "iii.hook.big.reply", func(m *nats.Msg) []byte {
		_ = m.Respond([]byte(`{"small":1}`)) // two replies: a small one, then a big one
		return []byte(`{"big":"` + big + `"}`)
	})
	req := hook.Request{Topic: "big::reply", MergeRule: hook.FieldMerge, ExpectedReplies: 2, TimeoutMs: 5000}
	check := func(t *testing.T, res hook.Result) {
		t.Helper()
		if len(res.Replies) != 1 || res.Replies[0]["small"] == nil || res.Omitted != 1 ||
			res.Merged["big"] != big || res.Merged["small"] == nil {
			t.Fatalf("replies %d, omitted %d, merged keys %d", len(res.Replies), res.Omitted, len(res.Merged))
		}
	}
	t.Run("msgpack", func(t *testing.T) {
		res, err := engine.Call[hook.Result](context.Background(), e, PublishCollectFunction, req)
		if err != nil {
			t.Fatal(err)
		}
		check(t, res)
	})
	t.Run("json", func(t *testing.T) {
		nc := enginetest.Connect(t, ns)
		body, _ := json.Marshal(req)
		m, err := nc.Request(fnSubject, body, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if werr := wire.Decode(m); werr != nil {
			t.Fatal(werr)
		}
		var res hook.Result
		if err := json.Unmarshal(m.Data, &res); err != nil {
			t.Fatal(err)
		}
		check(t, res)
	})
	t.Run("merged too large", func(t *testing.T) {
		huge := strings.Repeat("b", 63<<10)
		subscribe(t, ns, "iii.hook.huge.reply", func(*nats.Msg) []byte { return []byte(`{"huge":"` + huge + `"}`) })
		_, err := engine.Call[hook.Result](context.Background(), e, PublishCollectFunction,
			hook.Request{Topic: "huge::reply", MergeRule: hook.FieldMerge, ExpectedReplies: 1, TimeoutMs: 5000})
		if !errors.Is(err, wire.ErrInternal) || !strings.Contains(err.Error(), "merged reply") {
			t.Fatalf("err %v", err)
		}
	})
}
