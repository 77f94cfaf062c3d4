package openai_test

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

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/openai"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// epoch is the fixed clock of the tests.
var epoch = time.UnixMilli(1_700_000_000_000)

// testKey is the credential auth::get_token hands out in the tests.
const testKey = "sk-test-9f8e7d6c5b4a3210SECRETKEY"

// envKey is the credential of the fake environment.
const envKey = "sk-env-0123456789abcdefENVKEY"

// apiRequest is one request the fake API received.
type apiRequest struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// fakeAPI stands in for an OpenAI-compatible server: handle answers the
// n-th request (from 0).
type fakeAPI struct {
	srv    *httptest.Server
	handle func(w http.ResponseWriter, r *http.Request, n int)

	mu   sync.Mutex
	reqs []apiRequest
}

func newFakeAPI(t testing.TB, handle func(w http.ResponseWriter, r *http.Request, n int)) *fakeAPI {
	t.Helper()
	f := &fakeAPI{handle: handle}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		n := len(f.reqs)
		f.reqs = append(f.reqs, apiRequest{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		f.mu.Unlock()
		f.handle(w, r, n)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) requests() []apiRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]apiRequest(nil), f.reqs...)
}

// sse answers with a recorded stream from testdata.
func sse(t testing.TB, name string) func(w http.ResponseWriter, r *http.Request, n int) {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return func(w http.ResponseWriter, r *http.Request, _ int) { serveSSE(w, body, -1) }
}

// serveSSE writes body event by event (an event ends with a blank line),
// flushing each as a server does. With drop ≥ 0 it writes that many events
// and then drops the connection without ending the response.
func serveSSE(w http.ResponseWriter, body []byte, drop int) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	events := bytes.SplitAfter(body, []byte("\n\n"))
	for i, ev := range events {
		if drop >= 0 && i == drop {
			hangUp(w)
			return
		}
		if len(ev) == 0 {
			continue
		}
		_, _ = w.Write(ev)
		if fl != nil {
			fl.Flush()
		}
	}
}

// hangUp closes the connection under a response in progress.
func hangUp(w http.ResponseWriter) {
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("response writer cannot hijack")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

// jsonError answers with an OpenAI-style error body.
func jsonError(w http.ResponseWriter, status int, header map[string]string, msg, typ, code string) {
	for k, v := range header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if code != "" {
		e["code"] = code
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
}

// authMode is what the fake auth::get_token does.
type authMode int

const (
	authKey    authMode = iota // answers {type: api_key, key: testKey}
	authNull                   // answers null
	authAbsent                 // is not registered
	authFail                   // fails with an internal error
)

// fakeAuth counts the calls of the fake auth::get_token.
type fakeAuth struct {
	calls     atomic.Int64
	providers sync.Map // provider names asked for
	key       atomic.Pointer[string]
}

// setKey makes the fake auth::get_token (authKey) hand out key from now on
// in place of testKey, as after an auth::set_token.
func (a *fakeAuth) setKey(key string) { a.key.Store(&key) }

// waits records the waits between attempts.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) sleep(_ context.Context, d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.d = append(w.d, d)
	return nil
}

func (w *waits) list() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.d...)
}

// env is one test's world: a server, the provider worker on its own
// connection, a client engine (the orchestrator's) with the fake auth.
type env struct {
	e     *engine.Engine
	w     *openai.Worker
	p     *openai.Provider
	api   *fakeAPI
	auth  *fakeAuth
	logs  *enginetest.Buffer
	waits *waits
}

// config of setup.
type config struct {
	auth authMode
	// env is the fake process environment.
	env  map[string]string
	opts []openai.Option
	// local turns local calls on for the provider's and the caller's
	// engines, as in `iii up`.
	local bool
}

