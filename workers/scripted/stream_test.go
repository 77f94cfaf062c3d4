package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/scripted"
)

func TestEchoTextStreams(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	const text = "Hello, scripted world! ✓"
	res := stream(t, e, userReq("echo", text))
	if res.err != nil || !isEnd(res.end) {
		t.Fatalf("call err %v, stream end %v", res.err, res.end)
	}
	want := []agent.ModelEventType{agent.ModelStart, agent.ModelTextStart}
	for range res.events[2 : len(res.events)-4] {
		want = append(want, agent.ModelTextDelta)
	}
	want = append(want, agent.ModelTextEnd, agent.ModelUsage, agent.ModelStop, agent.ModelDone)
	if got := types(res.events); !slices.Equal(got, want) {
		t.Fatalf("event types %v, want %v", got, want)
	}
	got, n := deltas(res.events, agent.ModelTextDelta, 0)
	if got != text || n < 3 {
		t.Fatalf("deltas %q in %d events, want %q in several", got, n, text)
	}
	for _, ev := range res.events {
		if ev.Type == agent.ModelTextDelta && len(ev.Delta) > scripted.DefaultDeltaSize {
			t.Errorf("delta %q longer than %d bytes", ev.Delta, scripted.DefaultDeltaSize)
		}
	}
	usage := agent.Usage{InputTokens: int64((len(text) + 3) / 4), OutputTokens: int64((len(text) + 3) / 4)}
	wantMsg := agent.Message{
		Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(text)}, Timestamp: epoch.UnixMilli(),
		StopReason: agent.StopEnd, Usage: &usage, Model: "echo", Provider: "scripted",
	}
	done := last(res.events)
	if !reflect.DeepEqual(*done.Message, wantMsg) {
		t.Fatalf("done message %+v, want %+v", *done.Message, wantMsg)
	}
	if u := res.events[len(res.events)-3].Usage; *u != usage {
		t.Fatalf("usage event %+v, want %+v", *u, usage)
	}
	if res.events[len(res.events)-2].StopReason != agent.StopEnd || res.resp.StopReason != agent.StopEnd {
		t.Fatalf("stop %q, reply %+v", res.events[len(res.events)-2].StopReason, res.resp)
	}
	if start := res.events[0].Message; start == nil || start.Model != "echo" || start.Provider != "scripted" {
		t.Fatalf("start message %+v", start)
	}
}

func TestEchoParallelCalls(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	res := stream(t, e, userReq("echo", "looking\n/call a::b {\"x\":1}\n/call c::d"))
	if res.err != nil || !isEnd(res.end) {
		t.Fatalf("call err %v, stream end %v", res.err, res.end)
	}
	done := last(res.events)
	if done.Type != agent.ModelDone {
		t.Fatalf("last event %+v", done)
	}
	msg := done.Message
	if msg.StopReason != agent.StopFunctionCall || res.resp.StopReason != agent.StopFunctionCall {
		t.Fatalf("stop reason %q, reply %+v", msg.StopReason, res.resp)
	}
	if len(msg.Content) != 3 || msg.Content[0].Text != "looking" {
		t.Fatalf("content %+v", msg.Content)
	}
	calls := msg.FunctionCalls()
	if len(calls) != 2 || calls[0].FunctionID != "a::b" || calls[1].FunctionID != "c::d" {
		t.Fatalf("calls %+v", calls)
	}
	if calls[0].ID == calls[1].ID {
		t.Fatalf("calls share id %q", calls[0].ID)
	}
	for i, c := range calls {
		if err := subjects.ValidateID("call id", c.ID); err != nil {
			t.Errorf("call %d: %v", i, err)
		}
		index := i + 1
		args, n := deltas(res.events, agent.ModelFunctionCallDelta, index)
		wantArgs := []string{`{"x":1}`, `{}`}[i]
		if args != wantArgs || n == 0 {
			t.Errorf("call %d: argument deltas %q (%d), want %q", i, args, n, wantArgs)
		}
		var start, end *agent.ModelEvent
		for j := range res.events {
			ev := &res.events[j]
			if ev.Index != index {
				continue
			}
			switch ev.Type {
			case agent.ModelFunctionCallStart:
				start = ev
			case agent.ModelFunctionCallEnd:
				end = ev
			}
		}
		if start == nil || start.ID != c.ID || start.FunctionID != c.FunctionID {
			t.Errorf("call %d: start %+v", i, start)
		}
		if end == nil || end.Content.ID != c.ID || end.Content.FunctionID != c.FunctionID {
			t.Errorf("call %d: end %+v", i, end)
		}
	}
	if x, ok := calls[0].Arguments["x"]; !ok || fmt.Sprint(x) != "1" {
		t.Fatalf("arguments %+v", calls[0].Arguments)
	}
}

