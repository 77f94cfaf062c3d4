package orchestrator_test

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/scripted"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// A function's result is bounded before the model, the events and the
// transcript see it. Before, a result of a few hundred KiB made a turn
// record larger than the server's max payload: the record write failed
// at every try and the turn never ended.
func TestLargeResultCapped(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		opts  []orchestrator.Option
		calls int // parallel calls (0: one)
		size  int
		limit int // 0: not cut
	}{
		{name: "under the default bound", size: 50 << 10},
		{name: "over the default bound", size: 300 << 10, limit: orchestrator.DefaultMaxResultBytes},
		{name: "as large as the bus allows", size: 900 << 10, limit: orchestrator.DefaultMaxResultBytes},
		{name: "a bound of its own", opts: []orchestrator.Option{orchestrator.WithMaxResultBytes(2000)}, size: 10 << 10, limit: 2000},
		{name: "a batch shares the bound", calls: 4, size: 50 << 10, limit: orchestrator.DefaultMaxResultBytes / 4},
		{name: "a large batch keeps 2 KiB each", calls: 60, size: 10 << 10, limit: 2 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			s := startStack(t, ns, c.opts...)
			registerBig(t, s.e)
			sid := "big-" + strings.ReplaceAll(c.name, " ", "-")
			var res orchestrator.RunStartResult
			if err := s.e.Trigger(context.Background(), "run::start", agent.RunStart{
				SessionID: sid, Provider: "scripted", Model: "echo",
				Messages: []agent.Message{userText(strings.Repeat(`/call test::big {"n":`+strconv.Itoa(c.size)+`}`+"\n", max(c.calls, 1)))},
			}, &res); err != nil || !res.Started {
				t.Fatalf("run::start = %+v, %v", res, err)
			}
			evs := events(t, s.e, sid, 30*time.Second)
			if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
				t.Fatalf("agent_end %q: %v", last.StopReason, types(evs))
			}
			var got *agent.FunctionResult
			for _, ev := range evs {
				if ev.Type == agent.EventFunctionExecutionEnd {
					got = ev.Result
				}
			}
			if got == nil {
				t.Fatalf("no function_execution_end: %v", types(evs))
			}
			checkCapped(t, "the event's result", got.Content, got.Details, c.size, c.limit)
			// The transcript holds the same result.
			var msgs sessiontree.MessagesResponse
			if err := s.e.Trigger(context.Background(), sessiontree.MessagesFunction, sessiontree.ReadRequest{SessionID: sid}, &msgs); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, pm := range msgs.Messages {
				if m := pm.Message; m.Role == agent.RoleFunctionResult {
					checkCapped(t, "the transcript's result", m.Content, m.Details, c.size, c.limit)
					found = true
				}
			}
			if !found {
				t.Fatalf("no function result in the transcript")
			}
		})
	}
}

// registerBig serves test::big {n} on e: a text result of n bytes.
func registerBig(t *testing.T, e *engine.Engine) {
	t.Helper()
	w, err := e.Worker("big")
	if err != nil {
		t.Fatal(err)
	}
	type bigReq struct {
		N int `json:"n"`
	}
	if err := w.Register(engine.Function{ID: "test::big", Handler: engine.Typed(func(_ context.Context, r bigReq) (agent.FunctionResult, error) {
		return agent.TextResult(strings.Repeat("y", r.N)), nil
	})}); err != nil {
		t.Fatal(err)
	}
}

// checkCapped checks a result of size bytes of text cut to limit (0: not
// cut).
func checkCapped(t *testing.T, what string, content []agent.Content, details any, size, limit int) {
	t.Helper()
	text := ""
	for _, c := range content {
		text += c.Text
	}
	if limit == 0 {
		if len(text) != size {
			t.Fatalf("%s: %d bytes of text, want %d", what, len(text), size)
		}
		return
	}
	if len(text) > limit || !strings.Contains(text, "[result truncated by the harness: "+strconv.Itoa(size)+" bytes") {
		t.Fatalf("%s: %d bytes of text ending %q", what, len(text), text[max(len(text)-120, 0):])
	}
	b, _ := json.Marshal(details)
	var d agent.TruncatedDetails
	if err := json.Unmarshal(b, &d); err != nil || !d.Truncated || d.Bytes != size || d.Limit != limit {
		t.Fatalf("%s: details %s", what, b)
	}
}

