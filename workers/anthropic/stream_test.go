package anthropic_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/anthropic"
)

// weatherTools are the tools the recorded tool streams call.
var weatherTools = []agent.Tool{
	{FunctionID: "weather::get", Description: "Get the current weather in a given location", InputSchema: map[string]any{
		"type": "object", "properties": map[string]any{"location": map[string]any{"type": "string"}, "unit": map[string]any{"enum": []any{"celsius", "fahrenheit"}}},
		"required": []any{"location"},
	}},
	{FunctionID: "clock::now", Description: "The current time"},
}

// TestStreamGolden replays recorded Messages API streams and compares the
// model events and the reply with the golden files.
func TestStreamGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		tools []agent.Tool
		stop  agent.StopReason
		kind  agent.ErrorKind
	}{
		{name: "text", stop: agent.StopEnd},
		{name: "tools", tools: weatherTools, stop: agent.StopFunctionCall},
		{name: "thinking", stop: agent.StopEnd},
		{name: "thinking_tools", tools: weatherTools, stop: agent.StopFunctionCall},
		{name: "cache", stop: agent.StopEnd},
		{name: "refusal", stop: agent.StopEnd},
		{name: "max_tokens", stop: agent.StopLength},
		{name: "skipped", stop: agent.StopEnd},
		{name: "error", stop: agent.StopError, kind: agent.ErrorTransient},
		{name: "bad_input", tools: weatherTools, stop: agent.StopError, kind: agent.ErrorPermanent},
		// max_tokens cut a call's input short: the call is dropped, the
		// answer stops with length and keeps its output tokens.
		{name: "max_tokens_tool", tools: weatherTools, stop: agent.StopLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, ok(sse(t, tc.name)))
			// One event per delta of the API, so the frames are the same on
			// every run.
			en := setup(t, api, config{opts: []anthropic.Option{anthropic.WithCoalesce(0)}})
			req := userReq("Hello")
			req.Tools = tc.tools
			res := en.stream(t, req, nil)
			if res.err != nil || !isEnd(res.end) {
				t.Fatalf("call err %v, stream end %v", res.err, res.end)
			}
			if res.Reply.StopReason != tc.stop || res.Reply.Kind != tc.kind {
				t.Fatalf("reply %+v, want stop %q kind %q", res.Reply, tc.stop, tc.kind)
			}
			if n := len(api.received()); n != 1 {
				t.Fatalf("%d requests, want 1 (no retry once events went out)", n)
			}
			golden(t, "stream_"+tc.name, res)
		})
	}
}

func TestStreamTextEvents(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, ok(sse(t, "text")))
	en := setup(t, api, config{opts: []anthropic.Option{anthropic.WithCoalesce(0)}})
	res := en.stream(t, userReq("Hello"), nil)
	want := []agent.ModelEventType{
		agent.ModelStart, agent.ModelUsage, agent.ModelTextStart, agent.ModelTextDelta, agent.ModelTextDelta,
		agent.ModelTextEnd, agent.ModelUsage, agent.ModelStop, agent.ModelDone,
	}
	if got := types(res.Events); !slices.Equal(got, want) {
		t.Fatalf("event types %v, want %v", got, want)
	}
	done := last(res.Events).Message
	usage := agent.Usage{InputTokens: 25, OutputTokens: 15}
	if done.Content[0].Text != "Hello!" || done.StopReason != agent.StopEnd || *done.Usage != usage ||
		done.Model != "claude-opus-4-20250514" || done.Provider != "anthropic" || done.Timestamp != epoch.UnixMilli() {
		t.Fatalf("done message %+v (usage %+v)", done, done.Usage)
	}
}

