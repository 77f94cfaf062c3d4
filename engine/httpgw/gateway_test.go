package httpgw_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/httpgw"
	"github.com/iii-on-nats/iii/engine/wire"
)

// fixture is one server, a gateway behind an httptest.Server, and an
// engine whose worker serves the test functions.
type fixture struct {
	ns    *server.Server
	gw    *httpgw.Gateway
	srv   *httptest.Server
	fns   *engine.Worker
	calls atomic.Int64
}

func newFixture(t *testing.T, gwOpts []httpgw.Option, srvOpts ...enginetest.ServerOption) *fixture {
	t.Helper()
	f := &fixture{ns: enginetest.RunServer(t, srvOpts...)}
	f.gw = newGateway(t, f.ns, gwOpts...)
	f.srv = httptest.NewServer(f.gw)
	t.Cleanup(f.srv.Close)
	w, err := enginetest.NewEngine(t, f.ns).Worker("fns")
	if err != nil {
		t.Fatal(err)
	}
	f.fns = w
	f.register(t, "test::echo", func(ctx context.Context, r httpgw.Request) (httpgw.Response, error) {
		return httpgw.Response{StatusCode: 200, Headers: map[string][]string{"X-Echo": {"1", "2"}}, Body: r}, nil
	})
	return f
}

func newGateway(t *testing.T, ns *server.Server, opts ...httpgw.Option) *httpgw.Gateway {
	t.Helper()
	e := enginetest.NewEngine(t, ns)
	gw, err := httpgw.New(context.Background(), e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close(context.Background()) })
	if _, err := httpgw.Serve(context.Background(), e, gw); err != nil {
		t.Fatal(err)
	}
	return gw
}

func (f *fixture) register(t *testing.T, id string, fn func(context.Context, httpgw.Request) (httpgw.Response, error)) {
	t.Helper()
	err := f.fns.Register(engine.Function{ID: id, Handler: engine.Typed(func(ctx context.Context, r httpgw.Request) (httpgw.Response, error) {
		f.calls.Add(1)
		return fn(ctx, r)
	})})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) route(t *testing.T, method, path, fn string) {
	t.Helper()
	if err := f.gw.AddRoute(context.Background(), httpgw.Route{Method: method, Path: path, FunctionID: fn}); err != nil {
		t.Fatal(err)
	}
}

func do(t *testing.T, method, url, ct string, body []byte, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func decodeEcho(t *testing.T, b []byte) httpgw.Request {
	t.Helper()
	var r httpgw.Request
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("echo body %s: %v", b, err)
	}
	return r
}

func envelope(t *testing.T, resp *http.Response, b []byte) *wire.Error {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error content type %q, body %s", ct, b)
	}
	var env wire.Envelope
	if err := json.Unmarshal(b, &env); err != nil || env.Error == nil {
		t.Fatalf("error body %s: %v", b, err)
	}
	return env.Error
}

func TestGetWithParamsAndQuery(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.route(t, "GET", "/users/:id/posts/:post", "test::echo")
	resp, b := do(t, "GET", f.srv.URL+"/users/4%202/posts/7?tag=a&tag=b&q=x%26y", "", nil,
		"X-Custom", "one", "X-Custom", "two", "Authorization", "Bearer t", "Connection", "keep-alive, X-Drop", "X-Drop", "gone")
	if resp.StatusCode != 200 || fmt.Sprint(resp.Header.Values("X-Echo")) != "[1 2]" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d headers %v body %s", resp.StatusCode, resp.Header, b)
	}
	r := decodeEcho(t, b)
	if r.Method != "GET" || r.Path != "/users/4 2/posts/7" || r.Route != "/users/:id/posts/:post" {
		t.Fatalf("request %+v", r)
	}
	if fmt.Sprint(r.PathParams) != "map[id:4 2 post:7]" {
		t.Fatalf("path params %v", r.PathParams)
	}
	if fmt.Sprint(r.Query) != "map[q:[x&y] tag:[a b]]" {
		t.Fatalf("query %v", r.Query)
	}
	if fmt.Sprint(r.Headers["x-custom"]) != "[one two]" || r.Headers["authorization"][0] != "Bearer t" || r.Headers["host"][0] == "" {
		t.Fatalf("headers %v", r.Headers)
	}
	for _, h := range []string{"connection", "x-drop", "Connection"} {
		if _, ok := r.Headers[h]; ok {
			t.Fatalf("hop-by-hop header %q passed: %v", h, r.Headers)
		}
	}
	if r.Body != "" || r.BodyBase64 || r.RemoteAddr == "" {
		t.Fatalf("body %q %v remote %q", r.Body, r.BodyBase64, r.RemoteAddr)
	}
	// HEAD falls back to the GET route and has no body.
	resp, b = do(t, "HEAD", f.srv.URL+"/users/1/posts/2", "", nil)
	if resp.StatusCode != 200 || len(b) != 0 {
		t.Fatalf("HEAD: %d %q", resp.StatusCode, b)
	}
}

func TestPostJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.register(t, "test::create", func(_ context.Context, r httpgw.Request) (httpgw.Response, error) {
		var in struct{ Name string }
		if err := json.Unmarshal([]byte(r.Body), &in); err != nil {
			return httpgw.Response{}, wire.Errorf(wire.CodeInvalidPayload, "body: %v", err)
		}
		return httpgw.Response{
			StatusCode: 201,
			Headers:    map[string][]string{"Content-Type": {"text/plain; charset=utf-8"}, "Location": {"/users/" + in.Name}},
			Body:       "created " + in.Name,
		}, nil
	})
	f.route(t, "POST", "/users", "test::create")
	resp, b := do(t, "POST", f.srv.URL+"/users", "application/json", []byte(`{"name":"ada"}`))
	if resp.StatusCode != 201 || string(b) != "created ada" || resp.Header.Get("Location") != "/users/ada" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
	// The function's own invalid_payload becomes a 400 with its envelope.
	resp, b = do(t, "POST", f.srv.URL+"/users", "application/json", []byte(`{"name":`))
	if we := envelope(t, resp, b); resp.StatusCode != 400 || we.Code != wire.CodeInvalidPayload || !strings.Contains(we.Message, "body:") {
		t.Fatalf("%d %+v", resp.StatusCode, we)
	}
	// A JSON body reaches the function as the text itself.
	f.route(t, "PUT", "/echo", "test::echo")
	resp, b = do(t, "PUT", f.srv.URL+"/echo", "application/vnd.api+json", []byte(`{"a":[1,2]}`))
	if r := decodeEcho(t, b); resp.StatusCode != 200 || r.Body != `{"a":[1,2]}` || r.BodyBase64 {
		t.Fatalf("%d %+v", resp.StatusCode, r)
	}
}

func TestBinaryBody(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	// Go functions may answer []byte; msgpack carries it as bytes.
	f.register(t, "test::reverse", func(_ context.Context, r httpgw.Request) (httpgw.Response, error) {
		if !r.BodyBase64 {
			return httpgw.Response{}, wire.Errorf(wire.CodeInvalidPayload, "expected base64")
		}
		in, err := base64.StdEncoding.DecodeString(r.Body)
		if err != nil {
			return httpgw.Response{}, wire.Errorf(wire.CodeInvalidPayload, "base64: %v", err)
		}
		out := make([]byte, len(in))
		for i, c := range in {
			out[len(in)-1-i] = c
		}
		return httpgw.Response{Headers: map[string][]string{"Content-Type": {"application/octet-stream"}}, Body: out}, nil
	})
	// Functions in other languages answer base64 with the flag.
	f.register(t, "test::b64", func(_ context.Context, r httpgw.Request) (httpgw.Response, error) {
		return httpgw.Response{Body: r.Body, BodyBase64: r.BodyBase64}, nil
	})
	f.route(t, "POST", "/reverse", "test::reverse")
	f.route(t, "POST", "/b64", "test::b64")
	bin := []byte{0, 1, 2, 0xff, 0xfe, 'a', 0x80}
	resp, b := do(t, "POST", f.srv.URL+"/reverse", "application/octet-stream", bin)
	if resp.StatusCode != 200 || !bytes.Equal(b, []byte{0x80, 'a', 0xfe, 0xff, 2, 1, 0}) {
		t.Fatalf("%d %x", resp.StatusCode, b)
	}
	// An image is base64 even when its bytes happen to be UTF-8; a
	// "text" body that is not UTF-8 is base64 too.
	for _, tc := range []struct{ ct, body string }{{"image/png", "abc"}, {"text/plain", "\xff\xfe"}, {"", "\xc3"}} {
		resp, b = do(t, "POST", f.srv.URL+"/b64", tc.ct, []byte(tc.body))
		if resp.StatusCode != 200 || string(b) != tc.body {
			t.Fatalf("%s: %d %q", tc.ct, resp.StatusCode, b)
		}
	}
	resp, b = do(t, "POST", f.srv.URL+"/reverse", "text/plain", []byte("text"))
	if we := envelope(t, resp, b); resp.StatusCode != 400 || !strings.Contains(we.Message, "expected base64") {
		t.Fatalf("text body: %d %+v", resp.StatusCode, we)
	}
}

func TestFunctionErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []httpgw.Option{httpgw.WithTimeout(300 * time.Millisecond)})
	fail := func(code wire.Code) func(context.Context, httpgw.Request) (httpgw.Response, error) {
		return func(context.Context, httpgw.Request) (httpgw.Response, error) {
			return httpgw.Response{}, wire.Errorf(code, "failed with %s", code).WithDetails(map[string]any{"why": "test"})
		}
	}
	f.register(t, "test::forbidden", fail(wire.CodeForbidden))
	f.register(t, "test::notfound", fail(wire.CodeNotFound))
	f.register(t, "test::conflict", fail(wire.CodeConflict))
	f.register(t, "test::unavailable", fail(wire.CodeUnavailable))
	f.register(t, "test::slow", func(ctx context.Context, _ httpgw.Request) (httpgw.Response, error) {
		<-ctx.Done()
		return httpgw.Response{}, ctx.Err()
	})
	f.register(t, "test::panic", func(context.Context, httpgw.Request) (httpgw.Response, error) { panic("boom") })
	f.register(t, "test::badstatus", func(context.Context, httpgw.Request) (httpgw.Response, error) {
		return httpgw.Response{StatusCode: 42}, nil
	})
	f.register(t, "test::badheader", func(context.Context, httpgw.Request) (httpgw.Response, error) {
		return httpgw.Response{Headers: map[string][]string{"X-Bad": {"a\r\nSet-Cookie: x"}}}, nil
	})
	f.register(t, "test::bad64", func(context.Context, httpgw.Request) (httpgw.Response, error) {
		return httpgw.Response{Body: "!!!", BodyBase64: true}, nil
	})
	// A function that answers something else than a response object.
	if err := f.fns.Register(engine.Function{ID: "test::string", Handler: func(context.Context, *engine.Request) (any, error) {
		return "just a string", nil
	}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		fn     string
		status int
		code   wire.Code
	}{
		{"test::forbidden", 403, wire.CodeForbidden},
		{"test::notfound", 404, wire.CodeNotFound},
		{"test::conflict", 409, wire.CodeConflict},
		{"test::unavailable", 503, wire.CodeUnavailable},
		{"test::nobody", 502, wire.CodeFunctionNotFound},
		{"test::slow", 504, wire.CodeTimeout},
		{"test::panic", 500, wire.CodeInternal},
		{"test::badstatus", 502, wire.CodeInternal},
		{"test::badheader", 502, wire.CodeInternal},
		{"test::bad64", 502, wire.CodeInternal},
		{"test::string", 502, wire.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			path := "/" + strings.ReplaceAll(tt.fn, "::", "/")
			f.route(t, "GET", path, tt.fn)
			resp, b := do(t, "GET", f.srv.URL+path, "", nil)
			we := envelope(t, resp, b)
			if resp.StatusCode != tt.status || we.Code != tt.code {
				t.Fatalf("status %d code %s (%s), want %d %s", resp.StatusCode, we.Code, we.Message, tt.status, tt.code)
			}
			if tt.status == 403 && (we.Details["why"] != "test" || we.Message != "failed with forbidden") {
				t.Fatalf("envelope lost the function's message or details: %+v", we)
			}
		})
	}
}

