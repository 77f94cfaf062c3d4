package anthropic_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/anthropic"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// epoch is the fixed clock of the tests.
var epoch = time.UnixMilli(1_700_000_000_000)

// testKey is the API key the fake auth worker hands out; no frame, reply or
// log line may ever contain it.
const testKey = "sk-ant-api03-SECRET-TESTKEY-0123456789abcdef"

// sse reads a recorded stream of testdata.
func sse(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".sse"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// response is one scripted answer of the fake Messages API.
type response struct {
	status int
	header map[string]string
	body   string
	// cut > 0 sends that many bytes of the body, then drops the
	// connection.
	cut int
	// hold keeps the stream open after the body until the client leaves.
	hold bool
	// linger keeps the stream open that long after the body, as a server
	// that ends the body a moment after the last event.
	linger time.Duration
	// flush writes the body event by event, flushing each, as the API
	// streams (by default the body goes out at once).
	flush bool
	// endless follows the body with filler, generated while it is
	// written, until the client leaves or endlessSize bytes went out.
	endless *endless
	// silent sends nothing, not even the headers, until the client
	// leaves.
	silent bool
	// delay holds the response that long before its headers (less when
	// the client leaves first).
	delay time.Duration
	// write, when set, writes the body after the headers in place of
	// body.
	write func(w http.ResponseWriter, r *http.Request)
}

// endlessSize is how much filler an endless body holds.
const endlessSize = 256 << 20

// endless counts what the server could write of an endless body; done is
// closed when the first response with it ends.
type endless struct {
	written atomic.Int64
	once    sync.Once
	done    chan struct{}
}

func newEndless() *endless { return &endless{done: make(chan struct{})} }

func (e *endless) write(w io.Writer) {
	defer e.once.Do(func() { close(e.done) })
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	for e.written.Load() < endlessSize {
		n, err := w.Write(chunk)
		e.written.Add(int64(n))
		if err != nil {
			return
		}
	}
}

func ok(body string) response { return response{status: 200, body: body} }

func apiError(status int, typ, msg string) response {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
	return response{status: status, body: string(b)}
}

// received is one request the fake API got.
type received struct {
	method, path string
	query        string
	remote       string
	header       http.Header
	body         []byte
	at           time.Time
	// gone is closed when the request's context ends (the client left).
	gone <-chan struct{}
}

// fakeAPI is an httptest server that answers each request with the next
// scripted response (the last one repeats) and records what it got.
type fakeAPI struct {
	t   testing.TB
	srv *httptest.Server

	mu       sync.Mutex
	script   []response
	requests []received
	// accepted, when set, is the only x-api-key the server takes: it
	// answers any other with a 401, as the API does once a key is revoked,
	// without using up the script.
	accepted string
	refused  int
}

func newFakeAPI(t testing.TB, script ...response) *fakeAPI {
	t.Helper()
	f := &fakeAPI{t: t, script: script}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, received{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, remote: r.RemoteAddr, header: r.Header.Clone(), body: body, at: time.Now(), gone: r.Context().Done()})
	var resp response
	if n := len(f.requests) - f.refused; f.accepted != "" && r.Header.Get("X-Api-Key") != f.accepted {
		f.refused++
		resp = apiError(http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
	} else if n <= len(f.script) {
		resp = f.script[n-1]
	} else if len(f.script) > 0 {
		resp = f.script[len(f.script)-1]
	} else {
		resp = apiError(500, "api_error", "no response scripted")
	}
	f.mu.Unlock()

	if resp.silent {
		<-r.Context().Done()
		return
	}
	if resp.delay > 0 {
		select {
		case <-time.After(resp.delay):
		case <-r.Context().Done():
			return
		}
	}
	ct := "text/event-stream; charset=utf-8"
	if resp.status != 200 || strings.HasPrefix(resp.body, "{") {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("request-id", "req_011CSHoEeqs5C35K2UUqR7Fy")
	for k, v := range resp.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.status)
	if resp.cut > 0 {
		_, _ = io.WriteString(w, resp.body[:resp.cut])
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			f.t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
		return
	}
	switch {
	case resp.write != nil:
		resp.write(w, r)
	case resp.flush:
		serveSSE(w, resp.body)
	default:
		_, _ = io.WriteString(w, resp.body)
		w.(http.Flusher).Flush()
	}
	if resp.endless != nil {
		resp.endless.write(w)
	}
	if resp.hold {
		<-r.Context().Done()
	}
	if resp.linger > 0 {
		select {
		case <-time.After(resp.linger):
		case <-r.Context().Done():
		}
	}
}

// serveSSE writes body event by event (an event ends with a blank line),
// flushing each as the API does.
func serveSSE(w http.ResponseWriter, body string) {
	fl := w.(http.Flusher)
	for len(body) > 0 {
		n := strings.Index(body, "\n\n") + 2
		if n < 2 {
			n = len(body)
		}
		_, _ = io.WriteString(w, body[:n])
		fl.Flush()
		body = body[n:]
	}
}

// acceptOnly makes key the only API key the server takes from now on.
func (f *fakeAPI) acceptOnly(key string) {
	f.mu.Lock()
	f.accepted = key
	f.mu.Unlock()
}

func (f *fakeAPI) received() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.requests...)
}

// fakeAuth serves auth::get_token.
type fakeAuth struct {
	mu    sync.Mutex
	cred  *agent.Credential
	calls int
}

func (a *fakeAuth) set(c *agent.Credential) {
	a.mu.Lock()
	a.cred = c
	a.mu.Unlock()
}

func (a *fakeAuth) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