func TestStreamParallelCalls(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, ok(sse(t, "tools")))
	en := setup(t, api, config{})
	req := userReq("What's the weather and the time in SF?")
	req.Tools = weatherTools
	res := en.stream(t, req, nil)
	calls := last(res.Events).Message.FunctionCalls()
	want := []agent.FunctionCall{
		{ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", FunctionID: "weather::get", Arguments: map[string]any{"location": "San Francisco, CA", "unit": "fahrenheit"}},
		{ID: "toolu_01HxsNKDxWvhRCeJvTWdXJ1F", FunctionID: "clock::now", Arguments: map[string]any{}},
	}
	if len(calls) != 2 || calls[0].ID != want[0].ID || calls[0].FunctionID != want[0].FunctionID ||
		calls[0].Arguments["location"] != "San Francisco, CA" || calls[1].FunctionID != want[1].FunctionID || len(calls[1].Arguments) != 0 {
		t.Fatalf("calls %+v, want %+v", calls, want)
	}
	var starts, ends []agent.ModelEvent
	var args strings.Builder
	for _, ev := range res.Events {
		switch ev.Type {
		case agent.ModelFunctionCallStart:
			starts = append(starts, ev)
		case agent.ModelFunctionCallEnd:
			ends = append(ends, ev)
		case agent.ModelFunctionCallDelta:
			if ev.Index == 1 {
				args.WriteString(ev.Delta)
			}
		}
	}
	if len(starts) != 2 || starts[0].Index != 1 || starts[0].FunctionID != "weather::get" || starts[1].Index != 2 || starts[1].ID != want[1].ID {
		t.Fatalf("functioncall_start events %+v", starts)
	}
	if len(ends) != 2 || ends[1].Content.FunctionID != "clock::now" {
		t.Fatalf("functioncall_end events %+v", ends)
	}
	if args.String() != `{"location": "San Francisco, CA", "unit": "fahrenheit"}` {
		t.Fatalf("argument deltas %q", args.String())
	}
}

func TestStreamErrorCarriesPartial(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, ok(sse(t, "error")))
	en := setup(t, api, config{})
	res := en.stream(t, userReq("Hello"), nil)
	ev := last(res.Events)
	if ev.Type != agent.ModelError || ev.Kind != agent.ErrorTransient || !strings.Contains(ev.Error, "overloaded_error") {
		t.Fatalf("last event %+v", ev)
	}
	if ev.Message == nil || ev.Message.StopReason != agent.StopError || len(ev.Message.Content) != 1 || ev.Message.Content[0].Text != "Hello" {
		t.Fatalf("partial %+v", ev.Message)
	}
	if err := ev.Message.Validate(); err != nil {
		t.Fatalf("partial does not validate: %v", err)
	}
}

