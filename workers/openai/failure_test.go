package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/openai"
)

// textBody is the recorded plain text stream.
func textBody(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "text.sse"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const wantText = "Hello! How can I help you today?"

// onlyError checks that a stream failed before anything streamed: one
// error event of kind, no partial message, reply {error, kind}.
func onlyError(t *testing.T, res result, kind agent.ErrorKind) agent.ModelEvent {
	t.Helper()
	if res.err != nil || !isEnd(res.end) {
		t.Fatalf("call err %v, stream end %v", res.err, res.end)
	}
	if len(res.events) != 1 || res.events[0].Type != agent.ModelError {
		t.Fatalf("events %v, want one error", types(res.events))
	}
	e := res.events[0]
	if e.Kind != kind || e.Message != nil || e.Error == "" {
		t.Fatalf("error event %+v, want kind %s without a message", e, kind)
	}
	if res.resp.StopReason != agent.StopError || res.resp.Kind != kind {
		t.Fatalf("reply %+v", res.resp)
	}
	return e
}

func succeeded(t *testing.T, res result) {
	t.Helper()
	if res.err != nil || !isEnd(res.end) {
		t.Fatalf("call err %v, stream end %v", res.err, res.end)
	}
	done := last(res.events)
	if done.Type != agent.ModelDone || done.Message.Content[0].Text != wantText || res.resp.StopReason != agent.StopEnd {
		t.Fatalf("last event %+v, reply %+v", done, res.resp)
	}
	if res.events[0].Type != agent.ModelStart {
		t.Fatalf("first event %+v", res.events[0])
	}
}

// TestRetryRateLimited: a 429 with a retry hint is retried after exactly
// the hint, then the answer streams.
func TestRetryRateLimited(t *testing.T) {
	t.Parallel()
	body := textBody(t)
	for name, hint := range map[string]map[string]string{
		"retry-after-ms": {"retry-after-ms": "20"},
		"Retry-After":    {"Retry-After": "2"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 0 {
					jsonError(w, http.StatusTooManyRequests, hint, "Rate limit reached for gpt-4o-mini", "requests", "rate_limit_exceeded")
					return
				}
				serveSSE(w, body, -1)
			}, config{})
			succeeded(t, ev.stream(t, userReq("hi")))
			want := map[string]time.Duration{"retry-after-ms": 20 * time.Millisecond, "Retry-After": 2 * time.Second}[name]
			if got := ev.waits.list(); !slices.Equal(got, []time.Duration{want}) {
				t.Fatalf("waits %v, want [%v]", got, want)
			}
			if n := len(ev.api.requests()); n != 2 {
				t.Fatalf("%d requests, want 2", n)
			}
		})
	}
}