func TestNotFoundMethodAndSize(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []httpgw.Option{httpgw.WithMaxBodyBytes(1000)}, enginetest.WithMaxPayload(8<<10))
	f.route(t, "POST", "/upload", "test::echo")
	f.route(t, "DELETE", "/upload", "test::echo")

	resp, b := do(t, "GET", f.srv.URL+"/nowhere", "", nil)
	if we := envelope(t, resp, b); resp.StatusCode != 404 || we.Code != wire.CodeNotFound {
		t.Fatalf("404: %d %+v", resp.StatusCode, we)
	}
	resp, b = do(t, "GET", f.srv.URL+"/upload", "", nil)
	if we := envelope(t, resp, b); resp.StatusCode != 405 || resp.Header.Get("Allow") != "DELETE, POST" || we.Code != wire.CodeNotFound {
		t.Fatalf("405: %d %v %+v", resp.StatusCode, resp.Header, we)
	}
	// (A malformed path escape never gets past net/http's own parser.)
	f.route(t, "GET", "/q", "test::echo")
	resp, b = do(t, "GET", f.srv.URL+"/q?a=%zz", "", nil)
	if resp.StatusCode != 400 {
		t.Fatalf("bad query: %d %s", resp.StatusCode, b)
	}

	before := f.calls.Load()
	// Over the gateway's limit, with a Content-Length...
	resp, b = do(t, "POST", f.srv.URL+"/upload", "text/plain", bytes.Repeat([]byte("x"), 1001))
	if we := envelope(t, resp, b); resp.StatusCode != 413 || we.Code != wire.CodeInvalidPayload {
		t.Fatalf("413: %d %+v", resp.StatusCode, we)
	}
	// ...and chunked, without one.
	req, _ := http.NewRequest("POST", f.srv.URL+"/upload", io.MultiReader(strings.NewReader(strings.Repeat("y", 600)), strings.NewReader(strings.Repeat("y", 600))))
	req.ContentLength = -1
	cresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = cresp.Body.Close()
	if cresp.StatusCode != 413 {
		t.Fatalf("chunked 413: %d", cresp.StatusCode)
	}
	// Within the gateway's limit, but binary: base64 plus headers pass the
	// server's 8 KiB max payload only when small enough.
	f2 := newGateway(t, f.ns, httpgw.WithMaxBodyBytes(1<<20))
	srv2 := httptest.NewServer(f2)
	defer srv2.Close()
	resp, b = do(t, "POST", srv2.URL+"/upload", "application/octet-stream", bytes.Repeat([]byte{0xff}, 7<<10))
	if we := envelope(t, resp, b); resp.StatusCode != 413 || we.Details["limit"] == nil {
		t.Fatalf("payload 413: %d %+v", resp.StatusCode, we)
	}
	if n := f.calls.Load(); n != before {
		t.Fatalf("%d calls reached the function", n-before)
	}
	resp, _ = do(t, "POST", f.srv.URL+"/upload", "text/plain", bytes.Repeat([]byte("x"), 1000))
	if resp.StatusCode != 200 {
		t.Fatalf("at the limit: %d", resp.StatusCode)
	}
}