func TestRateLimitRetryAfterThenSuccess(t *testing.T) {
	t.Parallel()
	limited := apiError(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")
	limited.header = map[string]string{"retry-after-ms": "150", "Retry-After": "1"}
	api := newFakeAPI(t, limited, ok(sse(t, "text")))
	en := setup(t, api, config{})
	res := en.stream(t, userReq("Hello"), nil)
	if res.Reply.StopReason != agent.StopEnd || last(res.Events).Type != agent.ModelDone {
		t.Fatalf("reply %+v, last event %+v", res.Reply, last(res.Events))
	}
	got := api.received()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	if gap := got[1].at.Sub(got[0].at); gap < 150*time.Millisecond {
		t.Fatalf("retried after %v, want ≥ 150ms (retry-after-ms)", gap)
	}
	if res.Events[0].Type != agent.ModelStart {
		t.Fatalf("the failed attempt leaked events: %v", types(res.Events))
	}
}

func TestRateLimitHintTooLongIsNotWaited(t *testing.T) {
	t.Parallel()
	limited := apiError(429, "rate_limit_error", "slow down")
	limited.header = map[string]string{"Retry-After": "120"}
	api := newFakeAPI(t, limited)
	en := setup(t, api, config{})
	res := en.stream(t, userReq("Hello"), nil)
	ev := last(res.Events)
	if len(res.Events) != 1 || ev.Type != agent.ModelError || ev.Kind != agent.ErrorRateLimited || ev.RetryAfterMs != 120_000 || ev.Message != nil {
		t.Fatalf("events %+v", res.Events)
	}
	if n := len(api.received()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

func TestTransientRetriesExhausted(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, apiError(529, "overloaded_error", "Overloaded"))
	en := setup(t, api, config{})
	res := en.stream(t, userReq("Hello"), nil)
	if len(res.Events) != 1 || res.Events[0].Type != agent.ModelError || res.Events[0].Kind != agent.ErrorTransient {
		t.Fatalf("events %+v", res.Events)
	}
	if !strings.Contains(res.Events[0].Error, "529") {
		t.Fatalf("error text %q", res.Events[0].Error)
	}
	if n := len(api.received()); n != 1+anthropic.DefaultMaxRetries {
		t.Fatalf("%d requests, want %d", n, 1+anthropic.DefaultMaxRetries)
	}
	if res.Reply != (anthropic.StreamResponse{StopReason: agent.StopError, Kind: agent.ErrorTransient}) {
		t.Fatalf("reply %+v", res.Reply)
	}
}

// TestUnauthorizedDropsCredential: a 401 is auth_expired and drops the
// credential, so the next call asks auth again. A 401 to a credential just
// fetched is not retried; one to a cached credential asks auth once more
// and is retried only when auth has another key, once.
func TestUnauthorizedDropsCredential(t *testing.T) {
	t.Parallel()
	const other = "sk-ant-api03-ROTATED-OTHERKEY-fedcba9876543210"
	// step is one stream call: accept and key, when set, are the key the
	// API takes and the one auth hands out from then on; requests and
	// auth count the API's requests and the auth calls so far.
	type step struct {
		accept, key    string
		ok             bool
		requests, auth int
	}
	cases := []struct {
		name   string
		script []response
		steps  []step
	}{
		{"fresh credential", []response{apiError(401, "authentication_error", "invalid x-api-key"), ok(sse(t, "text"))}, []step{
			{ok: false, requests: 1, auth: 1}, // no retry on 401
			{ok: true, requests: 2, auth: 2},  // dropped: auth asked again within the TTL
		}},
		{"cached credential, auth has the same", []response{ok(sse(t, "text")), apiError(401, "authentication_error", "invalid x-api-key"), ok(sse(t, "text"))}, []step{
			{ok: true, requests: 1, auth: 1},
			{ok: false, requests: 2, auth: 2}, // auth asked again, same key: no retry
			{ok: true, requests: 3, auth: 3},  // dropped all the same
		}},
		{"cached credential, the new one refused too", []response{ok(sse(t, "text"))}, []step{
			{ok: true, requests: 1, auth: 1},
			{accept: "sk-ant-api03-NEITHER-0123456789", key: other, ok: false, requests: 3, auth: 2}, // one retry, with the new key
			{accept: other, ok: true, requests: 4, auth: 3},                                          // the new key was dropped too
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tc.script...)
			en := setup(t, api, config{})
			for i, s := range tc.steps {
				if s.accept != "" {
					api.acceptOnly(s.accept)
				}
				if s.key != "" {
					en.auth.set(&agent.Credential{Type: agent.CredentialAPIKey, Key: s.key})
				}
				res := en.stream(t, userReq("Hello"), nil)
				if s.ok && res.Reply.StopReason != agent.StopEnd {
					t.Fatalf("call %d: reply %+v, events %+v", i+1, res.Reply, res.Events)
				}
				if !s.ok && (len(res.Events) != 1 || res.Events[0].Kind != agent.ErrorAuthExpired) {
					t.Fatalf("call %d: events %+v", i+1, res.Events)
				}
				if n := len(api.received()); n != s.requests {
					t.Fatalf("call %d: %d requests in all, want %d", i+1, n, s.requests)
				}
				if n := en.auth.count(); n != s.auth {
					t.Fatalf("call %d: auth asked %d times in all, want %d", i+1, n, s.auth)
				}
			}
			for _, key := range []string{testKey, other} {
				if strings.Contains(en.logs.String(), key) {
					t.Fatalf("a key leaked into the logs:\n%s", en.logs.String())
				}
			}
		})
	}
}

// TestRotatedKeyRetried: the operator replaces the key with auth::set_token
// and revokes the old one while the provider still holds the old one in
// its cache. The next call gets a 401, asks auth again, and is retried
// once with the new key: it succeeds (with max_retries 0: this is not a
// retry of a failing API), and no key reaches an event, a reply or a log
// line. The new key is cached from then on.
func TestRotatedKeyRetried(t *testing.T) {
	t.Parallel()
	const rotated = "sk-ant-api03-ROTATED-NEWKEY-fedcba9876543210"
	for _, fn := range []string{"stream", "complete", "models"} {
		t.Run(fn, func(t *testing.T) {
			t.Parallel()
			answer := ok(sse(t, "text"))
			if fn == "models" {
				answer = response{status: 200, body: modelsPage("claude-sonnet-4-5", false)}
			}
			api := newFakeAPI(t, answer)
			en := setup(t, api, config{opts: []anthropic.Option{anthropic.WithMaxRetries(0)}})
			var seen strings.Builder
			call := func(n int) {
				t.Helper()
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				var err error
				switch fn {
				case "stream":
					res := en.stream(t, userReq("Hello"), nil)
					b, _ := json.Marshal(res)
					seen.Write(b)
					if res.Reply.StopReason != agent.StopEnd || res.Events[0].Type != agent.ModelStart || last(res.Events).Type != agent.ModelDone {
						t.Fatalf("call %d: reply %+v, events %v", n, res.Reply, types(res.Events))
					}
				case "complete":
					var resp anthropic.CompleteResponse
					resp, err = engine.Call[anthropic.CompleteResponse](ctx, en.e, anthropic.CompleteFunction, anthropic.CompleteRequest(userReq("Hello")))
					b, _ := json.Marshal(resp)
					seen.Write(b)
				case "models":
					var resp anthropic.ModelsResponse
					resp, err = engine.Call[anthropic.ModelsResponse](ctx, en.e, anthropic.ModelsFunction, struct{}{})
					b, _ := json.Marshal(resp)
					seen.Write(b)
				}
				if err != nil {
					t.Fatalf("call %d: %v", n, err)
				}
			}
			call(1)
			if n := en.auth.count(); n != 1 {
				t.Fatalf("auth asked %d times, want 1", n)
			}
			// The rotation: A is revoked, B stored; A is still cached.
			api.acceptOnly(rotated)
			en.auth.set(&agent.Credential{Type: agent.CredentialAPIKey, Key: rotated})
			call(2)
			got := api.received()
			if len(got) != 3 {
				t.Fatalf("%d requests, want 3 (one retry after the 401)", len(got))
			}
			for i, want := range []string{testKey, testKey, rotated} {
				if k := got[i].header.Get("X-Api-Key"); k != want {
					t.Fatalf("request %d went with key %q, want %q", i+1, k, want)
				}
			}
			if n := en.auth.count(); n != 2 {
				t.Fatalf("auth asked %d times, want 2 (once after the 401)", n)
			}
			call(3)
			if n, k := len(api.received()), api.received()[3].header.Get("X-Api-Key"); n != 4 || k != rotated || en.auth.count() != 2 {
				t.Fatalf("third call: %d requests, key %q, %d auth calls: the new key is not cached", n, k, en.auth.count())
			}
			logs := en.logs.String()
			if !strings.Contains(logs, "refused the cached credential") {
				t.Errorf("the retry is not logged:\n%s", logs)
			}
			seen.WriteString(logs)
			for _, key := range []string{testKey, rotated} {
				if strings.Contains(seen.String(), key) {
					t.Fatalf("a key leaked:\n%s", seen.String())
				}
			}
		})
	}
}

func TestContextOverflow(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, apiError(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"))
	en := setup(t, api, config{})
	res := en.stream(t, userReq("Hello"), nil)
	if len(res.Events) != 1 || res.Events[0].Kind != agent.ErrorContextOverflow {
		t.Fatalf("events %+v", res.Events)
	}
}

func TestDroppedBeforeFirstEventIsRetried(t *testing.T) {
	t.Parallel()
	body := sse(t, "text")
	// Headers, then the connection drops inside the first event.
	api := newFakeAPI(t, response{status: 200, body: body, cut: 40}, ok(body))
	en := setup(t, api, config{})
	res := en.stream(t, userReq("Hello"), nil)
	if res.Reply.StopReason != agent.StopEnd || last(res.Events).Message.Content[0].Text != "Hello!" {
		t.Fatalf("reply %+v, events %v", res.Reply, types(res.Events))
	}
	if n := len(api.received()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

func TestDroppedMidStreamEndsWithPartial(t *testing.T) {
	t.Parallel()
	body := sse(t, "tools")
	cut := strings.Index(body, `" Francisc"`) // inside the first call's input
	api := newFakeAPI(t, response{status: 200, body: body, cut: cut})
	en := setup(t, api, config{})
	req := userReq("weather?")
	req.Tools = weatherTools
	res := en.stream(t, req, nil)
	ev := last(res.Events)
	if ev.Type != agent.ModelError || ev.Kind != agent.ErrorTransient {
		t.Fatalf("last event %+v", ev)
	}
	// The text block finished; the call whose input did not is left out.
	if ev.Message == nil || len(ev.Message.Content) != 1 || ev.Message.Content[0].Text != "Okay, let's check the weather and the time:" {
		t.Fatalf("partial %+v", ev.Message)
	}
	if n := len(api.received()); n != 1 {
		t.Fatalf("%d requests, want 1 (events went out)", n)
	}
}

// TestStalledStream: a server silent for the idle timeout (no headers,
// or no byte of the stream while the provider waits for one) ends the
// attempt as a dropped connection: retried before anything streamed, else
// a transient error event with the partial answer. SSE comments and ping
// events that keep the stream alive are not silence, and neither is the
// time the provider waits on a slow channel reader.
func TestStalledStream(t *testing.T) {
	t.Parallel()
	// Every byte restarts the idle timer only once the reading goroutine
	// gets it: on a loaded machine (CI, -race, all packages at once) it
	// may come a few hundred milliseconds after the server sent it, so the
	// keep-alives leave that much room (300 ms with a tick every 50 ms
	// did not).
	const idle = 600 * time.Millisecond
	body := sse(t, "text")
	stop := strings.Index(body, "event: content_block_stop")
	delta := strings.Index(body, "event: content_block_delta")
	// keepAlive writes the stream up to its first delta, then tick every
	// sixth of the idle timeout for two idle timeouts, then the rest.
	keepAlive := func(tick string) func(w http.ResponseWriter, r *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			serveSSE(w, body[:delta])
			for range 2 * 6 {
				select {
				case <-time.After(idle / 6):
				case <-r.Context().Done():
					return
				}
				_, _ = io.WriteString(w, tick)
				w.(http.Flusher).Flush()
			}
			serveSSE(w, body[delta:])
		}
	}
	cases := []struct {
		name   string
		script []response
		// hold is how long the channel reader sleeps at its third event.
		hold time.Duration
		// partial is the text of the error event's partial answer; ""
		// when the call must succeed.
		partial  string
		requests int
	}{
		{name: "mid-stream", script: []response{{status: 200, body: body[:stop], hold: true}}, partial: "Hello!", requests: 1},
		{name: "before the first event", script: []response{{status: 200, hold: true}, ok(body)}, requests: 2},
		{name: "no headers", script: []response{{silent: true}, ok(body)}, requests: 2},
		{name: "keep-alive comments", script: []response{{status: 200, write: keepAlive(": keep-alive\n\n")}}, requests: 1},
		{name: "ping events", script: []response{{status: 200, write: keepAlive("event: ping\ndata: {\"type\": \"ping\"}\n\n")}}, requests: 1},
		// More events than the provider reads ahead, so that its reading
		// goroutine waits on the reader for two idle timeouts.
		{name: "slow channel reader", script: []response{ok(bigStream(1000))}, hold: 2 * idle, requests: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tc.script...)
			en := setup(t, api, config{opts: []anthropic.Option{anthropic.WithIdleTimeout(idle), anthropic.WithCoalesce(0)}})
			n := 0
			hold := func(_ *channel.Reader, _ agent.ModelEvent) {
				if n++; n == 3 {
					time.Sleep(tc.hold)
				}
			}
			res := en.stream(t, userReq("Hello"), hold, channel.WithWindow(1))
			if res.err != nil || !isEnd(res.end) {
				t.Fatalf("call err %v, stream end %v", res.err, res.end)
			}
			if n := len(api.received()); n != tc.requests {
				t.Fatalf("%d requests, want %d", n, tc.requests)
			}
			ev := last(res.Events)
			if tc.partial == "" {
				if ev.Type != agent.ModelDone || res.Reply.StopReason != agent.StopEnd {
					t.Fatalf("last event %+v, reply %+v, want done and end", ev, res.Reply)
				}
				return
			}
			if ev.Type != agent.ModelError || ev.Kind != agent.ErrorTransient || !strings.Contains(ev.Error, "stalled") {
				t.Fatalf("last event %+v", ev)
			}
			if ev.Message == nil || len(ev.Message.Content) != 1 || ev.Message.Content[0].Text != tc.partial {
				t.Fatalf("partial %+v", ev.Message)
			}
			if res.Reply.StopReason != agent.StopError || res.Reply.Kind != agent.ErrorTransient {
				t.Fatalf("reply %+v", res.Reply)
			}
		})
	}
}

func TestReaderGoneCancelsTheRequest(t *testing.T) {
	t.Parallel()
	enginetest.BusAndLocal(t, func(t *testing.T, local bool) {
		body := sse(t, "text")
		cut := strings.Index(body, "event: content_block_stop")
		api := newFakeAPI(t, response{status: 200, body: body[:cut], hold: true})
		en := setup(t, api, config{local: local})
		res := en.stream(t, userReq("Hello"), func(r *channel.Reader, ev agent.ModelEvent) {
			if ev.Type == agent.ModelTextDelta {
				_ = r.Close()
			}
		})
		if res.err == nil || !strings.Contains(res.err.Error(), string(wire.CodeCanceled)) {
			t.Fatalf("function error %v, want canceled", res.err)
		}
		got := api.received()
		select {
		case <-got[0].gone:
		case <-time.After(5 * time.Second):
			t.Fatal("the HTTP request was not cancelled after the reader left")
		}
	})
}

func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, ok(sse(t, "text")))
	en := setup(t, api, config{})
	good := userReq("hi")
	for name, mutate := range map[string]func(r *anthropic.StreamRequest){
		"no model":        func(r *anthropic.StreamRequest) { r.Model = "" },
		"no messages":     func(r *anthropic.StreamRequest) { r.Messages = nil },
		"bad message":     func(r *anthropic.StreamRequest) { r.Messages = []agent.Message{{Role: "robot"}} },
		"negative max":    func(r *anthropic.StreamRequest) { r.MaxTokens = -1 },
		"bad thinking":    func(r *anthropic.StreamRequest) { r.ThinkingLevel = "extreme" },
		"tool without id": func(r *anthropic.StreamRequest) { r.Tools = []agent.Tool{{Description: "x"}} },
		"bad session id":  func(r *anthropic.StreamRequest) { r.SessionID = "s1.>" },
		"session id path": func(r *anthropic.StreamRequest) { r.SessionID = "../s 1" },
		"only empty text": func(r *anthropic.StreamRequest) {
			r.Messages = []agent.Message{{Role: agent.RoleUser, Content: []agent.Content{agent.Text("")}}}
		},
	} {
		req := good
		req.Messages = append([]agent.Message(nil), good.Messages...)
		mutate(&req)
		res := en.stream(t, req, nil)
		if len(res.Events) != 0 || res.err == nil || !strings.Contains(res.err.Error(), string(wire.CodeInvalidPayload)) {
			t.Errorf("%s: events %v, err %v; want invalid_payload and nothing written", name, types(res.Events), res.err)
		}
	}
	if n := len(api.received()); n != 0 {
		t.Fatalf("%d requests reached the API", n)
	}
	// A session homed in a region is a valid session id.
	good.SessionID = "eu-west.s_1"
	if res := en.stream(t, good, nil); res.err != nil || res.Reply.StopReason != agent.StopEnd {
		t.Fatalf("regional session id: reply %+v, err %v", res.Reply, res.err)
	}
}

