package httpgw_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/httpgw"
	"github.com/iii-on-nats/iii/engine/wire"
)

// rawStatus sends req on a new connection to srvURL, then waits up to
// wait for the status line.
func rawStatus(t *testing.T, srvURL, req string, wait time.Duration) string {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srvURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "no answer: " + err.Error()
	}
	return strings.TrimSpace(line)
}

// TestSlowBodyAnswered408: a client that sends its body slower than the
// body timeout (slow loris) gets 408 and holds nothing, even on an
// http.Server without timeouts (httptest's); a function slower than the
// body timeout is not cut off by it.
func TestSlowBodyAnswered408(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []httpgw.Option{httpgw.WithBodyTimeout(300 * time.Millisecond)})
	f.route(t, "POST", "/up", "test::echo")
	for _, tc := range []struct{ name, req string }{
		{"content-length", "POST /up HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\nab"},
		{"chunked", "POST /up HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n"},
		{"no byte of the body", "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			if got := rawStatus(t, f.srv.URL, tc.req, 5*time.Second); !strings.HasPrefix(got, "HTTP/1.1 408") {
				t.Fatalf("slow body: %q after %v, want 408", got, time.Since(start))
			}
		})
	}
	if n := f.calls.Load(); n != 0 {
		t.Fatalf("%d slow bodies reached the function", n)
	}
	f.register(t, "test::slowfn", func(_ context.Context, r httpgw.Request) (httpgw.Response, error) {
		time.Sleep(800 * time.Millisecond)
		return httpgw.Response{Body: r.Body}, nil
	})
	f.route(t, "POST", "/slowfn", "test::slowfn")
	for _, body := range []string{"", "payload"} {
		resp, b := do(t, "POST", f.srv.URL+"/slowfn", "text/plain", []byte(body))
		if resp.StatusCode != 200 || string(b) != body {
			t.Fatalf("function slower than the body timeout, body %q: %d %s", body, resp.StatusCode, b)
		}
	}
}

// TestTraceHeadersCountAgainstMaxPayload: the client's trace context and
// baggage travel as NATS headers, which count against the max payload; a
// request that fits only without them is a 413 like any other too large
// request, not the 400 of a failed publish.
func TestTraceHeadersCountAgainstMaxPayload(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []httpgw.Option{httpgw.WithMaxBodyBytes(1 << 20)}, enginetest.WithMaxPayload(32<<10))
	f.route(t, "POST", "/up", "test::echo")
	var members []string
	for i := range 32 { // the W3C maximum of tracestate list members
		members = append(members, fmt.Sprintf("k%d=%s", i, strings.Repeat("v", 200)))
	}
	trace := []string{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate", strings.Join(members, ",")}
	for _, n := range []int{19 << 10, 20 << 10, 22 << 10, 24 << 10} {
		resp, b := do(t, "POST", f.srv.URL+"/up", "text/plain", []byte(strings.Repeat("x", n)), trace...)
		if we := envelope(t, resp, b); resp.StatusCode != 413 || we.Code != wire.CodeInvalidPayload || we.Details["limit"] == nil {
			t.Fatalf("body %d with trace headers: %d %+v", n, resp.StatusCode, we)
		}
	}
	if n := f.calls.Load(); n != 0 {
		t.Fatalf("%d calls reached the function", n)
	}
	// A smaller one passes, trace headers and all.
	if resp, b := do(t, "POST", f.srv.URL+"/up", "text/plain", []byte("small"), trace...); resp.StatusCode != 200 {
		t.Fatalf("small body: %d %s", resp.StatusCode, b)
	}
}