func TestRouteAddedOnOneGatewayServedByAnother(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	gw2 := newGateway(t, f.ns)
	srv2 := httptest.NewServer(gw2)
	defer srv2.Close()
	caller := enginetest.NewEngine(t, f.ns)
	ctx := context.Background()

	// Through the function, as any client would (the "http" worker is
	// served by both gateways' engines).
	got, err := engine.Call[httpgw.Route](ctx, caller, httpgw.FnAddRoute, httpgw.Route{Method: "get", Path: "/items/:id/", FunctionID: "test::echo"})
	if err != nil || got != (httpgw.Route{Method: "GET", Path: "/items/:id", FunctionID: "test::echo"}) {
		t.Fatalf("add_route = %+v, %v", got, err)
	}
	for _, srv := range []*httptest.Server{f.srv, srv2} {
		enginetest.Eventually(t, 5*time.Second, func() error {
			resp, b := do(t, "GET", srv.URL+"/items/9", "", nil)
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d: %s", resp.StatusCode, b)
			}
			if r := decodeEcho(t, b); r.PathParams["id"] != "9" {
				return fmt.Errorf("params %v", r.PathParams)
			}
			return nil
		})
	}
	list, err := engine.Call[httpgw.ListRoutesResponse](ctx, caller, httpgw.FnListRoutes, nil)
	if err != nil || len(list.Routes) != 1 || list.Routes[0].Path != "/items/:id" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	// Adding it again is a no-op; the same shape for another function or
	// with another parameter name is a conflict.
	if _, err := engine.Call[httpgw.Route](ctx, caller, httpgw.FnAddRoute, httpgw.Route{Method: "GET", Path: "/items/:id", FunctionID: "test::echo"}); err != nil {
		t.Fatalf("re-add: %v", err)
	}
	for _, r := range []httpgw.Route{
		{Method: "GET", Path: "/items/:id", FunctionID: "test::other"},
		{Method: "GET", Path: "/items/:key", FunctionID: "test::echo"},
	} {
		err := caller.Trigger(ctx, httpgw.FnAddRoute, r, nil)
		if !errors.Is(err, wire.ErrConflict) {
			t.Fatalf("conflict %+v: %v", r, err)
		}
		// A taken route stays taken: no caller should retry it.
		if we := wire.From(err); we.Retryable {
			t.Fatalf("conflict %+v is retryable: %+v", r, we)
		}
		if err := f.gw.AddRoute(ctx, r); !errors.Is(err, httpgw.ErrRouteConflict) {
			t.Fatalf("Go conflict %+v: %v", r, err)
		}
	}
	// A more specific route beside it is no conflict.
	if err := gw2.AddRoute(ctx, httpgw.Route{Method: "GET", Path: "/items/special", FunctionID: "test::echo"}); err != nil {
		t.Fatal(err)
	}
	rm, err := engine.Call[httpgw.RemoveRouteResponse](ctx, caller, httpgw.FnRemoveRoute, httpgw.RemoveRouteRequest{Method: "GET", Path: "/items/:key"})
	if err != nil || rm.Removed {
		t.Fatalf("remove with other param name = %+v, %v", rm, err)
	}
	rm, err = engine.Call[httpgw.RemoveRouteResponse](ctx, caller, httpgw.FnRemoveRoute, httpgw.RemoveRouteRequest{Method: "GET", Path: "/items/:id"})
	if err != nil || !rm.Removed {
		t.Fatalf("remove = %+v, %v", rm, err)
	}
	for _, srv := range []*httptest.Server{f.srv, srv2} {
		enginetest.Eventually(t, 5*time.Second, func() error {
			if resp, _ := do(t, "GET", srv.URL+"/items/9", "", nil); resp.StatusCode != 404 {
				return fmt.Errorf("status %d after removal", resp.StatusCode)
			}
			return nil
		})
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if rs := f.gw.Routes(); len(rs) != 1 || rs[0].Path != "/items/special" {
			return fmt.Errorf("gateway 1 routes %+v", rs)
		}
		return nil
	})
}