// TestRetryTransientBackoff: 5xx answers are retried with a doubling
// backoff; after the retries the failure is reported.
func TestRetryTransientBackoff(t *testing.T) {
	t.Parallel()
	body := textBody(t)
	t.Run("recovers", func(t *testing.T) {
		t.Parallel()
		ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) {
			switch n {
			case 0:
				jsonError(w, http.StatusServiceUnavailable, nil, "overloaded", "server_error", "")
			case 1:
				jsonError(w, 529, nil, "overloaded", "overloaded_error", "")
			default:
				serveSSE(w, body, -1)
			}
		}, config{opts: []openai.Option{openai.WithBackoff(10*time.Millisecond, time.Second)}})
		succeeded(t, ev.stream(t, userReq("hi")))
		if got := ev.waits.list(); !slices.Equal(got, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}) {
			t.Fatalf("waits %v", got)
		}
	})
	t.Run("gives up", func(t *testing.T) {
		t.Parallel()
		ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) {
			jsonError(w, http.StatusInternalServerError, nil, "boom", "server_error", "")
		}, config{opts: []openai.Option{openai.WithMaxRetries(1)}})
		e := onlyError(t, ev.stream(t, userReq("hi")), agent.ErrorTransient)
		if !strings.Contains(e.Error, "HTTP 500") || !strings.Contains(e.Error, "boom") {
			t.Fatalf("error text %q", e.Error)
		}
		if n := len(ev.api.requests()); n != 2 {
			t.Fatalf("%d requests, want 2", n)
		}
	})
	t.Run("doubling past the max wait", func(t *testing.T) {
		t.Parallel()
		// The doubled wait is capped at the max wait: every retry that
		// max_retries allows is made. Only a server's hint beyond the max
		// wait ends the call.
		ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) {
			jsonError(w, http.StatusServiceUnavailable, nil, "overloaded", "server_error", "")
		}, config{opts: []openai.Option{openai.WithBackoff(10*time.Millisecond, 30*time.Millisecond), openai.WithMaxRetries(4)}})
		onlyError(t, ev.stream(t, userReq("hi")), agent.ErrorTransient)
		want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond}
		if got := ev.waits.list(); !slices.Equal(got, want) || len(ev.api.requests()) != 5 {
			t.Fatalf("waits %v, %d requests; want %v, 5", got, len(ev.api.requests()), want)
		}
	})
	t.Run("hint too long", func(t *testing.T) {
		t.Parallel()
		ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) {
			jsonError(w, http.StatusTooManyRequests, map[string]string{"Retry-After": "3600"}, "slow down", "requests", "rate_limit_exceeded")
		}, config{})
		e := onlyError(t, ev.stream(t, userReq("hi")), agent.ErrorRateLimited)
		if e.RetryAfterMs != 3_600_000 || len(ev.waits.list()) != 0 || len(ev.api.requests()) != 1 {
			t.Fatalf("event %+v, waits %v, %d requests", e, ev.waits.list(), len(ev.api.requests()))
		}
	})
}

// TestHTTPErrorKinds classifies the errors that are not retried.
func TestHTTPErrorKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		msg    string
		typ    string
		code   string
		raw    string // a body that is not an OpenAI error object
		kind   agent.ErrorKind
	}{
		{name: "context", status: 400, msg: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens.", typ: "invalid_request_error", code: "context_length_exceeded", kind: agent.ErrorContextOverflow},
		{name: "vllm context", status: 400, raw: `{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400}`, kind: agent.ErrorContextOverflow},
		{name: "bad request", status: 400, msg: "Invalid value for 'temperature'", typ: "invalid_request_error", kind: agent.ErrorPermanent},
		{name: "not found", status: 404, msg: "The model `gpt-9` does not exist", typ: "invalid_request_error", code: "model_not_found", kind: agent.ErrorPermanent},
		{name: "forbidden", status: 403, msg: "Project does not have access", typ: "invalid_request_error", kind: agent.ErrorAuthExpired},
		{name: "quota", status: 429, msg: "You exceeded your current quota", typ: "insufficient_quota", code: "insufficient_quota", kind: agent.ErrorPermanent},
		{name: "too large", status: 413, raw: "request entity too large", kind: agent.ErrorContextOverflow},
		{name: "ollama", status: 404, raw: `{"error":"model \"llama9\" not found, try pulling it first"}`, kind: agent.ErrorPermanent},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if tc.raw != "" {
					w.WriteHeader(tc.status)
					_, _ = w.Write([]byte(tc.raw))
					return
				}
				jsonError(w, tc.status, nil, tc.msg, tc.typ, tc.code)
			}, config{})
			e := onlyError(t, ev.stream(t, userReq("hi")), tc.kind)
			if len(ev.api.requests()) != 1 {
				t.Fatalf("%d requests, want 1 (no retry)", len(ev.api.requests()))
			}
			if tc.name == "ollama" && !strings.Contains(e.Error, "try pulling it first") {
				t.Fatalf("error text %q", e.Error)
			}
		})
	}
}