func TestEchoAnswersFunctionResults(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	req := userReq("echo", "/call shell::exec {\"cmd\":\"ls\"}\n/call fs::read {\"path\":\"/a\"}")
	first := stream(t, e, req)
	if first.err != nil {
		t.Fatal(first.err)
	}
	asst := *last(first.events).Message
	calls := asst.FunctionCalls()
	req.Messages = append(req.Messages, asst,
		agent.TextResult("a.txt\nb.txt").Message(calls[0].ID, calls[0].FunctionID, 2),
		agent.ErrorResult("no such file", nil).Message(calls[1].ID, calls[1].FunctionID, 3))
	second := stream(t, e, req)
	if second.err != nil || !isEnd(second.end) {
		t.Fatalf("call err %v, end %v", second.err, second.end)
	}
	msg := last(second.events).Message
	want := "function shell::exec returned: a.txt\nb.txt\nfunction fs::read returned an error: no such file"
	if msg.StopReason != agent.StopEnd || len(msg.Content) != 1 || msg.Content[0].Text != want {
		t.Fatalf("answer %+v, want text %q and stop end", msg, want)
	}
	if calls := msg.FunctionCalls(); calls != nil {
		t.Fatalf("the answer re-issues calls: %+v", calls)
	}
}

func TestEchoFail(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	for _, kind := range []agent.ErrorKind{agent.ErrorAuthExpired, agent.ErrorRateLimited, agent.ErrorContextOverflow, agent.ErrorTransient, agent.ErrorPermanent} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			res := stream(t, e, userReq("echo", "/fail "+string(kind)))
			if res.err != nil || !isEnd(res.end) {
				t.Fatalf("call err %v, stream end %v", res.err, res.end)
			}
			if len(res.events) != 1 || res.events[0].Type != agent.ModelError || res.events[0].Kind != kind || res.events[0].Error == "" {
				t.Fatalf("events %+v, want one error of kind %s", res.events, kind)
			}
			if res.resp != (scripted.StreamResponse{StopReason: agent.StopError, Kind: kind}) {
				t.Fatalf("reply %+v", res.resp)
			}
		})
	}
	t.Run("after partial text", func(t *testing.T) {
		t.Parallel()
		res := stream(t, e, userReq("echo", "half an answer\n/fail transient upstream reset"))
		if res.err != nil || !isEnd(res.end) {
			t.Fatalf("call err %v, stream end %v", res.err, res.end)
		}
		ev := last(res.events)
		if ev.Type != agent.ModelError || ev.Kind != agent.ErrorTransient || ev.Error != "upstream reset" {
			t.Fatalf("last event %+v", ev)
		}
		if ev.Message == nil || ev.Message.StopReason != agent.StopError || textOfMsg(ev.Message) != "half an answer" {
			t.Fatalf("partial message %+v", ev.Message)
		}
		if got, _ := deltas(res.events, agent.ModelTextDelta, 0); got != "half an answer" {
			t.Fatalf("deltas %q", got)
		}
	})
	t.Run("malformed command", func(t *testing.T) {
		t.Parallel()
		res := stream(t, e, userReq("echo", "/call a::b [1,2]"))
		ev := last(res.events)
		if res.err != nil || ev.Type != agent.ModelError || ev.Kind != agent.ErrorPermanent || !strings.Contains(ev.Error, "line 1") {
			t.Fatalf("err %v, events %+v", res.err, res.events)
		}
	})
}

