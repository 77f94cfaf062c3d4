package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/queue"
	"github.com/iii-on-nats/iii/engine/wire"
)

// jsonReq calls function subject subj the way `nats req` does.
func jsonReq(t *testing.T, nc *nats.Conn, subj, body string, resp any) error {
	t.Helper()
	m, err := nc.Request(subj, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if werr := wire.Decode(m); werr != nil {
		return werr
	}
	if resp != nil {
		if err := json.Unmarshal(m.Data, resp); err != nil {
			t.Fatalf("reply %s: %v", m.Data, err)
		}
	}
	return nil
}

func TestServeFunctions(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	if _, err := queue.Serve(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	nc := enginetest.Connect(t, ns)
	type deep struct {
		ID    int            `json:"id"`
		Big   int64          `json:"big"`
		Ratio float64        `json:"ratio"`
		Tags  []string       `json:"tags"`
		Meta  map[string]int `json:"meta"`
	}
	got := make(chan deep, 4)
	w, err := e.Worker("deep")
	if err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	if err := w.Register(engine.Function{ID: "test::deep", Handler: engine.Typed(func(_ context.Context, d deep) (struct{}, error) {
		if fail.Load() {
			return struct{}{}, wire.Errorf(wire.CodeInvalidPayload, "refused")
		}
		got <- d
		return struct{}{}, nil
	})}); err != nil {
		t.Fatal(err)
	}

	// JSON in (as the nats CLI sends it); integers stay integers on their
	// way through the engine's msgpack codec.
	var er queue.EnqueueResponse
	body := `{"queue":"ops","function_id":"test::deep","dedup_id":"d-1",
		"data":{"id":7,"big":9007199254740993,"ratio":0.5,"tags":["a","b"],"meta":{"x":1}}}`
	if err := jsonReq(t, nc, "iii.fn.queue.enqueue", body, &er); err != nil || er.Queue != "ops" || er.FunctionID != "test::deep" {
		t.Fatalf("enqueue = %+v, %v", er, err)
	}
	if err := jsonReq(t, nc, "iii.fn.queue.enqueue", body, nil); err != nil { // deduplicated
		t.Fatal(err)
	}
	// msgpack in, through the engine.
	if err := e.Trigger(context.Background(), queue.FnEnqueue, map[string]any{
		"queue": "ops", "function_id": "test::deep", "data": map[string]any{"id": 8},
	}, nil); err != nil {
		t.Fatal(err)
	}
	var st queue.Stats
	if err := jsonReq(t, nc, "iii.fn.queue.stats", `{"queue":"ops"}`, &st); err != nil || st.Messages != 2 || st.Consumer {
		t.Fatalf("stats = %+v, %v", st, err)
	}

	consume(t, e, "ops", fast()...)
	want := map[int]deep{
		7: {ID: 7, Big: 9007199254740993, Ratio: 0.5, Tags: []string{"a", "b"}, Meta: map[string]int{"x": 1}},
		8: {ID: 8},
	}
	for range 2 {
		select {
		case d := <-got:
			if fmt.Sprint(d) != fmt.Sprint(want[d.ID]) {
				t.Fatalf("handler got %+v, want %+v", d, want[d.ID])
			}
		case <-time.After(5 * time.Second):
			t.Fatal("not handled")
		}
	}

	// A failing call: dead letters and redrive through the functions.
	fail.Store(true)
	if err := e.Trigger(context.Background(), queue.FnEnqueue, map[string]any{
		"queue": "ops", "function_id": "test::deep", "data": map[string]any{"id": 9},
	}, nil); err != nil {
		t.Fatal(err)
	}
	var dr queue.DeadLettersResponse
	enginetest.Eventually(t, 5*time.Second, func() error {
		if err := jsonReq(t, nc, "iii.fn.queue.dead_letters", `{"queue":"ops"}`, &dr); err != nil {
			return err
		}
		if len(dr.DeadLetters) != 1 {
			return fmt.Errorf("dead letters %+v", dr)
		}
		return nil
	})
	dl := dr.DeadLetters[0]
	if m, ok := dl.Data.(map[string]any); !ok || m["id"] != 9.0 ||
		dl.ErrorCode != wire.CodeInvalidPayload || dl.ErrorMessage != "refused" || dl.FunctionID != "test::deep" {
		t.Fatalf("dead letter %+v", dl)
	}
	fail.Store(false)
	var rr queue.RedriveResponse
	if err := e.Trigger(context.Background(), queue.FnRedrive, queue.RedriveRequest{Queue: "ops"}, &rr); err != nil || rr.Redriven != 1 {
		t.Fatalf("redrive = %+v, %v", rr, err)
	}
	select {
	case d := <-got:
		if d.ID != 9 {
			t.Fatalf("redriven job %+v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("redriven job not handled")
	}
	enginetest.Eventually(t, 3*time.Second, func() error {
		st, err := engine.Call[queue.Stats](context.Background(), e, queue.FnStats, queue.StatsRequest{Queue: "ops"})
		if err != nil {
			return err
		}
		if st.Messages != 0 || st.DeadLetters != 0 || !st.Consumer {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
}

func TestServeRejectsBadInput(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	if _, err := queue.Serve(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	nc := enginetest.Connect(t, ns)
	badQueues := []string{"", "a.b", "a*", "*", ">", "a.>", "a b", " a", "a\t", "ü", strings.Repeat("x", 129)}
	badFns := []string{"", "a::", "::a", "a::::b", "a b", "a\nb", "\x00", strings.Repeat("f", 300), string([]byte{0xff})}

	type call struct {
		name string
		fn   string
		req  any
	}
	var calls []call
	for _, q := range badQueues {
		calls = append(calls,
			call{"enqueue queue " + q, queue.FnEnqueue, map[string]any{"queue": q, "function_id": "a::b", "data": map[string]any{}}},
			call{"dead_letters " + q, queue.FnDeadLetters, map[string]any{"queue": q}},
			call{"redrive " + q, queue.FnRedrive, map[string]any{"queue": q}},
			call{"stats " + q, queue.FnStats, map[string]any{"queue": q}},
		)
	}
	for _, f := range badFns {
		calls = append(calls, call{"enqueue fn " + f, queue.FnEnqueue, map[string]any{"queue": "q", "function_id": f}})
	}
	calls = append(calls,
		call{"dedup id with space", queue.FnEnqueue, map[string]any{"queue": "q", "function_id": "a::b", "dedup_id": "a b"}},
		call{"dedup id with newline", queue.FnEnqueue, map[string]any{"queue": "q", "function_id": "a::b", "dedup_id": "a\r\nNats-Msg-Id: x"}},
		call{"dedup id too long", queue.FnEnqueue, map[string]any{"queue": "q", "function_id": "a::b", "dedup_id": strings.Repeat("d", 257)}},
		call{"wrong type", queue.FnEnqueue, map[string]any{"queue": 5, "function_id": "a::b"}},
		call{"negative limit", queue.FnDeadLetters, map[string]any{"queue": "q", "limit": -1}},
		call{"huge limit", queue.FnDeadLetters, map[string]any{"queue": "q", "limit": 100000}},
		call{"negative redrive limit", queue.FnRedrive, map[string]any{"queue": "q", "limit": -3}},
		call{"not an object", queue.FnStats, []int{1, 2}},
	)
	for _, c := range calls {
		err := e.Trigger(context.Background(), c.fn, c.req, nil)
		if !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%s: %v, want invalid_payload", c.name, err)
		}
	}
	// The same over JSON, including bytes that are not JSON at all.
	for _, body := range []string{`{"queue":"a.b","function_id":"x::y"}`, `{"queue":"q","function_id":"bad id"}`, "\xff\x00", `{"queue":`} {
		if err := jsonReq(t, nc, "iii.fn.queue.enqueue", body, nil); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("JSON %q: %v", body, err)
		}
	}
	// Nothing was enqueued by any of it.
	if st, err := queue.Inspect(context.Background(), e, "q"); err != nil || st.Messages != 0 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	if _, err := engine.Call[queue.RedriveResponse](context.Background(), e, queue.FnRedrive,
		queue.RedriveRequest{Queue: "q", Sequence: 12345}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("redrive of a missing sequence: %v", err)
	}
}

// queue::dead_letters answers within the max payload: it lists the dead
// letters that fit, says truncated, and pages on with after; a dead letter
// too large alone is listed without its data. The answer used to hold
// limit dead letters whatever their size, so a queue with large dead
// letters could not be listed at all (internal: response exceeds the max
// payload), and with no cursor a smaller limit only ever showed the oldest.
func TestServeDeadLettersFitTheMaxPayload(t *testing.T) {
	t.Parallel()
	const max = 4 << 10
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(max))
	e := enginetest.NewEngine(t, ns)
	if _, err := queue.Serve(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	w, err := e.Worker("sized")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "sized::reject", Handler: func(context.Context, *engine.Request) (any, error) {
		return nil, wire.Errorf(wire.CodeInvalidPayload, "%s", strings.Repeat("r", 600))
	}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sizes := []int{1000, 1000, 3000, 1000, 10}
	for i, n := range sizes {
		if err := e.Enqueue(ctx, "sized", "sized::reject", map[string]any{"i": i, "pad": strings.Repeat("p", n)}); err != nil {
			t.Fatal(err)
		}
	}
	c := consume(t, e, "sized", fast()...)
	enginetest.Eventually(t, 5*time.Second, wantCount(len(sizes), func() int { return int(c.Counters().DeadLettered) }))

	nc := enginetest.Connect(t, ns)
	seen := map[int]bool{}
	var after uint64
	for page := 0; ; page++ {
		if page > len(sizes) {
			t.Fatalf("still paging after %d pages", page)
		}
		var dr queue.DeadLettersResponse
		if err := jsonReq(t, nc, "iii.fn.queue.dead_letters", fmt.Sprintf(`{"queue":"sized","after":%d}`, after), &dr); err != nil {
			t.Fatalf("page %d after %d: %v", page, after, err)
		}
		if len(dr.DeadLetters) == 0 {
			if dr.Truncated {
				t.Fatalf("page %d: empty and truncated", page)
			}
			break
		}
		for _, dl := range dr.DeadLetters {
			if dl.Sequence <= after {
				t.Fatalf("page %d: dead letter %d is not after %d", page, dl.Sequence, after)
			}
			after = dl.Sequence
			m, ok := dl.Data.(map[string]any)
			switch {
			case dl.DataOmitted && dl.Data == nil:
				seen[2] = true // the 3,000-byte one, listed without its data
			case ok:
				i := int(m["i"].(float64))
				if i == 2 || seen[i] {
					t.Fatalf("page %d: dead letter %d listed with data %v, seen %v", page, i, dl.DataOmitted, seen)
				}
				seen[i] = true
			default:
				t.Fatalf("page %d: dead letter %+v", page, dl)
			}
		}
		if !dr.Truncated {
			break
		}
	}
	if len(seen) != len(sizes) {
		t.Fatalf("listed %v of %d dead letters", seen, len(sizes))
	}
}

// TestServeRedriveFailurePartwayCountsWhatMoved: a queue::redrive that
// fails after moving some dead letters answers its error with what it
// moved (details redriven, skipped); the answer was the error alone, and
// the dead letters already moved were not reported.
func TestServeRedriveFailurePartwayCountsWhatMoved(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	// A queue stream that refuses a second message: the second publish
	// of the redrive fails.
	cfg := engine.QueueStreamConfig(1)
	cfg.MaxMsgs, cfg.Discard = 1, jetstream.DiscardNew
	if _, err := e.JetStream().CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Serve(ctx, e); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		m := nats.NewMsg("iii.dlq.part")
		m.Header.Set(wire.HeaderContentType, wire.JSON.ContentType())
		m.Header.Set(engine.HeaderFunctionID, "a::b")
		m.Data = []byte(`{}`)
		if _, err := e.JetStream().PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	nc := enginetest.Connect(t, ns)
	err := jsonReq(t, nc, "iii.fn.queue.redrive", `{"queue":"part"}`, nil)
	we := wire.From(err)
	if !errors.Is(err, wire.ErrUnavailable) || fmt.Sprint(we.Details["redriven"]) != "1" || fmt.Sprint(we.Details["skipped"]) != "0" {
		t.Fatalf("queue::redrive = %#v: want unavailable with details redriven 1, skipped 0", we)
	}
	if dls := deadLetters(t, e, "part"); len(dls) != 2 {
		t.Fatalf("%d dead letters left, want 2", len(dls))
	}
}
