package httpgw_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/httpgw"
	"github.com/iii-on-nats/iii/engine/wire"
)

// smallSendBuffers shrinks the send buffer of every accepted connection,
// so that the kernel cannot absorb a response its client does not read.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// dialSmall connects to srv with a small receive buffer.
func dialSmall(t *testing.T, srv *httptest.Server) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	return conn
}

// TestWriteTimeout: a client that stops reading a large response (or a
// large error envelope) holds neither a handler nor its connection past
// the write timeout, on an http.Server without timeouts (httptest's). The
// timeout counts from the response's start: a reading client gets the
// whole response however long the function took, and a keep-alive
// connection left idle longer than the write timeout still serves its
// next request, 100 Continue included.
func TestWriteTimeout(t *testing.T) {
	t.Parallel()
	const wt = time.Second // a loaded machine reads 512 KiB within it
	f := newFixture(t, []httpgw.Option{httpgw.WithWriteTimeout(wt)})
	big := strings.Repeat("z", 512<<10)
	f.register(t, "test::big", func(_ context.Context, r httpgw.Request) (httpgw.Response, error) {
		if r.Query.Get("slow") != "" {
			time.Sleep(3 * wt)
		}
		return httpgw.Response{Body: big}, nil
	})
	f.register(t, "test::bigerr", func(context.Context, httpgw.Request) (httpgw.Response, error) {
		return httpgw.Response{}, wire.Errorf(wire.CodeNotFound, "missing").WithDetails(map[string]any{"pad": big})
	})
	f.route(t, "GET", "/big", "test::big")
	f.route(t, "GET", "/bigerr", "test::bigerr")
	f.route(t, "POST", "/echo", "test::echo")

	var inFlight atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		f.gw.ServeHTTP(w, r)
	}))
	srv.Listener = smallSendBuffers{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)

	t.Run("client stops reading", func(t *testing.T) {
		for _, path := range []string{"/big", "/bigerr"} {
			conn := dialSmall(t, srv)
			if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
				t.Fatal(err)
			}
			// The handler starts, blocks on the unread response, then
			// lets go when the write timeout passes.
			enginetest.Eventually(t, 5*time.Second, func() error {
				if inFlight.Load() == 0 {
					return fmt.Errorf("%s: handler not started", path)
				}
				return nil
			})
			start := time.Now()
			enginetest.Eventually(t, 10*time.Second, func() error {
				if n := inFlight.Load(); n != 0 {
					return fmt.Errorf("%s: %d handlers still writing to a client that does not read after %v", path, n, time.Since(start))
				}
				return nil
			})
			// The connection is closed: the client gets a cut response.
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, _ := io.ReadAll(conn)
			if len(got) >= len(big) {
				t.Fatalf("%s: the stalled client still got %d bytes", path, len(got))
			}
		}
	})

	t.Run("function slower than the write timeout", func(t *testing.T) {
		resp, b := do(t, "GET", srv.URL+"/big?slow=1", "", nil)
		if resp.StatusCode != 200 || string(b) != big {
			t.Fatalf("%d, %d bytes", resp.StatusCode, len(b))
		}
	})

	t.Run("keep-alive idle longer than the write timeout", func(t *testing.T) {
		conn := dialSmall(t, srv)
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(conn)
		if _, err := io.WriteString(conn, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\none"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("first request: %d %v", resp.StatusCode, err)
		}
		time.Sleep(2 * wt)
		if _, err := io.WriteString(conn, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
			t.Fatalf("expected 100 Continue, got %q %v", line, err)
		}
		if line, err := br.ReadString('\n'); err != nil || line != "\r\n" {
			t.Fatalf("after 100 Continue: %q %v", line, err)
		}
		if _, err := io.WriteString(conn, "two"); err != nil {
			t.Fatal(err)
		}
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("second request: %v", err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || decodeEcho(t, b).Body != "two" {
			t.Fatalf("second request: %d %s %v", resp.StatusCode, b, err)
		}
	})
}

// TestResponseContentType: a reply without a Content-Type gets the one of
// its body's kind, never a sniffed one, so a function that echoes user
// input is not served as text/html; every response, errors included,
// says nosniff. A Content-Type the function sets is kept.
func TestResponseContentType(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const html = "<html><script>alert(document.cookie)</script></html>"
	tests := []struct {
		name   string
		resp   httpgw.Response
		status int
		ct     string
		body   string
	}{
		{"string", httpgw.Response{Body: html}, 200, "text/plain; charset=utf-8", html},
		{"base64", httpgw.Response{Body: base64.StdEncoding.EncodeToString([]byte(html)), BodyBase64: true}, 200, "application/octet-stream", html},
		{"bytes", httpgw.Response{Body: []byte(html)}, 200, "application/octet-stream", html},
		{"object", httpgw.Response{Body: map[string]string{"a": "<script>"}}, 200, "application/json", `{"a":"\u003cscript\u003e"}`},
		{"empty content type", httpgw.Response{Headers: map[string][]string{"Content-Type": {""}}, Body: html}, 200, "text/plain; charset=utf-8", html},
		{"declared", httpgw.Response{Headers: map[string][]string{"Content-Type": {"text/html; charset=utf-8"}}, Body: html}, 200, "text/html; charset=utf-8", html},
		{"sniff allowed by the function", httpgw.Response{Headers: map[string][]string{"X-Content-Type-Options": {"none"}}, Body: html}, 200, "text/plain; charset=utf-8", html},
		{"no body", httpgw.Response{StatusCode: 204}, 204, "", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("test::ct%d", i)
			f.register(t, id, func(context.Context, httpgw.Request) (httpgw.Response, error) { return tt.resp, nil })
			path := fmt.Sprintf("/ct/%d", i)
			f.route(t, "GET", path, id)
			resp, b := do(t, "GET", f.srv.URL+path, "", nil)
			if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != tt.ct || string(b) != tt.body {
				t.Fatalf("%d %q %q, want %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), b, tt.status, tt.ct, tt.body)
			}
			if got := resp.Header.Values("X-Content-Type-Options"); len(got) != 1 || got[0] != "nosniff" {
				t.Fatalf("X-Content-Type-Options %q", got)
			}
		})
	}
	resp, _ := do(t, "GET", f.srv.URL+"/nowhere", "", nil)
	if resp.StatusCode != 404 || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("error response: %d %v", resp.StatusCode, resp.Header)
	}
}
