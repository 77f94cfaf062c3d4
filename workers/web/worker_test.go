package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
)

const fnSubject = "iii.fn.web.fetch"

// start starts a server, an engine and a worker built with opts.
func start(t *testing.T, serverOpts []enginetest.ServerOption, opts ...Option) (*server.Server, *engine.Engine, *Worker) {
	t.Helper()
	ns := enginetest.RunServer(t, serverOpts...)
	e := enginetest.NewEngine(t, ns)
	w := NewWorker(opts...)
	if err := w.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return ns, e, w
}

func TestWorkerOverNATS(t *testing.T) {
	t.Parallel()
	page := serve(t, text("text/html; charset=utf-8", `<title>Hi</title><h1>Hello</h1><p>from <a href="/x">here</a></p>`))
	ns, e, _ := start(t, nil, WithAllowPrivate(true))
	ctx := context.Background()

	// From Go (msgpack).
	res, err := engine.Call[FetchResponse](ctx, e, FetchFunction, FetchRequest{URL: page.URL})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 || res.Content != "Hi\n\n# Hello\n\nfrom [here]("+page.URL+"/x)" || res.URL != page.URL {
		t.Fatalf("%+v", res)
	}

	// From a shell (JSON).
	nc := enginetest.Connect(t, ns)
	m, err := nc.Request(fnSubject, []byte(`{"url":"`+page.URL+`","max_bytes":20}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(m.Data, &got); err != nil {
		t.Fatalf("%s: %v", m.Data, err)
	}
	if got["status"] != 200.0 || got["truncated"] != true || got["bytes"] != 20.0 {
		t.Fatalf("JSON answer %s", m.Data)
	}

	// Bad input is a coded error.
	for _, req := range []any{
		FetchRequest{URL: "file:///etc/passwd"}, FetchRequest{}, map[string]any{"url": 42},
		FetchRequest{URL: "/relative/path"}, FetchRequest{URL: "https://example.com/" + strings.Repeat("a", 16<<10)},
	} {
		err := e.Trigger(ctx, FetchFunction, req, nil)
		if !errors.Is(err, wire.ErrInvalidPayload) {
			t.Fatalf("%v: %v", req, err)
		}
	}
	m, err = nc.Request(fnSubject, []byte(`not json`), 5*time.Second)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "400" {
		t.Fatalf("garbage: %v %v", m.Header, err)
	}
}

func TestWorkerRefusesInternalByDefault(t *testing.T) {
	t.Parallel()
	page := serve(t, text("text/plain", "secret"))
	_, e, _ := start(t, nil)
	err := e.Trigger(context.Background(), FetchFunction, FetchRequest{URL: page.URL}, nil)
	if !errors.Is(err, wire.ErrForbidden) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("%v", err)
	}
}

// The module starts by name through the registry, with its settings.
func TestWorkerFromRegistry(t *testing.T) {
	t.Parallel()
	page := serve(t, text("text/plain", "ok"))
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	run, err := workers.Global().Start(ctx, e, workers.Env{Settings: map[string]map[string]string{
		WorkerName: {SettingAllowPrivate: "true", SettingMaxBytes: "1"},
	}}, WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Close(context.Background()) })
	res, err := engine.Call[FetchResponse](ctx, e, FetchFunction, FetchRequest{URL: page.URL})
	if err != nil || res.Content != "o" || !res.Truncated {
		t.Fatalf("%+v, %v", res, err)
	}
}

// An answer larger than the server's max payload is cut to fit, for either
// codec, even when JSON escapes every character of the content.
func TestWorkerFitsMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	body := strings.Repeat("<\x01", 100<<10)
	page := serve(t, text("text/plain", body))
	ns, e, _ := start(t, []enginetest.ServerOption{enginetest.WithMaxPayload(maxPayload)}, WithAllowPrivate(true))
	res, err := engine.Call[FetchResponse](context.Background(), e, FetchFunction, FetchRequest{URL: page.URL})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.Bytes != int64(len(body)) || len(res.Content) < maxPayload/2 || len(res.Content) > maxPayload || !strings.HasPrefix(body, res.Content) {
		t.Fatalf("msgpack: truncated %v bytes %d content %d", res.Truncated, res.Bytes, len(res.Content))
	}
	nc := enginetest.Connect(t, ns)
	m, err := nc.Request(fnSubject, []byte(`{"url":"`+page.URL+`"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var jres FetchResponse
	if err := json.Unmarshal(m.Data, &jres); err != nil {
		t.Fatalf("%.200s: %v", m.Data, err)
	}
	if len(m.Data) > maxPayload || !jres.Truncated || len(jres.Content) < maxPayload/12 || !strings.HasPrefix(body, jres.Content) {
		t.Fatalf("JSON: %d bytes, truncated %v, content %d", len(m.Data), jres.Truncated, len(jres.Content))
	}
}

// A body over 2 MiB asked for in full, on a server with the default max
// payload (1 MiB), is an answer cut to fit, never a failed reply.
func TestWorkerLargeBodyDefaultPayload(t *testing.T) {
	t.Parallel()
	const size = 2<<20 + 1<<18
	bodies := map[string]string{
		"/text": strings.Repeat("0123456789abcde\n", size/16),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/text", text("text/plain", bodies["/text"]))
	page := serve(t, mux.ServeHTTP)
	ns, e, _ := start(t, nil, WithAllowPrivate(true))
	nc := enginetest.Connect(t, ns)
	for path, body := range bodies {
		res, err := engine.Call[FetchResponse](context.Background(), e, FetchFunction, FetchRequest{URL: page.URL + path, MaxBytes: size})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !res.Truncated || res.Bytes != int64(len(body)) || int64(len(res.Content)) > nc.MaxPayload() || len(res.Content) < 512<<10 {
			t.Fatalf("%s msgpack: truncated %v bytes %d content %d", path, res.Truncated, res.Bytes, len(res.Content))
		}
		m, err := nc.Request(fnSubject, []byte(`{"url":"`+page.URL+path+`","max_bytes":`+strconv.Itoa(size)+`}`), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var jres FetchResponse
		if err := json.Unmarshal(m.Data, &jres); err != nil || !jres.Truncated || jres.Bytes != int64(len(body)) || len(jres.Content) < 512<<10 {
			t.Fatalf("%s JSON: %.200s: %v", path, m.Data, err)
		}
	}
}

func TestEncodeFitting(t *testing.T) {
	t.Parallel()
	res := FetchResponse{URL: "https://example.com/", Status: 200, Content: strings.Repeat("é<\x00", 1000)}
	for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
		for _, limit := range []int64{100, 1000, 5000, 1 << 20} {
			body, err := encodeFitting(codec, res, limit)
			if limit == 100 && codec == wire.JSON {
				// The fields alone do not fit in 100 bytes of JSON.
				if err == nil && int64(len(body)) > limit {
					t.Fatalf("%d bytes over a %d limit", len(body), limit)
				}
				continue
			}
			if err != nil || int64(len(body)) > limit {
				t.Fatalf("%s limit %d: %d bytes, %v", codec.ContentType(), limit, len(body), err)
			}
			var back FetchResponse
			if err := codec.Unmarshal(body, &back); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(res.Content, back.Content) || back.Truncated != (back.Content != res.Content) {
				t.Fatalf("%s limit %d: content %d bytes, truncated %v", codec.ContentType(), limit, len(back.Content), back.Truncated)
			}
		}
	}
	if _, err := encodeFitting(wire.JSON, FetchResponse{URL: strings.Repeat("x", 200)}, 50); !errors.Is(err, wire.ErrInternal) {
		t.Fatalf("no room for the fields: %v", err)
	}
}

func TestWorkerSkillPublished(t *testing.T) {
	t.Parallel()
	_, e, _ := start(t, nil)
	ctx := context.Background()
	key, err := subjects.SkillKey(WorkerName, FetchFunction)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := e.JetStream().KeyValue(ctx, subjects.SkillsBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(entry.Value())
	for _, want := range []string{"---\ntitle:", "description:", "## Arguments", "## Errors", "forbidden", "binary"} {
		if !strings.Contains(doc, want) {
			t.Errorf("skill lacks %q", want)
		}
	}
}

func TestWorkerLifecycle(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	w := NewWorker()
	if w.Fetcher() != nil {
		t.Fatal("a fetcher before Start")
	}
	if err := w.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	if w.Fetcher() == nil {
		t.Fatal("no fetcher after Start")
	}
	if err := w.Start(ctx, e); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.Start(ctx, e); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
	if err := e.Trigger(ctx, FetchFunction, FetchRequest{URL: "https://example.com/"}, nil); !errors.Is(err, wire.ErrFunctionNotFound) {
		t.Fatalf("after Close: %v", err)
	}
	bad := NewWorker(WithMaxBytes(-1))
	if err := bad.Start(ctx, e); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("bad option: %v", err)
	}
}

// Close ends a fetch in flight: the caller hears unavailable at once.
func TestWorkerCloseEndsFetches(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	var once sync.Once
	hang := serve(t, func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(arrived) })
		<-r.Context().Done()
	})
	_, e, w := start(t, nil, WithAllowPrivate(true))
	errc := make(chan error, 1)
	go func() {
		errc <- e.Trigger(context.Background(), FetchFunction, FetchRequest{URL: hang.URL, TimeoutMs: 30000}, nil)
	}()
	<-arrived
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "shutting down") {
			t.Fatalf("%v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the fetch outlived Close")
	}
}