func textOfMsg(m *agent.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func TestEchoSleepDelaysFirstToken(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	start := time.Now()
	var first time.Duration
	res := streamWith(t, e, userReq("echo", "/sleep 200\nhi"), func(_ *channel.Reader, ev agent.ModelEvent) {
		if ev.Type == agent.ModelTextDelta && first == 0 {
			first = time.Since(start)
		}
	})
	if res.err != nil || !isEnd(res.end) {
		t.Fatalf("call err %v, stream end %v", res.err, res.end)
	}
	if first < 200*time.Millisecond {
		t.Fatalf("first token after %v, want ≥ 200ms", first)
	}
	if got, _ := deltas(res.events, agent.ModelTextDelta, 0); got != "hi" {
		t.Fatalf("answer %q", got)
	}
}

// TestEchoSleepLongerThanTheChannelIdle: /sleep is a model thinking,
// which the channel's idle timeout does not count on either side (a real
// provider marks its API's silence busy the same way), so a sleep longer
// than the reader's idle timeout still ends in the answer.
func TestEchoSleepLongerThanTheChannelIdle(t *testing.T) {
	t.Parallel()
	enginetest.BusAndLocal(t, func(t *testing.T, local bool) {
		e, _, _ := setupWith(t, local)
		const idle = 300 * time.Millisecond
		start := time.Now()
		res := streamWith(t, e, userReq("echo", "/sleep 1200\nhi"), nil, channel.WithIdleTimeout(idle))
		if res.err != nil || !isEnd(res.end) {
			t.Fatalf("call err %v, stream end %v; want the answer after the sleep", res.err, res.end)
		}
		if took := time.Since(start); took < 1200*time.Millisecond {
			t.Fatalf("answered after %v, before the sleep's end", took)
		}
		if got, _ := deltas(res.events, agent.ModelTextDelta, 0); got != "hi" {
			t.Fatalf("answer %q", got)
		}
	})
}

func TestReaderCloseStopsStream(t *testing.T) {
	t.Parallel()
	enginetest.BusAndLocal(t, func(t *testing.T, local bool) {
		long := strings.Repeat("0123456789abcdef", 500) // 1,000 deltas of 8 bytes
		e, _, _ := setupWith(t, local,
			scripted.WithScript("paced", scripted.Sequence(scripted.Reply{Text: long, Pace: 5 * time.Millisecond})),
			scripted.WithScript("fast", scripted.Sequence(scripted.Reply{Text: long})))
		tests := []struct {
			name, model, text string
			closeAt           agent.ModelEventType
		}{
			{"during pacing", "paced", "x", agent.ModelTextDelta},
			{"during a sleep", "echo", "/sleep 60000\nnever", agent.ModelStart},
			{"while waiting for credit", "fast", "x", agent.ModelTextDelta},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				var closed time.Time
				seen := 0
				res := streamWith(t, e, userReq(tt.model, tt.text), func(r *channel.Reader, ev agent.ModelEvent) {
					if ev.Type == tt.closeAt {
						if seen++; seen == 3 || tt.closeAt == agent.ModelStart {
							closed = time.Now()
							_ = r.Close()
						}
					}
				})
				if closed.IsZero() {
					t.Fatal("the reader never closed")
				}
				if elapsed := time.Since(closed); elapsed > 2*time.Second {
					t.Fatalf("the provider stopped %v after the reader closed", elapsed)
				}
				if !errors.Is(res.err, wire.ErrCanceled) {
					t.Fatalf("call error %v, want canceled", res.err)
				}
				if !errors.Is(res.end, channel.ErrClosed) {
					t.Fatalf("stream end %v, want ErrClosed", res.end)
				}
			})
		}
	})
}