func TestCloseEndsStreamsInFlight(t *testing.T) {
	t.Parallel()
	body := sse(t, "text")
	cut := strings.Index(body, "event: content_block_stop")
	api := newFakeAPI(t, response{status: 200, body: body[:cut], hold: true})
	en := setup(t, api, config{})
	res := en.stream(t, userReq("Hello"), func(_ *channel.Reader, ev agent.ModelEvent) {
		if ev.Type == agent.ModelTextDelta {
			go func() { _ = en.w.Close(t.Context()) }()
		}
	})
	if res.end == nil || isEnd(res.end) || !strings.Contains(res.end.Error(), "shutting down") {
		t.Fatalf("stream ended with %v, want the shutdown error frame", res.end)
	}
}

// TestCoalescing reads a long answer through a reader that grants one
// frame at a time, so the provider reads ahead: deltas that were waiting
// go out merged, and the events are those of an uncoalesced stream with
// adjacent deltas joined.
func TestCoalescing(t *testing.T) {
	t.Parallel()
	const deltas, size = 500, 64
	body := bigStream(deltas)
	plain := setup(t, newFakeAPI(t, ok(body)), config{opts: []anthropic.Option{anthropic.WithCoalesce(0)}})
	want := plain.stream(t, userReq("go"), nil)
	merged := setup(t, newFakeAPI(t, ok(body)), config{opts: []anthropic.Option{anthropic.WithCoalesce(size)}})
	got := merged.stream(t, userReq("go"), nil, channel.WithWindow(1))

	if n := len(want.Events); n != deltas+7 {
		t.Fatalf("%d events without coalescing, want %d", n, deltas+7)
	}
	if len(got.Events) >= len(want.Events) {
		t.Fatalf("%d events with coalescing, %d without: nothing was merged", len(got.Events), len(want.Events))
	}
	joined := joinDeltas(want.Events)
	if a, b := fmt.Sprint(types(joinDeltas(got.Events))), fmt.Sprint(types(joined)); a != b {
		t.Fatalf("event types %s, want %s", a, b)
	}
	for _, ev := range got.Events {
		if ev.Type == agent.ModelTextDelta && len(ev.Delta) > size+len(" tok0") {
			t.Fatalf("a delta of %d bytes, over the coalesce size %d", len(ev.Delta), size)
		}
	}
	if !reflect.DeepEqual(last(got.Events), last(want.Events)) || !reflect.DeepEqual(joinDeltas(got.Events), joined) {
		t.Fatal("coalesced stream differs from the plain one")
	}
}