// TestNonUTF8RequestRefused: the function receives path, query and headers
// as strings; bytes that are not UTF-8 would reach a JSON-codec function as
// U+FFFD, so /p/%ff and /p/%fe would be the same id. They are refused.
func TestNonUTF8RequestRefused(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns, engine.WithCodec(wire.JSON))
	gw, err := httpgw.New(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close(context.Background()) })
	f := &fixture{ns: ns, gw: gw, srv: newServer(t, gw)}
	if f.fns, err = enginetest.NewEngine(t, ns).Worker("fns"); err != nil {
		t.Fatal(err)
	}
	f.register(t, "test::id", func(_ context.Context, r httpgw.Request) (httpgw.Response, error) {
		return httpgw.Response{Body: r.PathParams["id"] + " " + strings.Join(r.Query["q"], ",")}, nil
	})
	f.route(t, "GET", "/p/:id", "test::id")
	tests := []struct {
		name, path string
		hdr        []string
		status     int
		want       string
	}{
		{"unicode", "/p/%C3%A9t%C3%A9?q=%E2%82%AC", nil, 200, "été €"},
		{"raw unicode", "/p/été?q=€", nil, 200, "été €"},
		{"path", "/p/%ff", nil, 400, "UTF-8"},
		{"path other byte", "/p/%fe", nil, 400, "UTF-8"},
		{"query value", "/p/a?q=%ff", nil, 400, `query parameter "q"`},
		{"query name", "/p/a?%ff=1", nil, 400, "UTF-8"},
		{"header", "/p/a", []string{"X-Name", "caf\xe9"}, 400, `header "x-name"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := do(t, "GET", f.srv.URL+tt.path, "", nil, tt.hdr...)
			if resp.StatusCode != tt.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, b, tt.status)
			}
			if tt.status == 200 {
				if string(b) != tt.want {
					t.Fatalf("function saw %q, want %q", b, tt.want)
				}
				return
			}
			if we := envelope(t, resp, b); we.Code != wire.CodeInvalidPayload || !strings.Contains(we.Message, tt.want) {
				t.Fatalf("%+v", we)
			}
		})
	}
}

// TestStatusForEveryCode: every catalog code a function answers reaches
// the client with the status of the documented table and its envelope.
func TestStatusForEveryCode(t *testing.T) {
	t.Parallel()
	want := map[wire.Code]int{
		wire.CodeInvalidPayload:   400,
		wire.CodeBudgetExceeded:   402,
		wire.CodeForbidden:        403,
		wire.CodeNotFound:         404,
		wire.CodeConflict:         409,
		wire.CodeNotPending:       409,
		wire.CodeInternal:         500,
		wire.CodeFunctionNotFound: 502,
		wire.CodeCanceled:         503,
		wire.CodeUnavailable:      503,
		wire.CodeTimeout:          504,
	}
	if len(want) != len(wire.Catalog) {
		t.Fatalf("the table has %d codes, the catalog %d", len(want), len(wire.Catalog))
	}
	f := newFixture(t, nil)
	for _, ent := range wire.Catalog {
		t.Run(string(ent.Code), func(t *testing.T) {
			status, ok := want[ent.Code]
			if !ok {
				t.Fatalf("code %s is not in the table", ent.Code)
			}
			if got := httpgw.StatusFor(ent.Code); got != status {
				t.Fatalf("StatusFor = %d, want %d", got, status)
			}
			id := "code::" + string(ent.Code)
			f.register(t, id, func(context.Context, httpgw.Request) (httpgw.Response, error) {
				return httpgw.Response{}, wire.Errorf(ent.Code, "answered %s", ent.Code)
			})
			path := "/code/" + string(ent.Code)
			f.route(t, "GET", path, id)
			resp, b := do(t, "GET", f.srv.URL+path, "", nil)
			we := envelope(t, resp, b)
			if resp.StatusCode != status || we.Code != ent.Code || we.Message != "answered "+string(ent.Code) {
				t.Fatalf("%d %+v, want %d", resp.StatusCode, we, status)
			}
		})
	}
	if got := httpgw.StatusFor("foreign_code"); got != 500 {
		t.Fatalf("unknown code: %d", got)
	}
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// TestHugeReply: a function whose reply is over the NATS max payload is
// answered at once with a clear 500, not left to time out.
func TestHugeReply(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, enginetest.WithMaxPayload(16<<10))
	f.register(t, "test::huge", func(context.Context, httpgw.Request) (httpgw.Response, error) {
		return httpgw.Response{Body: strings.Repeat("z", 20<<10)}, nil
	})
	f.route(t, "GET", "/huge", "test::huge")
	start := time.Now()
	resp, b := do(t, "GET", f.srv.URL+"/huge", "", nil)
	we := envelope(t, resp, b)
	if resp.StatusCode != 500 || we.Code != wire.CodeInternal || !strings.Contains(we.Message, "max payload") || time.Since(start) > 5*time.Second {
		t.Fatalf("%d %+v after %v", resp.StatusCode, we, time.Since(start))
	}
}

// TestMethods: HEAD takes the GET route; OPTIONS and unknown methods are
// routed like any other (no automatic CORS answer), 405 with Allow
// otherwise; methods are case-sensitive.
func TestMethods(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.route(t, "GET", "/m", "test::echo")
	f.route(t, "*", "/any", "test::echo")
	tests := []struct {
		method, path string
		status       int
		allow        string
	}{
		{"HEAD", "/m", 200, ""},
		{"OPTIONS", "/m", 405, "GET, HEAD"},
		{"get", "/m", 405, "GET, HEAD"},
		{"BREW", "/m", 405, "GET, HEAD"},
		{"BREW", "/any", 200, ""},
		{"OPTIONS", "/any", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+tt.path, func(t *testing.T) {
			resp, b := do(t, tt.method, f.srv.URL+tt.path, "", nil)
			if resp.StatusCode != tt.status || resp.Header.Get("Allow") != tt.allow {
				t.Fatalf("%d Allow %q %s", resp.StatusCode, resp.Header.Get("Allow"), b)
			}
			if tt.status == 200 && tt.method != "HEAD" {
				if r := decodeEcho(t, b); r.Method != tt.method {
					t.Fatalf("function saw method %q", r.Method)
				}
			}
		})
	}
}

// TestManyRequestsWhileRoutesChangeAndClose: 200 clients in parallel
// while routes come and go and then the gateway closes: every request gets
// a clean answer (the function's, 404, or 503 once closed, with the
// envelope), and requests in flight at Close finish.
func TestManyRequestsWhileRoutesChangeAndClose(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.register(t, "test::slowish", func(_ context.Context, r httpgw.Request) (httpgw.Response, error) {
		time.Sleep(20 * time.Millisecond)
		return httpgw.Response{Body: r.PathParams["id"]}, nil
	})
	f.route(t, "GET", "/s/:id", "test::slowish")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}, Timeout: 20 * time.Second}
	stop := make(chan struct{})
	stopClients := sync.OnceFunc(func() { close(stop) })
	t.Cleanup(stopClients) // also when the test fails early
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{} // "<route> <status>"
	var errs []error
	for i := range 200 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				kind, path := "s", fmt.Sprintf("/s/%d-%d", i, n)
				if i%2 == 1 {
					kind, path = "churn", fmt.Sprintf("/churn/%d", i)
				}
				status, err := get(client, f.srv.URL+path, fmt.Sprintf("%d-%d", i, n), kind == "s")
				mu.Lock()
				counts[fmt.Sprint(kind, " ", status)]++
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", path, err))
				}
				mu.Unlock()
			}
		})
	}
	ctx := context.Background()
	for range 10 {
		if err := f.gw.AddRoute(ctx, httpgw.Route{Method: "GET", Path: "/churn/:n", FunctionID: "test::echo"}); err != nil {
			t.Error(err)
		}
		if _, err := f.gw.RemoveRoute(ctx, "GET", "/churn/:n"); err != nil {
			t.Error(err)
		}
	}
	if err := f.gw.Close(ctx); err != nil {
		t.Error(err)
	}
	// Go on until the clients met the closed gateway (a fixed pause was
	// too short on a loaded machine).
	enginetest.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if counts["s 503"] == 0 {
			return fmt.Errorf("no 503 yet: %v", counts)
		}
		return nil
	})
	stopClients()
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	for _, k := range []string{"s 200", "s 503", "churn 200", "churn 404"} {
		if counts[k] == 0 {
			t.Errorf("no %q answer: %v", k, counts)
		}
	}
}

// get fetches url and checks the answer: 200 with body want (when check is
// set), or 404/503 with the JSON envelope.
func get(client *http.Client, url, want string, check bool) (int, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	switch resp.StatusCode {
	case 200:
		if check && string(b) != want {
			return 200, fmt.Errorf("body %q, want %q", b, want)
		}
	case 404, 503:
		if resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), `"error"`) {
			return resp.StatusCode, fmt.Errorf("%d without the envelope: %s", resp.StatusCode, b)
		}
	default:
		return resp.StatusCode, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return resp.StatusCode, nil
}

// TestHalfClosedClient: a client that half-closes its connection after the
// request cancels the request's context; it still reads a coded answer
// (499 canceled), never an empty 200.
func TestHalfClosedClient(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.register(t, "test::wait", func(ctx context.Context, _ httpgw.Request) (httpgw.Response, error) {
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
		return httpgw.Response{Body: "late"}, nil
	})
	f.route(t, "GET", "/wait", "test::wait")
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	reply, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(reply), "HTTP/1.1 499") || !strings.Contains(string(reply), `"code":"canceled"`) {
		t.Fatalf("half-closed client got %q", reply)
	}
}

// TestHandWrittenRoutes: routes written to the bucket by hand are served
// when they are routes under their own key, in any spelling the normal
// form accepts; a route overwritten with junk stops being served (no stale
// route), and deleting or purging a key removes its route.
func TestHandWrittenRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	kv, err := enginetest.NewEngine(t, f.ns).JetStream().KeyValue(ctx, "iii-http-routes")
	if err != nil {
		t.Fatal(err)
	}
	expect := func(path string, want int) {
		t.Helper()
		enginetest.Eventually(t, 5*time.Second, func() error {
			if resp, b := do(t, "GET", f.srv.URL+path, "", nil); resp.StatusCode != want {
				return fmt.Errorf("GET %s: %d %s, want %d", path, resp.StatusCode, b, want)
			}
			return nil
		})
	}
	for _, c := range []struct{ key, value string }{
		{"GET.a", `{"method":"get","path":"/a/","function_id":"test::echo","extra":1}`},
		{"_any.b.=3A", `{"path":"/b/:id","method":"*","function_id":"test::echo"}`},
	} {
		if _, err := kv.Put(ctx, c.key, []byte(c.value)); err != nil {
			t.Fatal(err)
		}
	}
	expect("/a", 200)
	expect("/b/1", 200)
	for _, junk := range []string{`null`, `[]`, `{"method":"GET","path":"/a","function_id":""}`, "\x00\xff"} {
		if _, err := kv.Put(ctx, "GET.a", []byte(junk)); err != nil {
			t.Fatal(err)
		}
		expect("/a", 404)
		if _, err := kv.Put(ctx, "GET.a", []byte(`{"method":"GET","path":"/a","function_id":"test::echo"}`)); err != nil {
			t.Fatal(err)
		}
		expect("/a", 200)
	}
	if err := kv.Delete(ctx, "GET.a"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "_any.b.=3A"); err != nil {
		t.Fatal(err)
	}
	expect("/a", 404)
	expect("/b/1", 404)
	if rs := f.gw.Routes(); len(rs) != 0 {
		t.Fatalf("routes left: %+v", rs)
	}
}

// TestEarlyAnswerWithUnreadBody: a request the gateway answers before
// reading its body (404, 405, 413 by Content-Length, 400 malformed path)
// from a client that never sends the body it announced is answered within
// the body timeout, and its connection is closed: net/http drains an
// unread body (up to 256 KiB) before writing the answer, with no read
// deadline on a server without ReadTimeout (httptest's, iii up's).
func TestEarlyAnswerWithUnreadBody(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []httpgw.Option{httpgw.WithBodyTimeout(300 * time.Millisecond), httpgw.WithMaxBodyBytes(4)})
	f.route(t, "POST", "/up", "test::echo")
	for _, tc := range []struct{ name, req, want string }{
		{"404 content-length", "POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", "404"},
		{"404 chunked", "POST /nope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n", "404"},
		{"404 expect 100-continue", "POST /nope HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n", "404"},
		{"405", "PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab", "405"},
		{"413 by content-length", "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", "413"},
		{"400 path", "POST /up/%ff HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", "400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte(tc.req)); err != nil {
				t.Fatal(err)
			}
			// The answer, then the end of the connection: the server
			// holds it no longer than the body timeout.
			start := time.Now()
			_ = conn.SetReadDeadline(start.Add(5 * time.Second))
			got, err := io.ReadAll(conn)
			if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 "+tc.want) {
				t.Fatalf("unsent body: %q, %v after %v, want %s and the connection closed", got, err, time.Since(start), tc.want)
			}
		})
	}
	if n := f.calls.Load(); n != 0 {
		t.Fatalf("%d requests reached the function", n)
	}
}

// TestHugeTimeouts: timeouts as long as a Duration holds (a caller's way
// to say "no limit") do not add up past it: the write deadline before the
// response was their sum, which wrapped to the past, so the 100 Continue
// an Expect client waits for failed, and with it the connection's answer.
func TestHugeTimeouts(t *testing.T) {
	t.Parallel()
	const forever = time.Duration(1<<63 - 1)
	for _, tc := range []struct {
		name string
		opts []httpgw.Option
	}{
		{"timeout", []httpgw.Option{httpgw.WithTimeout(forever)}},
		{"body timeout", []httpgw.Option{httpgw.WithBodyTimeout(forever)}},
		{"write timeout", []httpgw.Option{httpgw.WithWriteTimeout(forever)}},
		{"all", []httpgw.Option{httpgw.WithTimeout(forever), httpgw.WithBodyTimeout(forever), httpgw.WithWriteTimeout(forever)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tc.opts)
			f.register(t, "test::body", func(_ context.Context, r httpgw.Request) (httpgw.Response, error) {
				return httpgw.Response{Body: r.Body}, nil
			})
			f.route(t, "POST", "/up", "test::body")
			conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := conn.Write([]byte("POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
				t.Fatalf("before the body: %q, %v, want 100 Continue", line, err)
			}
			if _, err := br.ReadString('\n'); err != nil { // the blank line after 100
				t.Fatal(err)
			}
			if _, err := conn.Write([]byte("ok")); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "ok" {
				t.Fatalf("%d %q", resp.StatusCode, b)
			}
		})
	}
}