func TestBadRequestWritesNothing(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	// Every frame of every channel lands here.
	sub, err := e.Conn().SubscribeSync(subjects.ChannelSubjectPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	msgs := []agent.Message{agent.UserText("hi", 1)}
	valid := func() map[string]any {
		return map[string]any{"channel": "c1", "model": "echo", "messages": msgs}
	}
	with := func(k string, v any) map[string]any {
		m := valid()
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name  string
		req   any
		raw   []byte
		codec wire.Codec
	}{
		{name: "missing channel", req: with("channel", nil)},
		{name: "channel with dot", req: with("channel", "a.b")},
		{name: "channel with star", req: with("channel", "a*")},
		{name: "channel with gt", req: with("channel", "a>")},
		{name: "channel with space", req: with("channel", "a b")},
		{name: "channel too long", req: with("channel", strings.Repeat("c", 129))},
		{name: "missing model", req: with("model", nil)},
		{name: "unknown model", req: with("model", "gpt-9")},
		{name: "no messages", req: with("messages", nil)},
		{name: "empty messages", req: with("messages", []agent.Message{})},
		{name: "unknown role", req: with("messages", []map[string]any{{"role": "system", "content": []any{}}})},
		{name: "user without content", req: with("messages", []map[string]any{{"role": "user"}})},
		{name: "negative max tokens", req: with("max_tokens", -1)},
		{name: "tools not a list", req: with("tools", "fs::read")},
		{name: "messages not a list", req: with("messages", "hi")},
		{name: "garbage json", raw: []byte("{not json"), codec: wire.JSON},
		{name: "json array", raw: []byte(`[1,2]`), codec: wire.JSON},
		{name: "garbage msgpack", raw: []byte{0xc1, 0xff}, codec: wire.Msgpack},
		{name: "empty body", raw: []byte{}, codec: wire.JSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			var err error
			if tt.raw != nil {
				_, _, err = e.TriggerRaw(ctx, scripted.StreamFunction, tt.raw, tt.codec)
			} else {
				err = e.Trigger(ctx, scripted.StreamFunction, tt.req, nil)
			}
			if !errors.Is(err, wire.ErrInvalidPayload) {
				t.Fatalf("error %v, want invalid_payload", err)
			}
		})
	}
	t.Cleanup(func() {
		// Frames would have reached this connection before the replies.
		if n, _, _ := sub.Pending(); n != 0 {
			m, _ := sub.NextMsg(0)
			t.Errorf("%d channel messages written, first on %s", n, m.Subject)
		}
	})
}

func TestComplete(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	call := func(text string) (scripted.CompleteResponse, error) {
		return engine.Call[scripted.CompleteResponse](ctx, e, scripted.CompleteFunction,
			scripted.CompleteRequest{Model: "echo", Messages: []agent.Message{agent.UserText(text, 1)}})
	}
	resp, err := call("plain answer")
	if err != nil || resp.Message.StopReason != agent.StopEnd || textOfMsg(&resp.Message) != "plain answer" ||
		resp.Message.Provider != "scripted" || resp.Message.Timestamp != epoch.UnixMilli() || resp.Message.Usage == nil {
		t.Fatalf("complete = %+v, %v", resp, err)
	}
	resp, err = call("/call a::b {\"x\":1}\n/call c::d")
	if err != nil || resp.Message.StopReason != agent.StopFunctionCall || len(resp.Message.FunctionCalls()) != 2 {
		t.Fatalf("complete = %+v, %v", resp, err)
	}
	for _, tt := range []struct {
		kind agent.ErrorKind
		code *wire.Error
	}{
		{agent.ErrorRateLimited, wire.ErrUnavailable},
		{agent.ErrorTransient, wire.ErrUnavailable},
		{agent.ErrorAuthExpired, wire.ErrForbidden},
		{agent.ErrorContextOverflow, wire.ErrInvalidPayload},
		{agent.ErrorPermanent, wire.ErrInternal},
	} {
		_, err := call("/fail " + string(tt.kind))
		var werr *wire.Error
		if !errors.Is(err, tt.code) || !errors.As(err, &werr) || werr.Details["kind"] != string(tt.kind) {
			t.Errorf("/fail %s: error %v (details %v), want %s with kind", tt.kind, err, werr, tt.code.Code)
		}
	}
	_, err = engine.Call[scripted.CompleteResponse](ctx, e, scripted.CompleteFunction, scripted.CompleteRequest{Model: "nope", Messages: []agent.Message{agent.UserText("x", 1)}})
	if !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("unknown model: %v", err)
	}
}