// joinDeltas merges adjacent deltas of one type and index.
func joinDeltas(evs []agent.ModelEvent) []agent.ModelEvent {
	var out []agent.ModelEvent
	for _, ev := range evs {
		if n := len(out); n > 0 && ev.Delta != "" && out[n-1].Type == ev.Type && out[n-1].Index == ev.Index {
			out[n-1].Delta += ev.Delta
			continue
		}
		out = append(out, ev)
	}
	return out
}

// TestConnectionReused checks that a finished stream is read to its end,
// so the next call reuses the connection (no new TLS handshake with the
// real API).
func TestConnectionReused(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, response{status: 200, body: sse(t, "text"), linger: 50 * time.Millisecond})
	en := setup(t, api, config{})
	en.stream(t, userReq("one"), nil)
	en.stream(t, userReq("two"), nil)
	got := api.received()
	if len(got) != 2 || got[0].remote != got[1].remote {
		t.Fatalf("remote addresses %q and %q: the connection was not reused", got[0].remote, got[1].remote)
	}
}

// TestStreamEndsAfterStopReason: a stream that ends (cleanly, or with
// the connection dropped) after message_delta gave the stop reason but
// before message_stop holds the whole answer: it is done, not an error
// after the stop event.
func TestStreamEndsAfterStopReason(t *testing.T) {
	t.Parallel()
	body := sse(t, "text")
	cut := strings.Index(body, "event: message_stop")
	for name, r := range map[string]response{
		"eof":     ok(body[:cut]),
		"dropped": {status: 200, body: body[:cut] + "event: message_st", cut: cut + len("event: message_st")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, r)
			en := setup(t, api, config{})
			res := en.stream(t, userReq("Hello"), nil)
			if res.err != nil || !isEnd(res.end) {
				t.Fatalf("call err %v, stream end %v", res.err, res.end)
			}
			done := last(res.Events)
			if done.Type != agent.ModelDone || done.Message.StopReason != agent.StopEnd || done.Message.Content[0].Text != "Hello!" ||
				done.Message.Usage.OutputTokens != 15 || res.Reply.StopReason != agent.StopEnd {
				t.Fatalf("events %v, last %+v, reply %+v", types(res.Events), done, res.Reply)
			}
			for _, ev := range res.Events {
				if ev.Type == agent.ModelError {
					t.Fatalf("error event %+v after a whole answer", ev)
				}
			}
		})
	}
}