// A checkpoint the store refuses for good fails the run, saying why,
// instead of failing the same way at every redelivery: a model answer over
// the session tree's entry limit, and calls whose results are each under
// the bound but together make a record too large for one message. The
// session takes its next run.
func TestRecordTooLargeFailsTheRun(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, model, prompt string
	}{
		// A user message too large for the transcript is refused by
		// run::start now (TestRunMessagesFitTheRecord).
		{"an answer too large for the transcript", "big", "write a lot"},
		{"results too large together", "echo", strings.Repeat(`/call test::big {"n":90000}`+"\n", 12)}, // under a bound set too high
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			s := startStackScripted(t, ns, allowAll, []scripted.Option{scripted.WithDeltaSize(64 << 10),
				scripted.WithScript("big", func(scripted.StreamRequest) (scripted.Reply, error) {
					return scripted.Reply{Text: strings.Repeat("w", 300<<10)}, nil
				})}, orchestrator.WithMaxResultBytes(1<<20))
			registerBig(t, s.e)
			sid := "toolarge-" + strings.ReplaceAll(c.name, " ", "-")
			start := func(model, text string) { startEcho(t, s.e, sid, model, text) }
			start(c.model, c.prompt)
			evs := events(t, s.e, sid, 30*time.Second)
			last, failed := evs[len(evs)-1], failure(evs)
			if last.StopReason != agent.StopError || failed == nil || !strings.Contains(failed.ErrorMessage, "could not be stored") {
				t.Fatalf("agent_end %q, failure %+v: %v", last.StopReason, failed, types(evs))
			}
			var view agent.TurnView
			if err := s.e.Trigger(context.Background(), "turn::get_state", orchestrator.SessionRequest{SessionID: sid}, &view); err != nil || view.State != agent.StateFailed {
				t.Fatalf("turn::get_state = %+v, %v", view, err)
			}
			// The next run of the session runs.
			start("echo", "hello again")
			evs = eventsUntil(t, s.e, sid, 2, 30*time.Second)
			if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
				t.Fatalf("the next run: agent_end %q: %v", last.StopReason, types(evs))
			}
		})
	}
}