// Test401DropsCredential: a 401 is auth_expired and drops the cached
// credential, so the next call asks auth again; without a 401 it is
// reused. A 401 to a credential just fetched is not retried; one to a
// cached credential asks auth once more and is retried only when auth has
// another key, once.
func Test401DropsCredential(t *testing.T) {
	t.Parallel()
	body := textBody(t)
	const other = "sk-test-ROTATED-OTHERKEY-fedcba98"
	// step is one stream call: accept and key, when set, are the key the
	// server takes and the one auth hands out from then on; requests and
	// auth count the server's requests and the auth calls so far.
	type step struct {
		accept, key    string
		ok             bool
		requests, auth int64
	}
	cases := []struct {
		name   string
		refuse int // the request (from 0) answered 401 whatever its key; -1: none
		steps  []step
	}{
		{"fresh credential", 0, []step{
			{ok: false, requests: 1, auth: 1}, // no retry on 401
			{ok: true, requests: 2, auth: 2},  // dropped: auth asked again within the TTL
		}},
		{"cached credential, auth has the same", 1, []step{
			{ok: true, requests: 1, auth: 1},
			{ok: false, requests: 2, auth: 2}, // cached key used, auth asked again once after the 401: same key, no retry
			{ok: true, requests: 3, auth: 3},  // dropped all the same
		}},
		{"cached credential, the new one refused too", -1, []step{
			{ok: true, requests: 1, auth: 1},
			{accept: "sk-test-NEITHER-0123456789", key: other, ok: false, requests: 3, auth: 2}, // one retry, with the new key
			{accept: other, ok: true, requests: 4, auth: 3},                                     // the new key was dropped too
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var accept atomic.Pointer[string] // nil: any key
			ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if a := accept.Load(); n == tc.refuse || a != nil && r.Header.Get("Authorization") != "Bearer "+*a {
					jsonError(w, http.StatusUnauthorized, nil, "Incorrect API key provided: sk-test***KEY.", "invalid_request_error", "invalid_api_key")
					return
				}
				serveSSE(w, body, -1)
			}, config{})
			for i, s := range tc.steps {
				if s.accept != "" {
					accept.Store(&s.accept)
				}
				if s.key != "" {
					ev.auth.setKey(s.key)
				}
				res := ev.stream(t, userReq("hi"))
				if s.ok {
					succeeded(t, res)
				} else {
					onlyError(t, res, agent.ErrorAuthExpired)
				}
				if n := int64(len(ev.api.requests())); n != s.requests {
					t.Fatalf("call %d: %d requests in all, want %d", i+1, n, s.requests)
				}
				if n := ev.auth.calls.Load(); n != s.auth {
					t.Fatalf("call %d: auth called %d times in all, want %d", i+1, n, s.auth)
				}
			}
			if _, ok := ev.auth.providers.Load("openai"); !ok {
				t.Fatal("auth::get_token was not asked for provider openai")
			}
			for _, key := range []string{testKey, other} {
				if strings.Contains(ev.logs.String(), key) {
					t.Fatalf("a key leaked into the logs:\n%s", ev.logs.String())
				}
			}
		})
	}
}

