package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/openai"
)

func TestComplete(t *testing.T) {
	t.Parallel()
	ev := setup(t, sse(t, "parallel_tools.sse"), config{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req := userReq("hi")
	req.Tools = weatherTools
	resp, err := engine.Call[openai.CompleteResponse](ctx, ev.e, ev.p.CompleteFunction(), req)
	if err != nil {
		t.Fatal(err)
	}
	m := resp.Message
	calls := m.FunctionCalls()
	if m.StopReason != agent.StopFunctionCall || len(calls) != 2 || calls[0].FunctionID != "weather::get" || fmt.Sprint(calls[1].Arguments["b"]) != "2" ||
		m.Content[0].Text != "Checking both." || m.Usage.InputTokens != 151 || m.Provider != "openai" {
		t.Fatalf("message %+v", m)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestCompleteFailure(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		code   error
		kind   agent.ErrorKind
	}{
		{http.StatusTooManyRequests, wire.ErrUnavailable, agent.ErrorRateLimited},
		{http.StatusBadGateway, wire.ErrUnavailable, agent.ErrorTransient},
		{http.StatusUnauthorized, wire.ErrForbidden, agent.ErrorAuthExpired},
		{http.StatusBadRequest, wire.ErrInternal, agent.ErrorPermanent},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			ev := setup(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				jsonError(w, tc.status, map[string]string{"retry-after-ms": "5"}, "nope", "x", "")
			}, config{})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := engine.Call[openai.CompleteResponse](ctx, ev.e, ev.p.CompleteFunction(), userReq("hi"))
			var werr *wire.Error
			if !errors.Is(err, tc.code) || !errors.As(err, &werr) || werr.Details["kind"] != string(tc.kind) {
				t.Fatalf("error %#v, want %v with kind %s", err, tc.code, tc.kind)
			}
		})
	}
}

func TestModels(t *testing.T) {
	t.Parallel()
	const list = `{"object":"list","data":[` +
		`{"id":"gpt-4o-mini","object":"model","created":1721172741,"owned_by":"system"},` +
		`{"id":"llama3.2:latest","object":"model","created":1730000000,"owned_by":"library"},` +
		`{"id":"kimi-k2","object":"model","created":0,"owned_by":"moonshot","display_name":"Kimi K2"}]}`
	ev := setup(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(list))
	}, config{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	want := openai.ModelsResponse{Models: []openai.ModelInfo{
		{ID: "gpt-4o-mini", CreatedAt: 1721172741000},
		{ID: "llama3.2:latest", CreatedAt: 1730000000000},
		{ID: "kimi-k2", DisplayName: "Kimi K2"},
	}}
	got, err := engine.Call[openai.ModelsResponse](ctx, ev.e, ev.p.ModelsFunction(), openai.ModelsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("models %+v, want %+v", got, want)
	}
	// A JSON caller with an empty payload, as `nats req` sends it.
	for _, body := range []string{"", "{}"} {
		out, _, err := ev.e.TriggerRaw(ctx, ev.p.ModelsFunction(), []byte(body), wire.JSON)
		if err != nil || !strings.Contains(string(out), `"id":"kimi-k2"`) || !strings.Contains(string(out), `"display_name":"Kimi K2"`) {
			t.Fatalf("payload %q: %s, %v", body, out, err)
		}
	}
	if r := ev.api.requests()[0]; r.Header.Get("Authorization") != "Bearer "+testKey {
		t.Fatalf("models request without the credential: %v", r.Header)
	}
}

// TestProviderName serves an OpenAI-compatible server under its own name.
func TestProviderName(t *testing.T) {
	t.Parallel()
	ev := setup(t, sse(t, "thinking_ollama.sse"), config{opts: []openai.Option{openai.WithName("ollama")}})
	if ev.p.StreamFunction() != "provider::ollama::stream" || ev.p.CompleteFunction() != "provider::ollama::complete" || ev.p.ModelsFunction() != "provider::ollama::models" {
		t.Fatalf("functions %s %s %s", ev.p.StreamFunction(), ev.p.CompleteFunction(), ev.p.ModelsFunction())
	}
	res := ev.stream(t, userReq("hi"))
	if res.err != nil || last(res.events).Message.Provider != "ollama" {
		t.Fatalf("err %v, last %+v", res.err, last(res.events))
	}
	if _, ok := ev.auth.providers.Load("ollama"); !ok {
		t.Fatal("auth::get_token was not asked for provider ollama")
	}
}

