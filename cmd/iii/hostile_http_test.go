package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/httpgw"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestHTTPGatewayRefusesGarbage sends a whole node's HTTP trigger gateway
// what a hostile or broken client would: malformed paths and queries,
// bodies over the limit and not UTF-8, unknown methods, trace headers
// that are not W3C, a route to a catalog function that does not take the
// gateway's request, a route to no function, raw requests that are not
// HTTP. Every answer comes in time with a 4xx or the gateway's 502/504 and
// the JSON error envelope of a catalog code; nothing is logged at error
// level or printed outside the node's log; the node still serves its
// routes and runs a turn.
func TestHTTPGatewayRefusesGarbage(t *testing.T) {
	a, logs := startWatchedNode(t)
	w, err := a.e.Worker("hostile")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(engine.Function{ID: "hostile::echo", Handler: engine.Typed(func(_ context.Context, r httpgw.Request) (httpgw.Response, error) {
		return httpgw.Response{StatusCode: 200, Body: fmt.Sprintf("%s %s %d", r.Method, r.Route, len(r.Body))}, nil
	})}); err != nil {
		t.Fatal(err)
	}
	url := a.node.ClientURL()
	for _, r := range []string{
		`{"method":"POST","path":"/echo/:id","function_id":"hostile::echo"}`,
		`{"method":"GET","path":"/files/*rest","function_id":"hostile::echo"}`,
		`{"method":"POST","path":"/run","function_id":"run::start"}`,
		`{"method":"GET","path":"/nobody","function_id":"hostile::nobody"}`,
	} {
		if out, err := runIII(t, "trigger", "http::add_route", r, "--nats", url); err != nil {
			t.Fatalf("add route %s: %v\n%s", r, err, out)
		}
	}
	base := "http://" + a.httpLn.Addr().String()
	client := &http.Client{Timeout: 40 * time.Second}
	do := func(method, path, ctype string, body []byte, h map[string]string) (*http.Response, []byte, error) {
		req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	// The routes are served once the gateway's watch has them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, b, err := do("POST", "/echo/1", "text/plain", []byte("hi"), nil)
		if err == nil && resp.StatusCode == 200 && string(b) == "POST /echo/:id 2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("route not served: %v %v %s", err, resp, b)
		}
		time.Sleep(20 * time.Millisecond)
	}

	type want struct{ codes []int } // acceptable statuses
	ok := want{[]int{200}}
	client4xx := want{[]int{400, 404, 405, 413, 414, 431}}
	cases := []struct {
		name         string
		method, path string
		ctype        string
		body         []byte
		headers      map[string]string
		want         want
	}{
		{"binary body as text", "POST", "/echo/1", "text/plain", []byte("\xff\xfe\x00\x01"), nil, ok},
		{"binary body as JSON", "POST", "/echo/1", "application/json", []byte("\xc1\xc1{"), nil, ok},
		{"body over the limit", "POST", "/echo/1", "application/octet-stream", bytes.Repeat([]byte("x"), 2<<20), nil, client4xx},
		{"body of a GET", "GET", "/files/a", "text/plain", []byte("body"), nil, ok},
		{"bad query escape", "POST", "/echo/1?a=%zz", "", nil, nil, client4xx},
		{"many query parameters", "POST", "/echo/1?" + strings.Repeat("a=1&", 5000), "", nil, nil, ok},
		{"long path", "GET", "/files/" + strings.Repeat("a/", 3000), "", nil, nil, want{[]int{200, 413, 414, 431}}},
		{"dot segments", "GET", "/files/../../etc/passwd", "", nil, nil, want{[]int{200, 301, 307, 308, 400, 404}}},
		{"encoded slashes", "GET", "/files/..%2f..%2fetc%2fpasswd", "", nil, nil, want{[]int{200, 400, 404}}},
		{"unknown method", "BREW", "/echo/1", "", nil, nil, client4xx},
		{"wrong method", "DELETE", "/echo/1", "", nil, nil, client4xx},
		{"no route", "GET", "/nothing/here", "", nil, nil, client4xx},
		{"catalog function behind a route", "POST", "/run", "application/json", []byte(`{"session_id":"h1","messages":[]}`), nil, client4xx},
		{"route to no function", "GET", "/nobody", "", nil, nil, want{[]int{502}}},
		{"hostile trace headers", "POST", "/echo/1", "text/plain", []byte("x"), map[string]string{
			"traceparent": "00-zz-yy-01", "tracestate": strings.Repeat("x=", 500), "baggage": strings.Repeat("k=%ZZ,", 1000)}, ok},
		{"bad content type", "POST", "/echo/1", "text/plain; charset=\"unterminated; ===", []byte("x"), nil, ok},
		{"huge header", "POST", "/echo/1", "text/plain", []byte("x"), map[string]string{"X-Big": strings.Repeat("b", 2<<20)}, client4xx},
	}
	for _, c := range cases {
		resp, b, err := do(c.method, c.path, c.ctype, c.body, c.headers)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !slices.Contains(c.want.codes, resp.StatusCode) {
			t.Errorf("%s: status %d, want one of %v: %.200s", c.name, resp.StatusCode, c.want.codes, b)
			continue
		}
		if resp.StatusCode >= 400 && len(b) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			var env struct {
				Error *wire.Error `json:"error"`
			}
			if err := json.Unmarshal(b, &env); err != nil || env.Error == nil {
				t.Errorf("%s: %d without the error envelope: %.200s", c.name, resp.StatusCode, b)
			} else if _, known := wire.Lookup(env.Error.Code); !known || env.Error.Code == wire.CodeInternal {
				t.Errorf("%s: error code %q", c.name, env.Error.Code)
			}
		}
		for _, rec := range logs.take() {
			t.Errorf("%s: logged: %s", c.name, rec)
		}
	}

	// Raw bytes that are not HTTP, requests no client library sends, and
	// a request that stops half-way: the server closes or answers 4xx,
	// and goes on serving.
	for _, raw := range []string{
		"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", // a TLS hello
		"POST /echo/%zz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
		"POST /echo/1 HTTP/1.1\r\nHost: x\r\nContent-Type: \x01\x02\r\nContent-Length: 0\r\n\r\n",
		"GET /echo/1 HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
		"POST /echo/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort",
		"POST /echo/1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	} {
		conn, err := net.DialTimeout("tcp", a.httpLn.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Write([]byte(raw))
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		reply, _ := io.ReadAll(conn)
		conn.Close()
		if s := string(reply); s != "" && !strings.HasPrefix(s, "HTTP/1.1 4") && !strings.HasPrefix(s, "HTTP/1.0 4") {
			t.Errorf("raw %q: answered %.80q", raw, s)
		}
	}
	for _, rec := range logs.take() {
		t.Errorf("raw requests: logged: %s", rec)
	}

	// Still serving: the route, and a turn with a function call.
	if resp, b, err := do("POST", "/echo/7", "text/plain", []byte("fine"), nil); err != nil || resp.StatusCode != 200 || string(b) != "POST /echo/:id 4" {
		t.Fatalf("the route after the garbage: %v %v %s", err, resp, b)
	}
	out, err := runIII(t, "chat", "--nats", url, "-m", `/call state::get {"scope":"demo","key":"k"}`)
	if err != nil || !strings.Contains(out, "function state::get returned") {
		t.Fatalf("chat after the garbage: %v\n%s", err, out)
	}
}