// TestRotatedKeyRetried: the operator replaces the key with auth::set_token
// and revokes the old one while the provider still holds the old one in
// its cache. The next call gets a 401, asks auth again, and is retried
// once with the new key: it succeeds (with max_retries 0: this is not a
// retry of a failing server), and no key reaches an event, a reply or a
// log line. The new key is cached from then on.
func TestRotatedKeyRetried(t *testing.T) {
	t.Parallel()
	body := textBody(t)
	const rotated = "sk-test-ROTATED-NEWKEY-fedcba9876"
	for _, fn := range []string{"stream", "complete", "models"} {
		t.Run(fn, func(t *testing.T) {
			t.Parallel()
			var accept atomic.Pointer[string] // nil: any key
			ev := setup(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				if a := accept.Load(); a != nil && r.Header.Get("Authorization") != "Bearer "+*a {
					jsonError(w, http.StatusUnauthorized, nil, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
					return
				}
				if fn == "models" {
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, modelList)
					return
				}
				serveSSE(w, body, -1)
			}, config{opts: []openai.Option{openai.WithMaxRetries(0)}})
			var seen strings.Builder
			call := func(n int) {
				t.Helper()
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				var (
					resp any
					err  error
				)
				switch fn {
				case "stream":
					res := ev.stream(t, userReq("hi"))
					succeeded(t, res)
					for _, f := range res.frames {
						seen.Write(f)
					}
					resp = res.resp
				case "complete":
					resp, err = engine.Call[openai.CompleteResponse](ctx, ev.e, ev.p.CompleteFunction(), userReq("hi"))
				case "models":
					resp, err = engine.Call[openai.ModelsResponse](ctx, ev.e, ev.p.ModelsFunction(), openai.ModelsRequest{})
				}
				if err != nil {
					t.Fatalf("call %d: %v", n, err)
				}
				b, _ := json.Marshal(resp)
				seen.Write(b)
			}
			call(1)
			if n := ev.auth.calls.Load(); n != 1 {
				t.Fatalf("auth called %d times, want 1", n)
			}
			// The rotation: A is revoked, B stored; A is still cached.
			key := rotated
			accept.Store(&key)
			ev.auth.setKey(rotated)
			call(2)
			got := ev.api.requests()
			if len(got) != 3 {
				t.Fatalf("%d requests, want 3 (one retry after the 401)", len(got))
			}
			for i, want := range []string{testKey, testKey, rotated} {
				if a := got[i].Header.Get("Authorization"); a != "Bearer "+want {
					t.Fatalf("request %d went with %q, want the key %q", i+1, a, want)
				}
			}
			if n := ev.auth.calls.Load(); n != 2 {
				t.Fatalf("auth called %d times, want 2 (once after the 401)", n)
			}
			call(3)
			got = ev.api.requests()
			if len(got) != 4 || got[3].Header.Get("Authorization") != "Bearer "+rotated || ev.auth.calls.Load() != 2 {
				t.Fatalf("third call: %d requests, %d auth calls: the new key is not cached", len(got), ev.auth.calls.Load())
			}
			logs := ev.logs.String()
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

// TestDroppedConnection: a connection that breaks after the answer began
// ends the stream with a transient error and the partial answer; one that
// breaks before any content is retried.
func TestDroppedConnection(t *testing.T) {
	t.Parallel()
	body := textBody(t)
	t.Run("mid-stream", func(t *testing.T) {
		t.Parallel()
		ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) { serveSSE(w, body, 4) }, config{opts: []openai.Option{openai.WithCoalesce(0)}})
		res := ev.stream(t, userReq("hi"))
		if res.err != nil || !isEnd(res.end) {
			t.Fatalf("call err %v, stream end %v", res.err, res.end)
		}
		want := []agent.ModelEventType{agent.ModelStart, agent.ModelTextStart, agent.ModelTextDelta, agent.ModelTextDelta, agent.ModelTextDelta, agent.ModelError}
		if got := types(res.events); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		e := last(res.events)
		if e.Kind != agent.ErrorTransient || e.Message == nil || e.Message.StopReason != agent.StopError ||
			len(e.Message.Content) != 1 || e.Message.Content[0].Text != "Hello! How" || e.Message.ErrorMessage != e.Error {
			t.Fatalf("error event %+v (message %+v)", e, e.Message)
		}
		if res.resp.StopReason != agent.StopError || res.resp.Kind != agent.ErrorTransient || len(ev.api.requests()) != 1 {
			t.Fatalf("reply %+v, %d requests", res.resp, len(ev.api.requests()))
		}
	})
	t.Run("before content", func(t *testing.T) {
		t.Parallel()
		ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) {
			switch n {
			case 0:
				hangUp(w) // no response at all
			case 1:
				serveSSE(w, body, 1) // the role chunk only
			default:
				serveSSE(w, body, -1)
			}
		}, config{})
		succeeded(t, ev.stream(t, userReq("hi")))
		if n := len(ev.api.requests()); n != 3 {
			t.Fatalf("%d requests, want 3", n)
		}
	})
	t.Run("clean end without finish", func(t *testing.T) {
		t.Parallel()
		cut := body[:strings.Index(string(body), `"finish_reason":"stop"`)]
		cut = cut[:strings.LastIndex(string(cut), "data: ")]
		ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) { serveSSE(w, cut, -1) }, config{opts: []openai.Option{openai.WithMaxRetries(0)}})
		res := ev.stream(t, userReq("hi"))
		e := last(res.events)
		if e.Type != agent.ModelError || e.Kind != agent.ErrorTransient || e.Message.Content[0].Text != wantText {
			t.Fatalf("last event %+v", e)
		}
	})
	t.Run("tail lost after finish", func(t *testing.T) {
		t.Parallel()
		// Everything up to finish_reason arrives; the usage chunk and
		// [DONE] are lost: the answer is complete, without usage.
		n := strings.Count(string(body[:strings.Index(string(body), `"finish_reason":"stop"`)]), "\n\n") + 1
		ev := setup(t, func(w http.ResponseWriter, r *http.Request, _ int) { serveSSE(w, body, n) }, config{})
		res := ev.stream(t, userReq("hi"))
		succeeded(t, res)
		if slices.Contains(types(res.events), agent.ModelUsage) {
			t.Fatalf("usage event without usage: %v", types(res.events))
		}
	})
}

