package hook_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
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
	"github.com/iii-on-nats/iii/subjects"
)

const topic = "test::hook"

// subscribe starts a plain NATS subscriber (its own connection, no engine)
// on topic's hook subject; answer builds its reply, nil for none. The
// subscription is known to the server when subscribe returns.
func subscribe(t *testing.T, ns *server.Server, topic string, answer func(m *nats.Msg) *nats.Msg) *nats.Conn {
	t.Helper()
	return subscribeConn(t, ns, topic, func(_ *nats.Conn, m *nats.Msg) *nats.Msg { return answer(m) })
}

// subscribeConn is subscribe with the subscriber's connection passed to
// answer.
func subscribeConn(t *testing.T, ns *server.Server, topic string, answer func(nc *nats.Conn, m *nats.Msg) *nats.Msg) *nats.Conn {
	t.Helper()
	subj, err := subjects.HookSubject(topic)
	if err != nil {
		t.Fatal(err)
	}
	nc := enginetest.Connect(t, ns)
	if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
		if r := answer(nc, m); r != nil {
			_ = m.RespondMsg(r) // fails only once the test is over
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return nc
}

// jsonReply answers body as is, with no Content-Type (JSON).
func jsonReply(body string) func(*nats.Msg) *nats.Msg {
	return func(*nats.Msg) *nats.Msg { return &nats.Msg{Data: []byte(body)} }
}

// ordered returns two answer functions whose replies reach the collector in
// order: the first flushes its reply through the server before the second
// answers.
func ordered(first, second string) (a, b func(*nats.Conn, *nats.Msg) *nats.Msg) {
	sent := make(chan struct{})
	a = func(nc *nats.Conn, m *nats.Msg) *nats.Msg {
		defer close(sent)
		if err := m.Respond([]byte(first)); err == nil {
			_ = nc.Flush() // the server has routed it before b answers
		}
		return nil
	}
	b = func(*nats.Conn, *nats.Msg) *nats.Msg {
		<-sent
		return &nats.Msg{Data: []byte(second)}
	}
	return a, b
}

func collect(t *testing.T, nc *nats.Conn, req hook.Request, opts ...hook.Option) (hook.Result, time.Duration) {
	t.Helper()
	start := time.Now()
	res, err := hook.PublishCollect(context.Background(), nc, req, opts...)
	if err != nil {
		t.Fatalf("PublishCollect: %v", err)
	}
	checkShape(t, res)
	return res, time.Since(start)
}

// checkShape asserts the invariants of every result: replies and merged
// are never null.
func checkShape(t *testing.T, res hook.Result) {
	t.Helper()
	if res.Replies == nil || res.Merged == nil {
		t.Fatalf("nil replies or merged: %+v", res)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"replies":[`) || !strings.Contains(string(b), `"merged":{`) {
		t.Fatalf("json %s", b)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNoSubscribersReturnsAtOnce(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	for _, rule := range []hook.MergeRule{hook.FirstBlockWins, hook.FieldMerge, hook.PipelineLastWins} {
		res, took := collect(t, nc, hook.Request{Topic: topic, Payload: map[string]any{"a": 1}, MergeRule: rule, TimeoutMs: 10000})
		if took > 2*time.Second {
			t.Fatalf("%s: took %v with nobody subscribed", rule, took)
		}
		if got := mustJSON(t, res); got != `{"replies":[],"merged":{}}` {
			t.Fatalf("%s: result %s", rule, got)
		}
	}
}

// The no-responders answer also comes when a subscriber left: interest is
// checked at publish time.
func TestNoSubscribersAfterUnsubscribe(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	sc := subscribe(t, ns, topic, jsonReply(`{}`))
	res, _ := collect(t, nc, hook.Request{Topic: topic, MergeRule: hook.FieldMerge, ExpectedReplies: 1})
	if len(res.Replies) != 1 {
		t.Fatalf("replies %v", res.Replies)
	}
	sc.Close()
	enginetest.Eventually(t, 5*time.Second, func() error {
		// The server may still route one publish to the closing
		// connection; that one runs into the 1 s timeout.
		start := time.Now()
		res, err := hook.PublishCollect(context.Background(), nc, hook.Request{Topic: topic, MergeRule: hook.FieldMerge, TimeoutMs: 1000, QuiescenceMs: 1000})
		if err != nil {
			return err
		}
		if len(res.Replies) != 0 || time.Since(start) > 900*time.Millisecond {
			return errors.New("still answered")
		}
		return nil
	})
}

func TestOneSubscriberBlocks(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	var got atomic.Value
	subscribe(t, ns, hook.TopicBeforeCall, func(m *nats.Msg) *nats.Msg {
		got.Store(m)
		return &nats.Msg{Data: []byte(`{"block":true,"reason":"read-only day"}`)}
	})
	payload := hook.BeforeCall{SessionID: "s1", FunctionCallID: "c1", FunctionID: "fs::write", Args: map[string]any{"path": "/x"}}
	res, took := collect(t, nc, hook.Request{Topic: hook.TopicBeforeCall, Payload: payload, MergeRule: hook.BeforeCallMergeRule, TimeoutMs: 5000})
	if took > 2*time.Second {
		t.Fatalf("took %v: quiescence did not end the collect", took)
	}
	if want := `{"replies":[{"block":true,"reason":"read-only day"}],"merged":{"block":true,"reason":"read-only day"}}`; mustJSON(t, res) != want {
		t.Fatalf("result %s", mustJSON(t, res))
	}
	var before hook.BeforeReply
	if err := res.Bind(&before); err != nil || !before.Block || before.Reason != "read-only day" {
		t.Fatalf("bind = %+v, %v", before, err)
	}

	// What the subscriber saw: the payload as JSON, the inbox, the headers.
	m := got.Load().(*nats.Msg)
	if string(m.Data) != mustJSON(t, payload) {
		t.Fatalf("payload %s", m.Data)
	}
	if m.Subject != "iii.hook.agent.before_function_call" || !strings.HasPrefix(m.Reply, nats.InboxPrefix) {
		t.Fatalf("subject %q reply %q", m.Subject, m.Reply)
	}
	if ct := m.Header.Get(wire.HeaderContentType); ct != wire.ContentJSON {
		t.Fatalf("content type %q", ct)
	}
	if ms, err := strconv.Atoi(m.Header.Get(engine.HeaderTimeoutMs)); err != nil || ms <= 0 || ms > 5000 {
		t.Fatalf("timeout header %q", m.Header.Get(engine.HeaderTimeoutMs))
	}
}

func TestMergeRulesOverNATS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		rule          hook.MergeRule
		first, second string
		want          string
	}{
		{"field merge", hook.FieldMerge, `{"a":1,"k":"first"}`, `{"b":2,"k":"second"}`, `{"a":1,"b":2,"k":"second"}`},
		{"pipeline last wins", hook.PipelineLastWins, `{"a":1,"k":"first"}`, `{"b":2,"k":"second"}`, `{"b":2,"k":"second"}`},
		{"first block wins, rewrite then block", hook.FirstBlockWins, `{"args":{"path":"/safe"}}`, `{"block":true,"reason":"no"}`, `{"block":true,"reason":"no"}`},
		{"first block wins, block then rewrite", hook.FirstBlockWins, `{"block":true,"reason":"no"}`, `{"args":{"path":"/safe"}}`, `{"block":true,"reason":"no"}`},
		{"first block wins, none blocks", hook.FirstBlockWins, `{"args":{"path":"/a"},"block":false}`, `{"args":{"path":"/safe"},"note":"x"}`, `{"args":{"path":"/safe"},"block":false,"note":"x"}`},
		{"first block wins, string true does not block", hook.FirstBlockWins, `{"block":"true","reason":"no"}`, `{"args":{}}`, `{"args":{},"block":"true","reason":"no"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			nc := enginetest.Connect(t, ns)
			a, b := ordered(tc.first, tc.second)
			subscribeConn(t, ns, topic, a)
			subscribeConn(t, ns, topic, b)
			res, _ := collect(t, nc, hook.Request{Topic: topic, Payload: "x", MergeRule: tc.rule, ExpectedReplies: 2, TimeoutMs: 5000, QuiescenceMs: 5000})
			if len(res.Replies) != 2 {
				t.Fatalf("replies %v", res.Replies)
			}
			if got := mustJSON(t, res.Replies[0]); got != tc.first {
				t.Fatalf("replies out of order: %s", mustJSON(t, res.Replies))
			}
			if got := mustJSON(t, res.Merged); got != tc.want {
				t.Fatalf("merged %s, want %s", got, tc.want)
			}
		})
	}
}

func TestExpectedRepliesStopsEarly(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	subscribe(t, ns, topic, jsonReply(`{"a":1}`))
	subscribe(t, ns, topic, jsonReply(`{"b":2}`))
	res, took := collect(t, nc, hook.Request{Topic: topic, MergeRule: hook.FieldMerge, ExpectedReplies: 2, TimeoutMs: 10000, QuiescenceMs: 10000})
	if took > 2*time.Second {
		t.Fatalf("took %v: expected_replies did not end the collect", took)
	}
	if len(res.Replies) != 2 || res.Merged["a"] != int64(1) || res.Merged["b"] != int64(2) {
		t.Fatalf("result %s", mustJSON(t, res))
	}
}

func TestQuiescence(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	subscribe(t, ns, topic, jsonReply(`{"a":1}`))
	res, took := collect(t, nc, hook.Request{Topic: topic, MergeRule: hook.FieldMerge, TimeoutMs: 10000, QuiescenceMs: 50})
	if took < 50*time.Millisecond || took > 2*time.Second {
		t.Fatalf("took %v, want the 50ms quiescence after the reply", took)
	}
	if len(res.Replies) != 1 {
		t.Fatalf("replies %v", res.Replies)
	}
}

func TestDeadline(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	subscribe(t, ns, topic, func(*nats.Msg) *nats.Msg { return nil }) // listens, never answers

	res, took := collect(t, nc, hook.Request{Topic: topic, MergeRule: hook.FieldMerge, TimeoutMs: 200})
	if took < 190*time.Millisecond || took > 2*time.Second {
		t.Fatalf("took %v, want ~200ms", took)
	}
	if len(res.Replies) != 0 || res.PublishFailed {
		t.Fatalf("result %+v", res)
	}

	// ctx's earlier deadline wins, and is not an error either.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := hook.PublishCollect(ctx, nc, hook.Request{Topic: topic, MergeRule: hook.FieldMerge, TimeoutMs: 10000})
	if err != nil {
		t.Fatal(err)
	}
	checkShape(t, res)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %v, want ctx's ~150ms", took)
	}
}

func TestContextCanceled(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subscribe(t, ns, topic, func(*nats.Msg) *nats.Msg { cancel(); return nil })
	subscribe(t, ns, topic, jsonReply(`{"a":1}`))
	res, err := hook.PublishCollect(ctx, nc, hook.Request{Topic: topic, MergeRule: hook.FieldMerge, TimeoutMs: 10000, QuiescenceMs: 10000})
	if !errors.Is(err, context.Canceled) || errors.Is(err, hook.ErrPublishFailed) {
		t.Fatalf("err = %v", err)
	}
	checkShape(t, res)
	if res.PublishFailed {
		t.Fatal("publish_failed on cancel")
	}
}

func TestContextCanceledBeforePublish(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	seen := make(chan string, 2)
	subscribe(t, ns, topic, func(m *nats.Msg) *nats.Msg { seen <- string(m.Data); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := hook.PublishCollect(ctx, nc, hook.Request{Topic: topic, Payload: "hook", MergeRule: hook.FieldMerge})
	if !errors.Is(err, context.Canceled) || res.PublishFailed {
		t.Fatalf("res %+v err %v", res, err)
	}
	checkShape(t, res)
	// A marker published afterwards on the same connection is the first
	// message the subscriber sees: the hook was never sent.
	subj, _ := subjects.HookSubject(topic)
	if err := nc.Publish(subj, []byte("marker")); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != "marker" {
		t.Fatalf("subscriber saw %q first", got)
	}
}

func TestReplyShapes(t *testing.T) {
	t.Parallel()
	msgpackBody, err := wire.Msgpack.Marshal(map[string]any{"block": true, "n": 3, "nested": map[string]any{"k": []any{"v"}}})
	if err != nil {
		t.Fatal(err)
	}
	// A msgpack timestamp past year 9999 decodes, but time.Time does not
	// encode it as JSON.
	farTime, err := wire.Msgpack.Marshal(map[string]any{"block": true, "at": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		reply   *nats.Msg
		want    string // the one reply, or "" for none
		invalid int
	}{
		{"object", &nats.Msg{Data: []byte(`{"a":1}`)}, `{"a":1}`, 0},
		{"array", &nats.Msg{Data: []byte(`[1,"x"]`)}, `{"value":[1,"x"]}`, 0},
		{"string", &nats.Msg{Data: []byte(`"hi"`)}, `{"value":"hi"}`, 0},
		{"null", &nats.Msg{Data: []byte(`null`)}, `{"value":null}`, 0},
		{"empty body is {}", &nats.Msg{}, `{}`, 0},
		{"garbage", &nats.Msg{Data: []byte(`{not json`)}, "", 1},
		{"trailing data", &nats.Msg{Data: []byte(`{} {}`)}, "", 1},
		{"msgpack", &nats.Msg{Data: msgpackBody, Header: nats.Header{wire.HeaderContentType: {wire.ContentMsgpack}}}, `{"block":true,"n":3,"nested":{"k":["v"]}}`, 0},
		{"bad msgpack", &nats.Msg{Data: []byte{0xc1}, Header: nats.Header{wire.HeaderContentType: {wire.ContentMsgpack}}}, "", 1},
		{"msgpack NaN", &nats.Msg{Data: []byte("\x81\xa1a\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00"), Header: nats.Header{wire.HeaderContentType: {wire.ContentMsgpack}}}, "", 1},
		{"msgpack timestamp past 9999", &nats.Msg{Data: farTime, Header: nats.Header{wire.HeaderContentType: {wire.ContentMsgpack}}}, "", 1},
		{"service error", wire.Reply(wire.Errorf(wire.CodeInternal, "boom"), wire.JSON), "", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			nc := enginetest.Connect(t, ns)
			subscribe(t, ns, topic, func(*nats.Msg) *nats.Msg { return &nats.Msg{Data: tc.reply.Data, Header: tc.reply.Header} })
			subscribe(t, ns, topic, jsonReply(`{"ok":true}`)) // a good reply beside it
			res, _ := collect(t, nc, hook.Request{Topic: topic, MergeRule: hook.PipelineLastWins, ExpectedReplies: 2, TimeoutMs: 5000, QuiescenceMs: 5000})
			if res.Invalid != tc.invalid {
				t.Fatalf("invalid = %d, want %d (%s)", res.Invalid, tc.invalid, mustJSON(t, res))
			}
			var others []string
			for _, r := range res.Replies {
				if s := mustJSON(t, r); s != `{"ok":true}` {
					others = append(others, s)
				}
			}
			if tc.want == "" && len(others) != 0 || tc.want != "" && (len(others) != 1 || others[0] != tc.want) {
				t.Fatalf("replies %s, want %s", mustJSON(t, res.Replies), tc.want)
			}
		})
	}
}

// A payload's "<", ">" and "&" (a function result's markup) reach the
// subscribers as they are: HTML-escaped, each grew to six bytes, and a
// payload well under the max payload failed to publish (a before-call
// round denied, an after-call round, a redaction, skipped).
func TestPayloadNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(16<<10))
	nc := enginetest.Connect(t, ns)
	seen := make(chan string, 1)
	subscribe(t, ns, topic, func(m *nats.Msg) *nats.Msg {
		seen <- string(m.Data)
		return &nats.Msg{Data: []byte(`{}`)}
	})
	markup := strings.Repeat("<b>&</b>", 1<<10) // 8 KiB; 38 KiB escaped
	res, err := hook.PublishCollect(context.Background(), nc, hook.Request{
		Topic: topic, Payload: map[string]any{"text": markup}, MergeRule: hook.FieldMerge, ExpectedReplies: 1, TimeoutMs: 5000,
	})
	if err != nil || res.PublishFailed || len(res.Replies) != 1 {
		t.Fatalf("res %+v err %v", res, err)
	}
	if got, want := <-seen, `{"text":"`+markup+`"}`; got != want {
		t.Fatalf("the subscriber got %d bytes %.40q…, want %d bytes %.40q…", len(got), got, len(want), want)
	}
}

func TestPublishFailure(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(1024))
	tests := []struct {
		name  string
		conn  func() *nats.Conn
		req   hook.Request
		cause error
	}{
		{"closed connection", func() *nats.Conn { nc := enginetest.Connect(t, ns); nc.Close(); return nc },
			hook.Request{Topic: topic, MergeRule: hook.FieldMerge}, nats.ErrConnectionClosed},
		{"draining connection", func() *nats.Conn {
			nc := enginetest.Connect(t, ns)
			if _, err := nc.Subscribe("x", func(*nats.Msg) {}); err != nil {
				t.Fatal(err)
			}
			if err := nc.Drain(); err != nil {
				t.Fatal(err)
			}
			return nc
		}, hook.Request{Topic: topic, MergeRule: hook.FieldMerge}, nil},
		{"nil connection", func() *nats.Conn { return nil }, hook.Request{Topic: topic, MergeRule: hook.FieldMerge}, nats.ErrInvalidConnection},
		{"payload over max payload", func() *nats.Conn { return enginetest.Connect(t, ns) },
			hook.Request{Topic: topic, MergeRule: hook.FieldMerge, Payload: strings.Repeat("x", 2048)}, nats.ErrMaxPayload},
		{"payload does not encode", func() *nats.Conn { return enginetest.Connect(t, ns) },
			hook.Request{Topic: topic, MergeRule: hook.FieldMerge, Payload: make(chan int)}, nil},
		{"invalid topic", func() *nats.Conn { return enginetest.Connect(t, ns) },
			hook.Request{Topic: "a::", MergeRule: hook.FieldMerge}, hook.ErrInvalidRequest},
		{"invalid merge rule", func() *nats.Conn { return enginetest.Connect(t, ns) },
			hook.Request{Topic: topic}, hook.ErrInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := hook.PublishCollect(context.Background(), tc.conn(), tc.req)
			if !errors.Is(err, hook.ErrPublishFailed) || !res.PublishFailed {
				t.Fatalf("res %+v err %v", res, err)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Fatalf("err %v, want %v", err, tc.cause)
			}
			checkShape(t, res)
			if got := mustJSON(t, res); got != `{"replies":[],"merged":{},"publish_failed":true}` {
				t.Fatalf("json %s", got)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	var got atomic.Value
	subscribe(t, ns, topic, func(m *nats.Msg) *nats.Msg { got.Store(m.Header); return &nats.Msg{} })
	inject := func(_ context.Context, h nats.Header) {
		h.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	}
	res, _ := collect(t, nc, hook.Request{Topic: topic, MergeRule: hook.FieldMerge, ExpectedReplies: 1},
		hook.WithHeader(nats.Header{"X-One": {"1"}}), hook.WithHeader(nats.Header{"X-One": {"2"}, "X-Two": {"b"}}), hook.WithInjector(inject))
	if len(res.Replies) != 1 {
		t.Fatalf("replies %v", res.Replies)
	}
	h := got.Load().(nats.Header)
	if !reflect.DeepEqual(h["X-One"], []string{"1", "2"}) || h.Get("X-Two") != "b" || h.Get("traceparent") == "" || h.Get(wire.HeaderContentType) != wire.ContentJSON {
		t.Fatalf("headers %v", h)
	}

	bad := []struct {
		name string
		opt  hook.Option
	}{
		{"nil option", nil},
		{"nil injector", hook.WithInjector(nil)},
		{"empty key", hook.WithHeader(nats.Header{"": {"x"}})},
		{"key with colon", hook.WithHeader(nats.Header{"a:b": {"x"}})},
		{"key with space", hook.WithHeader(nats.Header{"a b": {"x"}})},
		{"value with CRLF", hook.WithHeader(nats.Header{"A": {"x\r\nB: y"}})},
		{"content type", hook.WithHeader(nats.Header{"content-type": {"application/msgpack"}})},
		{"timeout", hook.WithHeader(nats.Header{engine.HeaderTimeoutMs: {"1"}})},
	}
	for _, tc := range bad {
		res, err := hook.PublishCollect(context.Background(), nc, hook.Request{Topic: topic, MergeRule: hook.FieldMerge}, tc.opt)
		if !errors.Is(err, engine.ErrInvalidOption) || !errors.Is(err, hook.ErrPublishFailed) || !res.PublishFailed {
			t.Errorf("%s: res %+v err %v", tc.name, res, err)
		}
	}
}

// Many concurrent collects on one connection keep their replies apart.
func TestConcurrentCollects(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	subscribe(t, ns, topic, func(m *nats.Msg) *nats.Msg { return &nats.Msg{Data: m.Data} }) // echo
	const n = 32
	errs := make(chan error, n)
	for i := range n {
		go func() {
			res, err := hook.PublishCollect(context.Background(), nc, hook.Request{Topic: topic, Payload: map[string]int{"i": i}, MergeRule: hook.FieldMerge, ExpectedReplies: 1, TimeoutMs: 5000})
			if err == nil && (len(res.Replies) != 1 || res.Merged["i"] != int64(i)) {
				err = errors.New("wrong reply " + mustJSONNoT(res))
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func mustJSONNoT(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A JSON subscriber's rewritten arguments reach the caller exact: an
// int64 id in them is not rounded through a float64, in the replies, the
// merged reply and a BeforeReply bound from it.
func TestReplyNumbersExact(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	subscribe(t, ns, hook.TopicBeforeCall, jsonReply(`{"args":{"id":1234567890123456789,"list":[18446744073709551615,0.5]}}`))
	payload := hook.BeforeCall{SessionID: "s1", FunctionCallID: "c1", FunctionID: "db::get", Args: map[string]any{"id": int64(1)}}
	res, _ := collect(t, nc, hook.Request{Topic: hook.TopicBeforeCall, Payload: payload, MergeRule: hook.BeforeCallMergeRule, TimeoutMs: 5000, ExpectedReplies: 1})
	const want = `{"args":{"id":1234567890123456789,"list":[18446744073709551615,0.5]}}`
	if got := mustJSON(t, res.Merged); got != want {
		t.Fatalf("merged %s, want %s", got, want)
	}
	var before hook.BeforeReply
	if err := res.Bind(&before); err != nil {
		t.Fatal(err)
	}
	if before.Args["id"] != int64(1234567890123456789) {
		t.Fatalf("bound args %#v", before.Args)
	}
	if list, _ := before.Args["list"].([]any); len(list) != 2 || list[0] != uint64(18446744073709551615) || list[1] != 0.5 {
		t.Fatalf("bound list %#v", before.Args["list"])
	}
}

// A no-responders status after a reply is a subscriber's, not the
// server's (which sends it alone): it is invalid and the collect goes on,
// so a later block still counts. It used to end the collect.
func TestLateNoRespondersStatus(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns)
	subscribeConn(t, ns, topic, func(sc *nats.Conn, m *nats.Msg) *nats.Msg {
		for _, r := range []*nats.Msg{
			{Data: []byte(`{"ok":true}`)},
			{Header: nats.Header{"Status": {"503"}}}, // looks like no responders
		} {
			r.Subject = m.Reply
			_ = sc.PublishMsg(r)
			_ = sc.Flush()
		}
		return &nats.Msg{Data: []byte(`{"block":true,"reason":"late"}`)}
	})
	res, _ := collect(t, nc, hook.Request{Topic: topic, MergeRule: hook.FirstBlockWins, ExpectedReplies: 3, TimeoutMs: 5000, QuiescenceMs: 5000})
	if !hook.Blocks(res.Merged) || len(res.Replies) != 2 || res.Invalid != 1 {
		t.Fatalf("result %s", mustJSON(t, res))
	}
}