// TestNotEventStream: a 200 answer that is not an event stream (a proxy's
// HTML page, a gateway's JSON error, a JSON message from a proxy that
// dropped "stream") fails as what it is, not as a dropped connection.
func TestNotEventStream(t *testing.T) {
	t.Parallel()
	limited := apiError(200, "rate_limit_error", "Number of requests has exceeded your rate limit")
	limited.header = map[string]string{"retry-after-ms": "10"}
	for _, tc := range []struct {
		name     string
		r        response
		kind     agent.ErrorKind
		text     string
		retry    int64
		requests int
	}{
		{
			name: "html",
			r: response{status: 200, header: map[string]string{"Content-Type": "text/html; charset=utf-8"},
				body: "<!DOCTYPE html>\n<html><head><title>Sign in</title></head>\n<body>Please sign in: proxy.example</body></html>\n"},
			kind: agent.ErrorPermanent, text: "text/html, not an event stream", requests: 1,
		},
		{
			name: "message json",
			r: ok(`{"id":"msg_01","type":"message","role":"assistant","model":"claude-opus-4-20250514","content":[{"type":"text","text":"Hello!"}],` +
				`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":15}}`),
			kind: agent.ErrorPermanent, text: "application/json, not an event stream", requests: 1,
		},
		{
			name: "error json",
			r:    apiError(200, "overloaded_error", "Overloaded"),
			kind: agent.ErrorTransient, text: "overloaded_error: Overloaded", requests: 1 + anthropic.DefaultMaxRetries,
		},
		{
			name: "rate limit json",
			r:    limited,
			kind: agent.ErrorRateLimited, text: "rate_limit_error", retry: 10, requests: 1 + anthropic.DefaultMaxRetries,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tc.r)
			en := setup(t, api, config{})
			res := en.stream(t, userReq("Hello"), nil)
			if res.err != nil || !isEnd(res.end) {
				t.Fatalf("call err %v, stream end %v", res.err, res.end)
			}
			ev := last(res.Events)
			if len(res.Events) != 1 || ev.Type != agent.ModelError || ev.Kind != tc.kind || !strings.Contains(ev.Error, tc.text) || ev.RetryAfterMs != tc.retry {
				t.Fatalf("events %+v, want one error of kind %s saying %q", res.Events, tc.kind, tc.text)
			}
			if n := len(api.received()); n != tc.requests {
				t.Fatalf("%d requests, want %d", n, tc.requests)
			}
		})
	}
}