// TestReaderLeaves: a reader that closes the channel mid-stream stops the
// request to the server, and the function answers canceled: while tokens
// flow (the next write fails) and while the server sends nothing (the
// writer's Gone), over the bus and with local calls.
func TestReaderLeaves(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		wait  bool // the server sends one token, then nothing
		local bool
	}{
		{"streaming", false, false},
		{"streaming, local", false, true},
		{"model waits", true, false},
		{"model waits, local", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cancelled := make(chan struct{})
			ev := setup(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				w.Header().Set("Content-Type", "text/event-stream")
				fl := w.(http.Flusher)
				for i := 0; ; i++ {
					if _, err := fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i); err != nil {
						break
					}
					fl.Flush()
					pause := 5 * time.Millisecond
					if c.wait {
						pause = 20 * time.Second
					}
					select {
					case <-r.Context().Done():
						close(cancelled)
						return
					case <-time.After(pause):
					}
				}
			}, config{local: c.local})
			res := ev.streamWith(t, userReq("hi"), func(r *channel.Reader, e agent.ModelEvent) {
				if e.Type == agent.ModelTextDelta {
					_ = r.Close()
				}
			})
			if !errors.Is(res.err, wire.ErrCanceled) {
				t.Fatalf("function error %v, want canceled", res.err)
			}
			select {
			case <-cancelled:
			case <-time.After(5 * time.Second):
				t.Fatal("the request to the server was not cancelled")
			}
		})
	}
}

// TestCloseStopsStreams: closing the worker ends a stream in flight with
// an unavailable error frame.
func TestCloseStopsStreams(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	ev := setup(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}, config{})
	defer close(release)
	res := ev.streamWith(t, userReq("hi"), func(r *channel.Reader, e agent.ModelEvent) {
		if e.Type == agent.ModelTextDelta {
			go func() { _ = ev.w.Close(context.Background()) }()
		}
	})
	if !errors.Is(res.end, wire.ErrUnavailable) || !errors.Is(res.err, wire.ErrUnavailable) {
		t.Fatalf("stream end %v, function error %v; want unavailable", res.end, res.err)
	}
}