// TestNotEventStream: a 200 answer that is not an event stream (a proxy's
// HTML page, a gateway's JSON error, a completion from a server that does
// not stream) fails as what it is, not as a stream that ended early.
func TestNotEventStream(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		ctype    string
		body     string
		header   map[string]string
		kind     agent.ErrorKind
		text     string
		retry    int64
		requests int
	}{
		{
			name: "html", ctype: "text/html; charset=utf-8",
			body: "<!DOCTYPE html>\n<html><head><title>Sign in</title></head>\n<body>Please sign in: proxy.example</body></html>\n",
			kind: agent.ErrorPermanent, text: "text/html, not an event stream", requests: 1,
		},
		{
			name: "completion json", ctype: "application/json",
			body: `{"id":"chatcmpl-1","object":"chat.completion","created":1748011301,"model":"gpt-4o-mini","choices":[{"index":0,` +
				`"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2}}`,
			kind: agent.ErrorPermanent, text: "application/json, not an event stream", requests: 1,
		},
		{
			name: "rate limit json", ctype: "application/json", header: map[string]string{"retry-after-ms": "20"},
			body: `{"error":{"message":"Rate limit reached for gpt-4o-mini","type":"requests","code":"rate_limit_exceeded"}}`,
			kind: agent.ErrorRateLimited, text: "Rate limit reached", retry: 20, requests: 1 + openai.DefaultMaxRetries,
		},
		{
			name: "overflow json", ctype: "application/json",
			body: `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`,
			kind: agent.ErrorContextOverflow, text: "maximum context length", requests: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", tc.ctype)
				_, _ = w.Write([]byte(tc.body))
			}, config{})
			e := onlyError(t, ev.stream(t, userReq("hi")), tc.kind)
			if !strings.Contains(e.Error, tc.text) || e.RetryAfterMs != tc.retry {
				t.Fatalf("error event %+v, want it to say %q with retry_after_ms %d", e, tc.text, tc.retry)
			}
			if n := len(ev.api.requests()); n != tc.requests {
				t.Fatalf("%d requests, want %d", n, tc.requests)
			}
		})
	}
}

// serveStalled writes the first n events of body as serveSSE does, then
// sends nothing more and keeps the connection open until the client
// leaves: a half-open stream. With n < 0 it does not even send the
// response headers.
func serveStalled(w http.ResponseWriter, r *http.Request, body []byte, n int) {
	if n >= 0 {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		for _, ev := range bytes.SplitAfter(body, []byte("\n\n"))[:n] {
			_, _ = w.Write(ev)
		}
		w.(http.Flusher).Flush()
	}
	<-r.Context().Done()
}