// TestJSONWithoutContentType calls both functions as `nats req` does: a
// JSON body and no Content-Type header.
func TestJSONWithoutContentType(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	nc := e.Conn()

	subj := subjects.MustFunctionSubject(scripted.CompleteFunction)
	m, err := nc.RequestWithContext(ctx, subj, []byte(`{"model":"echo","messages":[{"role":"user","content":[{"type":"text","text":"/call fs::read {\"path\":\"/a\"}"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if werr := wire.Decode(m); werr != nil {
		t.Fatal(werr)
	}
	var resp scripted.CompleteResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		t.Fatalf("reply %q is not JSON: %v", m.Data, err)
	}
	if calls := resp.Message.FunctionCalls(); len(calls) != 1 || calls[0].Arguments["path"] != "/a" {
		t.Fatalf("reply %s", m.Data)
	}

	r, err := channel.Open(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	body := fmt.Sprintf(`{"channel":%q,"model":"echo","messages":[{"role":"user","content":[{"type":"text","text":"json please"}]}]}`, r.ID())
	replies := make(chan *nats.Msg, 1)
	go func() {
		m, _ := nc.RequestWithContext(ctx, subjects.MustFunctionSubject(scripted.StreamFunction), []byte(body))
		replies <- m
	}()
	var text string
	for {
		f, err := r.Next(ctx)
		if isEnd(err) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Codec != wire.JSON {
			t.Fatalf("frame %d in %s, want JSON for a JSON caller", f.Seq, f.Codec.ContentType())
		}
		var ev agent.ModelEvent
		if err := json.Unmarshal(f.Data, &ev); err != nil {
			t.Fatal(err)
		}
		text += ev.Delta
	}
	if text != "json please" {
		t.Fatalf("streamed %q", text)
	}
	m = <-replies
	if m == nil || wire.Decode(m) != nil || string(m.Data) != `{"stop_reason":"end"}` {
		t.Fatalf("stream reply %v", m)
	}
}

func TestStreamIsDeterministic(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	req := userReq("echo", "/think hm\nsome text\n/call a::b {\"k\":[1,\"two\"]}\n/call c::d")
	a, b := stream(t, e, req), stream(t, e, req)
	if a.err != nil || b.err != nil {
		t.Fatal(a.err, b.err)
	}
	if !reflect.DeepEqual(a.events, b.events) {
		t.Fatalf("two runs differ:\n%+v\n%+v", a.events, b.events)
	}
	for i := range a.frames {
		if string(a.frames[i].Data) != string(b.frames[i].Data) {
			t.Fatalf("frame %d differs", i+1)
		}
	}
	if got := types(a.events)[:5]; !slices.Equal(got, []agent.ModelEventType{agent.ModelStart, agent.ModelThinkingStart, agent.ModelThinkingDelta, agent.ModelThinkingEnd, agent.ModelTextStart}) {
		t.Fatalf("first events %v", got)
	}
}

// TestScriptedConversation plays a scripted model through three model
// calls of one session, as the turn loop would.
func TestScriptedConversation(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t, scripted.WithScript("two-step", scripted.Sequence(
		scripted.Reply{Thinking: "I should read it", Calls: []scripted.Call{{FunctionID: "fs::read", Arguments: map[string]any{"path": "/a"}}}},
		scripted.Reply{Text: "the file says hi"},
	)))
	req := userReq("two-step", "what is in /a?")
	res := stream(t, e, req)
	if res.err != nil || res.resp.StopReason != agent.StopFunctionCall {
		t.Fatalf("turn 1: %+v %v", res.resp, res.err)
	}
	asst := *last(res.events).Message
	call := asst.FunctionCalls()[0]
	req.Messages = append(req.Messages, asst, agent.TextResult("hi").Message(call.ID, call.FunctionID, 2))
	res = stream(t, e, req)
	if res.err != nil || res.resp.StopReason != agent.StopEnd || textOfMsg(last(res.events).Message) != "the file says hi" {
		t.Fatalf("turn 2: %+v %v", res.events, res.err)
	}
	req.Messages = append(req.Messages, *last(res.events).Message, agent.UserText("and then?", 3))
	res = stream(t, e, req)
	if ev := last(res.events); res.err != nil || ev.Type != agent.ModelError || ev.Kind != agent.ErrorPermanent ||
		!strings.Contains(ev.Error, "exhausted") {
		t.Fatalf("turn 3: %+v %v", res.events, res.err)
	}
}

func TestWorkerCloseEndsStreamsInFlight(t *testing.T) {
	t.Parallel()
	e, w, _ := setup(t)
	var closeErr error
	var took time.Duration
	res := streamWith(t, e, userReq("echo", "/sleep 60000\nnever"), func(_ *channel.Reader, ev agent.ModelEvent) {
		if ev.Type == agent.ModelStart {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			closeErr = w.Close(ctx)
			took = time.Since(start)
		}
	})
	if closeErr != nil || took > 2*time.Second {
		t.Fatalf("Close = %v after %v", closeErr, took)
	}
	if !errors.Is(res.end, channel.ErrWriterFailed) || !errors.Is(res.end, wire.ErrUnavailable) {
		t.Fatalf("stream end %v, want the writer's unavailable", res.end)
	}
	if !errors.Is(res.err, wire.ErrUnavailable) {
		t.Fatalf("call error %v, want unavailable", res.err)
	}
}

func TestStreamWithoutReader(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	for _, text := range []string{"nobody reads this", "/sleep 60000\nnor this"} {
		start := time.Now()
		req := userReq("echo", text)
		req.Channel = "nobody-opened-this"
		err := e.Trigger(t.Context(), scripted.StreamFunction, req, nil)
		if !errors.Is(err, wire.ErrCanceled) || time.Since(start) > 2*time.Second {
			t.Fatalf("%q: error %v after %v, want canceled at once", text, err, time.Since(start))
		}
	}
}

// With event_batches the events ready together share a frame (an array of
// events); a delay splits them. The events are the same as without.
func TestEventBatches(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	read := func(req scripted.StreamRequest) (evs []agent.ModelEvent, frames int) {
		r, err := channel.Open(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		req.Channel = r.ID()
		go func() { _, _ = engine.Call[scripted.StreamResponse](ctx, e, scripted.StreamFunction, req) }()
		for {
			f, err := r.Next(ctx)
			if err != nil {
				if !isEnd(err) {
					t.Fatal(err)
				}
				return evs, frames
			}
			frames++
			var batch []agent.ModelEvent
			if err := f.Decode(&batch); err != nil {
				var ev agent.ModelEvent
				if err := f.Decode(&ev); err != nil {
					t.Fatalf("frame %d decodes as neither: %v", f.Seq, err)
				}
				batch = []agent.ModelEvent{ev}
			}
			evs = append(evs, batch...)
		}
	}
	req := userReq("echo", "/sleep 50\nHello, batched world!")
	single, n1 := read(req)
	req.EventBatches = true
	batched, n2 := read(req)
	if !reflect.DeepEqual(single, batched) {
		t.Fatalf("batched events differ:\n%+v\n%+v", batched, single)
	}
	if n1 != len(single) || n2 != 2 {
		t.Fatalf("%d frames for %d events without batches, %d with (want one per event, then 2: start, the delay, the rest)", n1, len(single), n2)
	}
}