// A caller's budget shorter than the fetch's timeout still gets the
// timeout answer, not silence.
func TestWorkerCallerBudget(t *testing.T) {
	t.Parallel()
	hang := serve(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	_, e, _ := start(t, nil, WithAllowPrivate(true))
	// 3 s, not less: the worker answers a margin before the caller's
	// deadline, which a loaded machine (CI beside other tests) can eat.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := e.Trigger(ctx, FetchFunction, FetchRequest{URL: hang.URL}, nil)
	if !errors.Is(err, wire.ErrTimeout) || !strings.Contains(err.Error(), "caller's deadline") {
		t.Fatalf("%v", err)
	}
}

func TestProvision(t *testing.T) {
	t.Parallel()
	tests := []struct {
		settings map[string]string
		ok       bool
	}{
		{nil, true},
		{map[string]string{}, true},
		{map[string]string{SettingAllowPrivate: "true"}, true},
		{map[string]string{SettingAllowPrivate: "false", SettingMaxBytes: "65536"}, true},
		{map[string]string{SettingAllowPrivate: "yes please"}, false},
		{map[string]string{SettingMaxBytes: "1MiB"}, false},
		{map[string]string{SettingMaxBytes: "0"}, false},
		{map[string]string{SettingMaxBytes: "-1"}, false},
		{map[string]string{SettingMaxBytes: "99999999999"}, false},
		{map[string]string{"proxy": "http://p"}, false},
	}
	for _, tt := range tests {
		w := NewWorker()
		err := w.Provision(context.Background(), workers.Env{Settings: map[string]map[string]string{WorkerName: tt.settings}})
		if tt.ok != (err == nil) {
			t.Errorf("%v: %v", tt.settings, err)
		}
		if err != nil && !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("%v: %v is not ErrInvalidOption", tt.settings, err)
		}
	}
	w := NewWorker()
	if err := w.Provision(context.Background(), workers.Env{Settings: map[string]map[string]string{WorkerName: {SettingAllowPrivate: "1", SettingMaxBytes: "4096"}}}); err != nil {
		t.Fatal(err)
	}
	o, err := buildOptions(w.opts)
	if err != nil || !o.allowPrivate || o.maxBytes != 4096 {
		t.Fatalf("%+v, %v", o, err)
	}
}