// TestStalledStream: a server that stops sending without closing the
// connection ends the attempt after the idle timeout as a dropped
// connection would (transient, retried while nothing streamed), not at
// the function's timeout; a server that keeps the stream alive with SSE
// comments, or a channel reader that holds the provider back, is not
// silence.
func TestStalledStream(t *testing.T) {
	t.Parallel()
	body := textBody(t)
	// Every byte restarts the idle timer only once the reading goroutine
	// gets it: on a loaded machine (CI, -race, all packages at once) it
	// may come a few hundred milliseconds after the server sent it, so the
	// keep-alives leave that much room (300 ms with a comment every 50 ms
	// did not).
	const idle = 600 * time.Millisecond
	cases := []struct {
		name   string
		handle func(w http.ResponseWriter, r *http.Request, n int)
		// hold is how long the channel reader sleeps at its third event.
		hold time.Duration
		// partial is the text of the error event's partial answer; ""
		// when the call must succeed.
		partial  string
		requests int
	}{
		{
			name:   "mid-stream",
			handle: func(w http.ResponseWriter, r *http.Request, _ int) { serveStalled(w, r, body, 4) },
			// start, text_start, three deltas, then the stall.
			partial: "Hello! How", requests: 1,
		},
		{
			name: "before content",
			handle: func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 0 {
					serveStalled(w, r, body, 1) // the role chunk only
					return
				}
				serveSSE(w, body, -1)
			},
			requests: 2,
		},
		{
			name: "no headers",
			handle: func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 0 {
					serveStalled(w, r, body, -1)
					return
				}
				serveSSE(w, body, -1)
			},
			requests: 2,
		},
		{
			name: "keep-alive comments",
			handle: func(w http.ResponseWriter, r *http.Request, _ int) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				events := bytes.SplitAfter(body, []byte("\n\n"))
				_, _ = w.Write(events[0])
				w.(http.Flusher).Flush()
				for range 2 * idle / (idle / 6) { // two idle timeouts' worth
					time.Sleep(idle / 6)
					_, _ = w.Write([]byte(": OPENROUTER PROCESSING\n\n"))
					w.(http.Flusher).Flush()
				}
				for _, ev := range events[1:] {
					_, _ = w.Write(ev)
				}
			},
			requests: 1,
		},
		{
			name:   "slow channel reader",
			handle: func(w http.ResponseWriter, r *http.Request, _ int) { serveSSE(w, longStream(), -1) },
			hold:   2 * idle, requests: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := setup(t, tc.handle, config{opts: []openai.Option{openai.WithIdleTimeout(idle), openai.WithCoalesce(0)}})
			n := 0
			hold := func(_ *channel.Reader, _ agent.ModelEvent) {
				if n++; n == 3 {
					time.Sleep(tc.hold)
				}
			}
			start := time.Now()
			req := userReq("hi")
			req.Tools = weatherTools
			res := ev.streamWith(t, req, hold, channel.WithWindow(1))
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("the call took %v", took)
			}
			if res.err != nil || !isEnd(res.end) {
				t.Fatalf("call err %v, stream end %v", res.err, res.end)
			}
			if n := len(ev.api.requests()); n != tc.requests {
				t.Fatalf("%d requests, want %d", n, tc.requests)
			}
			e := last(res.events)
			if tc.partial == "" {
				if e.Type != agent.ModelDone {
					t.Fatalf("last event %+v, want done", e)
				}
				return
			}
			if e.Type != agent.ModelError || e.Kind != agent.ErrorTransient || !strings.Contains(e.Error, "stalled") ||
				e.Message == nil || len(e.Message.Content) != 1 || e.Message.Content[0].Text != tc.partial {
				t.Fatalf("last event %+v (message %+v)", e, e.Message)
			}
			if res.resp.StopReason != agent.StopError || res.resp.Kind != agent.ErrorTransient {
				t.Fatalf("reply %+v", res.resp)
			}
		})
	}
}

// hugeBody is the size of the endless error body of TestHugeErrorBody.
const hugeBody = 256 << 20

// serveHugeError answers status with a JSON error body of hugeBody bytes,
// generated while it is written, and counts what it could write; done is
// closed when the handler returns (the client read it all, or closed the
// connection).
func serveHugeError(w http.ResponseWriter, status int, written *atomic.Int64, done chan<- struct{}) {
	defer close(done)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	copy(chunk, `{"error":{"message":"`)
	for written.Load() < hugeBody {
		n, err := w.Write(chunk)
		written.Add(int64(n))
		if err != nil {
			return
		}
	}
}