// A model answer of markup (HTML, code with "<", ">" and "&") costs its
// own size in the turn record and the events, not six times that: a
// 150 KiB answer of tags ends its run normally.
func TestMarkupAnswerFits(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	markup := strings.Repeat("<p>a&b</p>", 15<<10) // 150 KiB, ×4.4 HTML-escaped
	s := startStackScripted(t, ns, allowAll, []scripted.Option{scripted.WithDeltaSize(64 << 10),
		scripted.WithScript("markup", func(scripted.StreamRequest) (scripted.Reply, error) {
			return scripted.Reply{Text: markup}, nil
		})})
	startEcho(t, s.e, "markup", "markup", "write the page")
	evs := events(t, s.e, "markup", 30*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd || failure(evs) != nil {
		t.Fatalf("agent_end %q, failure %+v: %v", last.StopReason, failure(evs), types(evs))
	}
	var answer string
	for _, ev := range evs {
		if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Role == agent.RoleAssistant {
			answer = ev.Message.Content[0].Text
		}
	}
	if answer != markup {
		t.Fatalf("the answer's event carries %d bytes, want the %d of the markup", len(answer), len(markup))
	}
}

// A model answer whose calls one turn record cannot hold (here on a
// server with a 64 KiB max payload): the answer cannot be written with
// its calls' start, so the run fails from the record before the answer —
// saying why, no call run — instead of from the answer, whose every call
// would need an end of its own and outgrow the record again (the grain
// halted at every redelivery). The session's next run runs.
func TestBatchTooLargeForTheRecordFailsTheRun(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(64<<10))
	// Fewer than MaxCallsPerAnswer, with arguments large enough together
	// that the answer does not fit the record.
	calls := make([]scripted.Call, orchestrator.MaxCallsPerAnswer-4)
	for i := range calls {
		calls[i] = scripted.Call{FunctionID: "test::big", Arguments: map[string]any{"n": i, "pad": strings.Repeat("x", 600)}}
	}
	s := startStackScripted(t, ns, allowAll, []scripted.Option{
		scripted.WithScript("many", func(scripted.StreamRequest) (scripted.Reply, error) {
			return scripted.Reply{Calls: calls}, nil
		})})
	var ran atomic.Int64
	w, err := s.e.Worker("big")
	if err != nil {
		t.Fatal(err)
	}
	type bigReq struct {
		N int `json:"n"`
	}
	if err := w.Register(engine.Function{ID: "test::big", Handler: engine.Typed(func(_ context.Context, r bigReq) (agent.FunctionResult, error) {
		ran.Add(1)
		return agent.TextResult("ok"), nil
	})}); err != nil {
		t.Fatal(err)
	}
	startEcho(t, s.e, "manycalls", "many", "do it all")
	evs := events(t, s.e, "manycalls", 30*time.Second)
	last, failed := evs[len(evs)-1], failure(evs)
	if last.StopReason != agent.StopError || failed == nil || !strings.Contains(failed.ErrorMessage, "could not be stored") {
		t.Fatalf("agent_end %q, failure %+v: %v", last.StopReason, failed, types(evs))
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d calls ran of an answer never recorded", n)
	}
	startEcho(t, s.e, "manycalls", "echo", "hello again")
	evs = eventsUntil(t, s.e, "manycalls", 2, 30*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
		t.Fatalf("the next run: agent_end %q: %v", last.StopReason, types(evs))
	}
}

// A msgpack function result with NaN or an infinity (JSON has neither)
// reaches the model, the events and the transcript with those numbers as
// strings. Before, the turn record holding it could not be written: the
// grain's activation failed and the call, which had run, read as
// "interrupted: outcome unknown".
func TestNonFiniteResult(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	w, err := s.e.Worker("nonfinite")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	if err := w.Register(engine.Function{ID: "test::result", Handler: engine.Typed(func(context.Context, struct{}) (agent.FunctionResult, error) {
		calls.Add(1)
		res := agent.TextResult("ok")
		res.Details = map[string]any{"nan": math.NaN(), "inf": []any{math.Inf(1), math.Inf(-1), 1.5}}
		return res, nil
	})}); err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "test::value", Handler: engine.Typed(func(context.Context, struct{}) (map[string]any, error) {
		calls.Add(1)
		return map[string]any{"ratio": math.NaN()}, nil
	})}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ fn, want string }{
		{"test::result", `{"inf":["Infinity","-Infinity",1.5],"nan":"NaN"}`},
		{"test::value", `{"ratio":"NaN"}`},
	} {
		sid := "nonfinite-" + strings.ReplaceAll(c.fn, ":", "")
		calls.Store(0)
		var res orchestrator.RunStartResult
		if err := s.e.Trigger(context.Background(), "run::start", agent.RunStart{
			SessionID: sid, Provider: "scripted", Model: "echo",
			Messages: []agent.Message{userText("/call " + c.fn + " {}")},
		}, &res); err != nil || !res.Started {
			t.Fatalf("run::start = %+v, %v", res, err)
		}
		evs := events(t, s.e, sid, 30*time.Second)
		if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
			t.Fatalf("%s: agent_end %q: %v", c.fn, last.StopReason, types(evs))
		}
		var got *agent.FunctionResult
		for _, ev := range evs {
			if ev.Type == agent.EventFunctionExecutionEnd {
				got = ev.Result
			}
		}
		if got == nil || got.IsError {
			t.Fatalf("%s: result %+v", c.fn, got)
		}
		if b, _ := json.Marshal(got.Details); string(b) != c.want {
			t.Errorf("%s: details %s, want %s", c.fn, b, c.want)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("%s: ran %d times", c.fn, n)
		}
	}
}