func setup(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int), cfg config) *env {
	t.Helper()
	ns := enginetest.RunServer(t)
	ev := &env{api: newFakeAPI(t, handle), auth: &fakeAuth{}, logs: &enginetest.Buffer{}, waits: &waits{}}
	logger := slog.New(slog.NewJSONHandler(ev.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts := append([]openai.Option{
		openai.WithBaseURL(ev.api.srv.URL + "/v1"),
		openai.WithHTTPClient(ev.api.srv.Client()),
		openai.WithClock(func() time.Time { return epoch }),
		openai.WithLogger(logger),
		openai.WithSleep(ev.waits.sleep),
		openai.WithLookupEnv(func(k string) (string, bool) { v, ok := cfg.env[k]; return v, ok }),
	}, cfg.opts...)
	p, err := openai.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ev.p = p
	ev.w = openai.NewWorker(p)
	if err := ev.w.Start(t.Context(), enginetest.NewEngine(t, ns, engine.WithLocalCalls(cfg.local))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ev.w.Close(ctx)
	})
	ev.e = enginetest.NewEngine(t, ns, engine.WithLocalCalls(cfg.local))
	if cfg.auth != authAbsent {
		ew, err := ev.e.Worker("auth-fake")
		if err != nil {
			t.Fatal(err)
		}
		mode := cfg.auth
		err = ew.Register(engine.Function{ID: openai.AuthFunction, Handler: engine.Typed(
			func(_ context.Context, req struct {
				Provider string `json:"provider"`
			}) (*agent.Credential, error) {
				ev.auth.calls.Add(1)
				ev.auth.providers.Store(req.Provider, true)
				switch mode {
				case authNull:
					return nil, nil
				case authFail:
					return nil, wire.Errorf(wire.CodeInternal, "auth store broken")
				}
				if k := ev.auth.key.Load(); k != nil {
					return &agent.Credential{Type: agent.CredentialAPIKey, Key: *k}, nil
				}
				return &agent.Credential{Type: agent.CredentialAPIKey, Key: testKey}, nil
			})})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ev
}

// result is one stream call as the orchestrator sees it.
type result struct {
	events []agent.ModelEvent
	frames [][]byte
	end    error // what ended Next: channel.ErrEnd, or a failure
	resp   openai.StreamResponse
	err    error // the function's own error
}

// stream opens a channel, calls the stream function and reads every frame.
func (ev *env) stream(t *testing.T, req agent.ProviderRequest) result {
	t.Helper()
	return ev.streamWith(t, req, nil)
}

// streamWith is stream with a hook called after each event; the hook may
// close the reader. opts configure the reader.
func (ev *env) streamWith(t *testing.T, req agent.ProviderRequest, each func(r *channel.Reader, e agent.ModelEvent), opts ...channel.Option) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, err := channel.Open(ctx, ev.e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req.Channel = r.ID()
	type reply struct {
		resp openai.StreamResponse
		err  error
	}
	done := make(chan reply, 1)
	go func() {
		resp, err := engine.Call[openai.StreamResponse](ctx, ev.e, ev.p.StreamFunction(), req)
		done <- reply{resp, err}
	}()
	var res result
	for {
		f, err := r.Next(ctx)
		if err != nil {
			res.end = err
			break
		}
		var e agent.ModelEvent
		if err := f.Decode(&e); err != nil {
			t.Fatalf("frame %d: %v", f.Seq, err)
		}
		if err := e.Validate(); err != nil {
			t.Errorf("frame %d: invalid event %+v: %v", f.Seq, e, err)
		}
		res.events = append(res.events, e)
		res.frames = append(res.frames, f.Data)
		if each != nil {
			each(r, e)
		}
	}
	rep := <-done
	res.resp, res.err = rep.resp, rep.err
	return res
}

func isEnd(err error) bool { return errors.Is(err, channel.ErrEnd) }

func last(evs []agent.ModelEvent) agent.ModelEvent {
	if len(evs) == 0 {
		return agent.ModelEvent{}
	}
	return evs[len(evs)-1]
}

func types(evs []agent.ModelEvent) []agent.ModelEventType {
	out := make([]agent.ModelEventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// userReq is a request with one user message.
func userReq(text string) agent.ProviderRequest {
	return agent.ProviderRequest{Model: "gpt-4o-mini", Messages: []agent.Message{agent.UserText(text, 1)}}
}

// golden compares got (as indented JSON) with testdata/golden/name, or
// rewrites it with -update.
func golden(t *testing.T, name string, got any) {
	t.Helper()
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	path := filepath.Join("testdata", "golden", name)
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
	if !jsonEqual(t, want, b) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, b, want)
	}
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("bad JSON %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("bad JSON %s: %v", b, err)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// contains reports whether any of the texts holds s.
func contains(s string, texts ...string) bool {
	for _, t := range texts {
		if strings.Contains(t, s) {
			return true
		}
	}
	return false
}