// TestHugeErrorBody: a broken or hostile server that answers an error
// status with an endless body does not make the provider read (and
// allocate) it: the call fails at once with the status's coded error, and
// the server could write little more than the socket buffers hold before
// the connection was dropped.
func TestHugeErrorBody(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		fn     string // stream, complete or models
		status int
		code   error // the function's error (complete, models)
		kind   agent.ErrorKind
	}{
		{name: "stream 500", fn: "stream", status: http.StatusInternalServerError, kind: agent.ErrorTransient},
		{name: "complete 400", fn: "complete", status: http.StatusBadRequest, code: wire.ErrInternal, kind: agent.ErrorPermanent},
		{name: "models 502", fn: "models", status: http.StatusBadGateway, code: wire.ErrUnavailable, kind: agent.ErrorTransient},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var written atomic.Int64
			done := make(chan struct{})
			ev := setup(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				serveHugeError(w, tc.status, &written, done)
			}, config{opts: []openai.Option{openai.WithMaxRetries(0)}})
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var err error
			switch tc.fn {
			case "stream":
				res := ev.stream(t, userReq("hi"))
				onlyError(t, res, tc.kind)
			case "complete":
				_, err = engine.Call[openai.CompleteResponse](ctx, ev.e, ev.p.CompleteFunction(), userReq("hi"))
			case "models":
				_, err = engine.Call[openai.ModelsResponse](ctx, ev.e, ev.p.ModelsFunction(), openai.ModelsRequest{})
			}
			if tc.code != nil {
				var werr *wire.Error
				if !errors.Is(err, tc.code) || !errors.As(err, &werr) || werr.Details["kind"] != string(tc.kind) {
					t.Fatalf("error %v, want %v with kind %s", err, tc.code, tc.kind)
				}
				if len(werr.Message) > 2048 {
					t.Fatalf("error text of %d bytes", len(werr.Message))
				}
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the server is still writing the error body")
			}
			if n := written.Load(); n >= 32<<20 {
				t.Fatalf("the server wrote %d MiB of the error body: the provider read it", n>>20)
			}
		})
	}
}

// TestBadArgumentsKeepUsage: an answer whose call's arguments are not a
// JSON object fails as permanent, and its error event's message carries
// the usage that follows the finish_reason: the server billed the answer
// all the same, and the orchestrator counts the partial's usage.
func TestBadArgumentsKeepUsage(t *testing.T) {
	t.Parallel()
	body := []byte(`data: {"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"math__add","arguments":"{\"a\": 1,"}}]},"finish_reason":null}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":16,"total_tokens":56}}` + "\n\n" +
		"data: [DONE]\n\n")
	ev := setup(t, func(w http.ResponseWriter, r *http.Request, n int) { serveSSE(w, body, -1) }, config{})
	req := userReq("hi")
	req.Tools = weatherTools
	res := ev.stream(t, req)
	if res.err != nil || !isEnd(res.end) {
		t.Fatalf("call err %v, stream end %v", res.err, res.end)
	}
	e := last(res.events)
	want := agent.Usage{InputTokens: 40, OutputTokens: 16}
	if e.Type != agent.ModelError || e.Kind != agent.ErrorPermanent || e.Message == nil || e.Message.Usage == nil || *e.Message.Usage != want {
		t.Fatalf("last event %+v (message %+v), want a permanent error with usage %+v", e, e.Message, want)
	}
	if res.resp.StopReason != agent.StopError || res.resp.Kind != agent.ErrorPermanent {
		t.Fatalf("reply %+v", res.resp)
	}
}

// TestEndlessEvent: a server that never ends an event (no blank line)
// does not make the provider gather it in memory: past MaxStreamEvent the
// answer fails, permanent (a retry reads it no better), and the server
// could write little more than that. The SDK's decoder gathered up to
// 32 MiB a line, and data lines without end.
func TestEndlessEvent(t *testing.T) {
	t.Parallel()
	var written atomic.Int64
	done := make(chan struct{})
	ev := setup(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		defer close(done)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		line := append([]byte("data: "), bytes.Repeat([]byte("x"), 32<<10)...)
		line = append(line, '\n') // data lines, never a blank one
		for written.Load() < hugeBody {
			n, err := w.Write(line)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}, config{})
	res := ev.stream(t, userReq("hi"))
	onlyError(t, res, agent.ErrorPermanent)
	if e := last(res.events); !strings.Contains(e.Error, "larger than 8 MiB") {
		t.Fatalf("error %q", e.Error)
	}
	if n := len(ev.api.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server is still writing")
	}
	if n := written.Load(); n > 2*openai.MaxStreamEvent {
		t.Fatalf("the server wrote %d MiB", n>>20)
	}
}