// TestEndlessEvent: a server that never ends an event (no blank line)
// does not make the provider gather it in memory: past MaxStreamEvent the
// answer fails as a malformed stream (permanent: a retry reads it no
// better), and the server could write little more than that. The SDK's
// decoder gathered up to 32 MiB a line, and data lines without end.
func TestEndlessEvent(t *testing.T) {
	t.Parallel()
	body := sse(t, "text")
	delta := strings.Index(body, "event: content_block_delta")
	filler := newEndless()
	api := newFakeAPI(t, response{status: 200, header: map[string]string{"Content-Type": "text/event-stream"},
		body: body[:delta] + "event: content_block_delta\ndata: ", endless: filler})
	en := setup(t, api, config{})
	res := en.stream(t, userReq("hi"), nil)
	ev := last(res.Events)
	if res.err != nil || ev.Type != agent.ModelError || ev.Kind != agent.ErrorPermanent || !strings.Contains(ev.Error, "larger than 8 MiB") {
		t.Fatalf("last event %+v, function error %v", ev, res.err)
	}
	if n := len(api.received()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	<-filler.done
	if w := filler.written.Load(); w > 2*anthropic.MaxStreamEvent {
		t.Fatalf("the server wrote %d bytes", w)
	}
}

// TestUnclosedBlocksEndWithTheMessage: a stream that stops (message_delta
// with its stop reason, or message_stop) without a block's
// content_block_stop ends that block as its stop would: a call left open
// is in the final message with its end event (it was lost from a message
// stopped with function_call, after its functioncall_start), and text
// gets its text_end.
func TestUnclosedBlocksEndWithTheMessage(t *testing.T) {
	t.Parallel()
	stop := func(i int) string {
		return "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":" + strconv.Itoa(i) + "}\n\n"
	}
	tools := sse(t, "tools")
	cases := []struct {
		name  string
		body  string
		calls int
	}{
		{"last call", strings.Replace(tools, stop(2), "", 1), 2},
		{"every block", strings.NewReplacer(stop(0), "", stop(1), "", stop(2), "").Replace(tools), 2},
		{"no message_delta", strings.Replace(strings.Replace(tools, stop(2), "", 1),
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\n", "", 1), 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			en := setup(t, newFakeAPI(t, ok(tc.body)), config{})
			req := userReq("What's the weather and the time in SF?")
			req.Tools = weatherTools
			res := en.stream(t, req, nil)
			done := last(res.Events)
			if done.Type != agent.ModelDone {
				t.Fatalf("events %v", types(res.Events))
			}
			calls := done.Message.FunctionCalls()
			if len(calls) != tc.calls || calls[1].FunctionID != "clock::now" || done.Message.StopReason != agent.StopFunctionCall {
				t.Fatalf("calls %+v, stop %s", calls, done.Message.StopReason)
			}
			ends := map[agent.ModelEventType]int{}
			for _, ev := range res.Events {
				ends[ev.Type]++
			}
			if ends[agent.ModelTextEnd] != 1 || ends[agent.ModelFunctionCallEnd] != 2 {
				t.Fatalf("events %v", types(res.Events))
			}
		})
	}
}

// TestNegativeUsageCountsAsNone: a token count below zero (a broken
// proxy's) is 0 in the usage events and the message, as a missing one is:
// it would lower the token counters and a session's totals.
func TestNegativeUsageCountsAsNone(t *testing.T) {
	t.Parallel()
	body := strings.NewReplacer(`"input_tokens": 25, "output_tokens": 1`, `"input_tokens": -25, "output_tokens": -1, "cache_read_input_tokens": -3`,
		`"output_tokens": 15`, `"output_tokens": -15`).Replace(sse(t, "text"))
	en := setup(t, newFakeAPI(t, ok(body)), config{})
	res := en.stream(t, userReq("Hello"), nil)
	done := last(res.Events)
	if done.Type != agent.ModelDone {
		t.Fatalf("events %v", types(res.Events))
	}
	for _, ev := range res.Events {
		u := ev.Usage
		if ev.Type == agent.ModelDone {
			u = ev.Message.Usage
		}
		if u != nil && (u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheReadTokens < 0 || u.CacheWriteTokens < 0) {
			t.Fatalf("%s event with usage %+v", ev.Type, *u)
		}
	}
}