func TestProvision(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		settings map[string]string
		stream   string // the stream function, "" when Provision fails
	}{
		{name: "defaults", settings: nil, stream: "provider::openai::stream"},
		{name: "ollama", settings: map[string]string{"name": "ollama", "base_url": "http://localhost:11434/v1", "require_key": "false", "max_retries": "0", "idle_timeout": "15m"}, stream: "provider::ollama::stream"},
		{name: "kimi", settings: map[string]string{"name": "kimi", "base_url": "https://api.moonshot.ai/v1", "api_key_env": "MOONSHOT_API_KEY",
			"max_tokens_field": "max_tokens", "reasoning_effort": "never", "header.X-Trace": "on", "coalesce": "0"}, stream: "provider::kimi::stream"},
		{name: "unknown setting", settings: map[string]string{"model": "x"}},
		{name: "bad name", settings: map[string]string{"name": "a::b"}},
		{name: "bad url", settings: map[string]string{"base_url": "localhost:11434"}},
		{name: "bad bool", settings: map[string]string{"require_key": "maybe"}},
		{name: "bad retries", settings: map[string]string{"max_retries": "99"}},
		{name: "bad field", settings: map[string]string{"max_tokens_field": "tokens"}},
		{name: "bad effort", settings: map[string]string{"reasoning_effort": "max"}},
		{name: "bad coalesce", settings: map[string]string{"coalesce": "16KiB"}},
		{name: "coalesce too big", settings: map[string]string{"coalesce": "1048576"}},
		{name: "bad idle timeout", settings: map[string]string{"idle_timeout": "3 minutes"}},
		{name: "zero idle timeout", settings: map[string]string{"idle_timeout": "0s"}},
		{name: "bad header", settings: map[string]string{"header.Bad Name": "x"}},
		{name: "header newline", settings: map[string]string{"header.X-A": "a\r\nb"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := &openai.Worker{}
			err := w.Provision(t.Context(), workers.Env{Settings: map[string]map[string]string{openai.WorkerName: tc.settings}})
			if tc.stream == "" {
				if !errors.Is(err, engine.ErrInvalidOption) {
					t.Fatalf("Provision error %v, want ErrInvalidOption", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := w.Provider().StreamFunction(); got != tc.stream {
				t.Fatalf("stream function %s, want %s", got, tc.stream)
			}
		})
	}
}

// TestModuleRegistered starts the module through the registry, as a node
// does, and finds its functions.
func TestModuleRegistered(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	env := workers.Env{Settings: map[string]map[string]string{openai.WorkerName: {"name": "local", "require_key": "false"}}}
	run, err := workers.Global().Start(t.Context(), e, env, openai.WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close(context.Background())
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = engine.Call[openai.CompleteResponse](ctx, e, "provider::local::complete", agent.ProviderRequest{})
	if !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("complete of an empty request: %v, want invalid_payload", err)
	}
	w := openai.NewWorker(nil)
	if err := w.Start(ctx, enginetest.NewEngine(t, ns)); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx, e); !errors.Is(err, openai.ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	_ = w.Close(ctx)
}

func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]openai.Option{
		"nil client":   openai.WithHTTPClient(nil),
		"backoff":      openai.WithBackoff(0, time.Second),
		"max wait":     openai.WithBackoff(time.Second, time.Millisecond),
		"ttl":          openai.WithCredentialTTL(-1),
		"env name":     openai.WithAPIKeyEnv(""),
		"nil logger":   openai.WithLogger(nil),
		"nil clock":    openai.WithClock(nil),
		"nil lookup":   openai.WithLookupEnv(nil),
		"retries":      openai.WithMaxRetries(-1),
		"scheme":       openai.WithBaseURL("ftp://x/v1"),
		"empty header": openai.WithHeader("", "x"),
		"coalesce":     openai.WithCoalesce(-1),
		"coalesce max": openai.WithCoalesce(openai.MaxCoalesce + 1),
		"idle timeout": openai.WithIdleTimeout(0),
	} {
		if _, err := openai.New(opt); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	// A refused base URL never echoes its secret parts.
	_, err := openai.New(openai.WithBaseURL("gopher://user:pw-secret@host/v1?key=sk-123"))
	if err == nil || strings.Contains(err.Error(), "pw-secret") || strings.Contains(err.Error(), "sk-123") {
		t.Fatalf("error %v", err)
	}
}

// TestJSONCaller: a caller that speaks JSON (the nats CLI) gets JSON
// frames that decode to the same events as msgpack frames.
func TestJSONCaller(t *testing.T) {
	t.Parallel()
	// One event per delta of the server, so both streams are the same.
	ev := setup(t, sse(t, "parallel_tools.sse"), config{opts: []openai.Option{openai.WithCoalesce(0)}})
	req := userReq("hi")
	req.Tools = weatherTools
	want := ev.stream(t, req).events

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := channel.Open(ctx, ev.e)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req.Channel = r.ID()
	body, err := wire.JSON.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		out, _, err := ev.e.TriggerRaw(ctx, ev.p.StreamFunction(), body, wire.JSON)
		if err == nil && !strings.Contains(string(out), `"stop_reason":"function_call"`) {
			err = fmt.Errorf("reply %s", out)
		}
		done <- err
	}()
	var got []agent.ModelEvent
	for {
		f, err := r.Next(ctx)
		if errors.Is(err, channel.ErrEnd) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Codec != wire.JSON {
			t.Fatalf("frame %d in %s", f.Seq, f.Codec.ContentType())
		}
		var e agent.ModelEvent
		if err := f.Decode(&e); err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Fatalf("JSON events\n%s\nmsgpack events\n%s", gb, wb)
	}
}