// env is one test's world: a NATS server, the provider worker on its own
// engine, an auth worker, the fake API and a client engine.
type env struct {
	ns   *server.Server
	e    *engine.Engine // the caller (the orchestrator's side)
	api  *fakeAPI
	auth *fakeAuth
	logs *enginetest.Buffer
	w    *anthropic.Worker
	now  *clock
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type config struct {
	noAuth bool              // do not register auth::get_token
	cred   *agent.Credential // what it answers (nil: null)
	env    map[string]string // the environment the provider sees
	opts   []anthropic.Option
	local  bool // local calls on the provider's and the caller's engines, as in `iii up`
}

// setup starts everything; by default the auth worker hands out testKey.
func setup(t testing.TB, api *fakeAPI, cfg config) *env {
	t.Helper()
	if !cfg.noAuth && cfg.cred == nil && cfg.env == nil {
		cfg.cred = &agent.Credential{Type: agent.CredentialAPIKey, Key: testKey}
	}
	ns := enginetest.RunServer(t)
	en := &env{ns: ns, api: api, auth: &fakeAuth{cred: cfg.cred}, logs: &enginetest.Buffer{}, now: &clock{t: epoch}}
	if !cfg.noAuth {
		ae := enginetest.NewEngine(t, ns)
		aw, err := ae.Worker("auth")
		if err != nil {
			t.Fatal(err)
		}
		err = aw.Register(engine.Function{ID: anthropic.AuthFunction, Handler: engine.Typed(func(_ context.Context, req struct {
			Provider string `json:"provider"`
		}) (*agent.Credential, error) {
			en.auth.mu.Lock()
			defer en.auth.mu.Unlock()
			en.auth.calls++
			if req.Provider != anthropic.ProviderName {
				t.Errorf("auth::get_token asked for provider %q", req.Provider)
			}
			return en.auth.cred, nil
		})})
		if err != nil {
			t.Fatal(err)
		}
	}
	opts := []anthropic.Option{
		anthropic.WithBaseURL(api.srv.URL),
		anthropic.WithHTTPClient(api.srv.Client()),
		anthropic.WithClock(en.now.Now),
		anthropic.WithBackoff(time.Millisecond),
		anthropic.WithEnvLookup(func(k string) (string, bool) { v, ok := cfg.env[k]; return v, ok }),
	}
	p, err := anthropic.New(append(opts, cfg.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	en.w = anthropic.NewWorker(p)
	// The provider logs through its engine's logger.
	logger := slog.New(slog.NewTextHandler(en.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := en.w.Start(t.Context(), enginetest.NewEngine(t, ns, engine.WithLogger(logger), engine.WithLocalCalls(cfg.local))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = en.w.Close(ctx)
	})
	en.e = enginetest.NewEngine(t, ns, engine.WithLocalCalls(cfg.local))
	return en
}

// result is one stream call as the orchestrator sees it.
type result struct {
	Events []agent.ModelEvent       `json:"events"`
	Reply  anthropic.StreamResponse `json:"reply"`
	end    error                    // what ended Next: channel.ErrEnd, or a failure
	err    error                    // the function's own error
}

// stream opens a channel, calls the stream function and reads every frame,
// as the orchestrator does; each, if set, sees every event and may close
// the reader. opts configure the reader.
func (en *env) stream(t testing.TB, req anthropic.StreamRequest, each func(r *channel.Reader, ev agent.ModelEvent), opts ...channel.Option) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, err := channel.Open(ctx, en.e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req.Channel = r.ID()
	type reply struct {
		resp anthropic.StreamResponse
		err  error
	}
	done := make(chan reply, 1)
	go func() {
		resp, err := engine.Call[anthropic.StreamResponse](ctx, en.e, anthropic.StreamFunction, req)
		if err != nil {
			_ = r.Close() // unblock Next, as the orchestrator does
		}
		done <- reply{resp, err}
	}()
	var res result
	for {
		f, err := r.Next(ctx)
		if err != nil {
			res.end = err
			break
		}
		var ev agent.ModelEvent
		if err := f.Decode(&ev); err != nil {
			t.Fatalf("frame %d: %v", f.Seq, err)
		}
		if err := ev.Validate(); err != nil {
			t.Errorf("frame %d: invalid event %+v: %v", f.Seq, ev, err)
		}
		res.Events = append(res.Events, ev)
		if each != nil {
			each(r, ev)
		}
	}
	rep := <-done
	res.Reply, res.err = rep.resp, rep.err
	return res
}

func isEnd(err error) bool { return errors.Is(err, channel.ErrEnd) }

func userReq(text string) anthropic.StreamRequest {
	return anthropic.StreamRequest{Model: "claude-opus-4-20250514", Messages: []agent.Message{agent.UserText(text, 1)}}
}

func types(evs []agent.ModelEvent) []agent.ModelEventType {
	out := make([]agent.ModelEventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

func last(evs []agent.ModelEvent) agent.ModelEvent {
	if len(evs) == 0 {
		return agent.ModelEvent{}
	}
	return evs[len(evs)-1]
}

// golden compares got, as indented JSON, with testdata/golden/name.json
// (rewritten with -update).
func golden(t testing.TB, name string, got any) {
	t.Helper()
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	path := filepath.Join("testdata", "golden", name+".json")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(b, want) {
		t.Errorf("%s differs from %s (run with -update to accept):\n--- got\n%s\n--- want\n%s", name, path, b, want)
	}
}

// normalJSON re-encodes a JSON document with sorted keys and indentation.
func normalJSON(t testing.TB, raw []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, raw)
	}
	return v
}