func TestBadRouteDefinitions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	caller := enginetest.NewEngine(t, f.ns)
	ctx := context.Background()
	tests := []struct {
		name string
		fn   string
		req  any
	}{
		{"no method", httpgw.FnAddRoute, map[string]any{"path": "/x", "function_id": "f"}},
		{"bad method", httpgw.FnAddRoute, map[string]any{"method": "GE T", "path": "/x", "function_id": "f"}},
		{"relative path", httpgw.FnAddRoute, map[string]any{"method": "GET", "path": "x", "function_id": "f"}},
		{"empty segment", httpgw.FnAddRoute, map[string]any{"method": "GET", "path": "/a//b", "function_id": "f"}},
		{"wildcard not last", httpgw.FnAddRoute, map[string]any{"method": "GET", "path": "/*a/b", "function_id": "f"}},
		{"duplicate param", httpgw.FnAddRoute, map[string]any{"method": "GET", "path": "/:a/:a", "function_id": "f"}},
		{"query in path", httpgw.FnAddRoute, map[string]any{"method": "GET", "path": "/a?b", "function_id": "f"}},
		{"no function", httpgw.FnAddRoute, map[string]any{"method": "GET", "path": "/x"}},
		{"bad function", httpgw.FnAddRoute, map[string]any{"method": "GET", "path": "/x", "function_id": "a::::b"}},
		{"wrong type", httpgw.FnAddRoute, map[string]any{"method": 1, "path": "/x", "function_id": "f"}},
		{"remove bad path", httpgw.FnRemoveRoute, map[string]any{"method": "GET", "path": "nope"}},
		{"remove no method", httpgw.FnRemoveRoute, map[string]any{"path": "/x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := caller.Trigger(ctx, tt.fn, tt.req, nil); !errors.Is(err, wire.ErrInvalidPayload) {
				t.Fatalf("err = %v", err)
			}
		})
	}
	reply, err := caller.Conn().Request("iii.fn.http.add_route", []byte(`not json`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if werr := wire.Decode(reply); !errors.Is(werr, wire.ErrInvalidPayload) {
		t.Fatalf("not json: %v", werr)
	}
	if rs, err := f.gw.ListRoutes(ctx); err != nil || len(rs) != 0 {
		t.Fatalf("routes after bad input: %+v, %v", rs, err)
	}
	// A hand-written entry that does not decode or sits under the wrong key
	// is not served.
	kv, err := caller.JetStream().KeyValue(ctx, "iii-http-routes")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "GET.junk", []byte("{")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "GET.wrong", []byte(`{"method":"GET","path":"/right","function_id":"test::echo"}`)); err != nil {
		t.Fatal(err)
	}
	f.route(t, "GET", "/sentinel", "test::echo") // the watch has seen the junk once this one is in
	enginetest.Eventually(t, 5*time.Second, func() error {
		if rs := f.gw.Routes(); len(rs) != 1 {
			return fmt.Errorf("routes %+v", rs)
		}
		return nil
	})
	if resp, _ := do(t, "GET", f.srv.URL+"/right", "", nil); resp.StatusCode != 404 {
		t.Fatalf("mis-keyed route served: %d", resp.StatusCode)
	}
}

func TestTraceContextFromHTTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	got := make(chan trace.TraceID, 1)
	f.register(t, "test::trace", func(ctx context.Context, _ httpgw.Request) (httpgw.Response, error) {
		got <- trace.SpanContextFromContext(ctx).TraceID()
		return httpgw.Response{}, nil
	})
	f.route(t, "GET", "/trace", "test::trace")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	resp, b := do(t, "GET", f.srv.URL+"/trace", "", nil, "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if id := <-got; id.String() != traceID {
		t.Fatalf("function saw trace %s, want %s", id, traceID)
	}
}

// TestClientBaggageCannotNameSession: the engine's own baggage members
// (iii.session.id, iii.message.id) name the session whose resources a
// tool works on (engine.SessionFromContext: a sandbox's files and shell),
// so an HTTP client must not set them for the function and every call it
// makes; its other baggage members pass.
func TestClientBaggageCannotNameSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	type seen struct{ sid, mid, other string }
	got := make(chan seen, 1)
	f.register(t, "test::baggage", func(ctx context.Context, _ httpgw.Request) (httpgw.Response, error) {
		sid, mid := engine.SessionFromContext(ctx)
		got <- seen{sid, mid, baggage.FromContext(ctx).Member("tenant").Value()}
		return httpgw.Response{}, nil
	})
	f.route(t, "GET", "/baggage", "test::baggage")
	for _, bg := range []string{
		"iii.session.id=victim,iii.message.id=m1,tenant=acme",
		"tenant=acme,iii.session.id=victim;p=1,iii.message.id=m1",
	} {
		resp, b := do(t, "GET", f.srv.URL+"/baggage", "", nil, "baggage", bg)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if s := <-got; s != (seen{other: "acme"}) {
			t.Fatalf("baggage %q: function saw session %q message %q tenant %q, want only tenant acme", bg, s.sid, s.mid, s.other)
		}
	}
}

func TestCloseAndOptions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.route(t, "GET", "/x", "test::echo")
	if err := f.gw.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, _ := do(t, "GET", f.srv.URL+"/x", "", nil)
	if resp.StatusCode != 503 {
		t.Fatalf("after close: %d", resp.StatusCode)
	}
	if err := f.gw.AddRoute(context.Background(), httpgw.Route{Method: "GET", Path: "/y", FunctionID: "f"}); !errors.Is(err, httpgw.ErrClosed) {
		t.Fatalf("add after close: %v", err)
	}
	e := enginetest.NewEngine(t, f.ns)
	for _, opt := range []httpgw.Option{httpgw.WithMaxBodyBytes(-1), httpgw.WithTimeout(0), httpgw.WithBodyTimeout(0), httpgw.WithWriteTimeout(0)} {
		if _, err := httpgw.New(context.Background(), e, opt); !errors.Is(err, engine.ErrInvalidOption) {
			t.Fatalf("option: %v", err)
		}
	}
	if _, err := httpgw.New(context.Background(), nil); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("nil engine: %v", err)
	}
}

// BenchmarkGateway measures one routed request end to end through
// ServeHTTP: route lookup, request encoding, the NATS round trip to the
// function and the response rendering.
func BenchmarkGateway(b *testing.B) {
	ns := enginetest.RunServer(b)
	e := enginetest.NewEngine(b, ns)
	gw, err := httpgw.New(context.Background(), e)
	if err != nil {
		b.Fatal(err)
	}
	defer gw.Close(context.Background())
	w, err := enginetest.NewEngine(b, ns).Worker("fns")
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "bench::get", Handler: engine.Typed(func(_ context.Context, r httpgw.Request) (httpgw.Response, error) {
		return httpgw.Response{Body: map[string]any{"id": r.PathParams["id"]}}, nil
	})}); err != nil {
		b.Fatal(err)
	}
	if err := gw.AddRoute(context.Background(), httpgw.Route{Method: "GET", Path: "/users/:id", FunctionID: "bench::get"}); err != nil {
		b.Fatal(err)
	}
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("concurrency=%d", par), func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(par)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					rec := httptest.NewRecorder()
					gw.ServeHTTP(rec, httptest.NewRequest("GET", "/users/42?x=1", nil))
					if rec.Code != 200 {
						b.Errorf("status %d: %s", rec.Code, rec.Body)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}

// Path parameters reach the function decoded but not cleaned: dot
// segments and encoded slashes are the function's to confine (doc.go).
func TestPathParamsNotCleaned(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.route(t, "GET", "/files/*rest", "test::echo")
	for _, c := range []struct{ path, want string }{
		{"/files/a/b", "a/b"},
		{"/files/../../etc/passwd", "../../etc/passwd"},
		{"/files/..%2f..%2fetc%2fpasswd", "../../etc/passwd"},
	} {
		resp, b := do(t, "GET", f.srv.URL+c.path, "", nil)
		if r := decodeEcho(t, b); resp.StatusCode != 200 || r.PathParams["rest"] != c.want {
			t.Errorf("%s: %d, rest %q; want %q", c.path, resp.StatusCode, r.PathParams["rest"], c.want)
		}
	}
}

// TestClosedGatewayAnswersUnavailable: the http worker outlives its
// gateway (services close the gateway before the engine), and another
// replica's gateway can take a route call meanwhile, so a closed gateway
// answers unavailable (retryable), not internal.
func TestClosedGatewayAnswersUnavailable(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	gw := newGateway(t, ns)
	if err := gw.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	caller := enginetest.NewEngine(t, ns)
	for _, c := range []struct {
		fn  string
		req any
	}{
		{httpgw.FnAddRoute, httpgw.Route{Method: "GET", Path: "/x", FunctionID: "test::echo"}},
		{httpgw.FnRemoveRoute, httpgw.RemoveRouteRequest{Method: "GET", Path: "/x"}},
	} {
		t.Run(c.fn, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := caller.Trigger(ctx, c.fn, c.req, nil)
			if we := wire.From(err); we.Code != wire.CodeUnavailable || !we.Retryable {
				t.Fatalf("%s on a closed gateway: %v, want unavailable", c.fn, err)
			}
		})
	}
}
