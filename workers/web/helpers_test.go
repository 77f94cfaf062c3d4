package web

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/wire"
)

// newFetcher returns a fetcher closed at the end of the test.
func newFetcher(t *testing.T, opts ...Option) *Fetcher {
	t.Helper()
	f, err := NewFetcher(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	return f
}

// serve starts a loopback HTTP server closed at the end of the test.
func serve(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// addrPort is the address a test server listens on.
func addrPort(t *testing.T, srv *httptest.Server) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// hosts is a resolver for the lookup seam: names map to addresses, others
// are not found.
func hosts(m map[string][]string) Option {
	return withLookup(func(_ context.Context, host string) ([]netip.Addr, error) {
		addrs, ok := m[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		out := make([]netip.Addr, len(addrs))
		for i, a := range addrs {
			out[i] = netip.MustParseAddr(a)
		}
		return out, nil
	})
}

// wantCode fails unless err is a *wire.Error of code whose message
// contains every word.
func wantCode(t *testing.T, err error, code wire.Code, words ...string) *wire.Error {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != code {
		t.Fatalf("error %v (%T), want code %s", err, err, code)
	}
	for _, w := range words {
		if !strings.Contains(we.Message, w) {
			t.Fatalf("message %q does not contain %q", we.Message, w)
		}
	}
	return we
}

// fetch runs one fetch with a test deadline.
func fetch(t *testing.T, f *Fetcher, req FetchRequest) (FetchResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return f.Fetch(ctx, req)
}

// text answers body with content type ct.
func text(ct, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write([]byte(body))
	}
}

// httptestTLS starts a TLS server whose certificate the fetcher does not
// trust, and returns its URL.
func httptestTLS(t *testing.T) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(text("text/plain", "x"))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// rawServer starts a loopback TCP server that reads a request's first
// line and hands the connection to answer: for responses net/http would
// not write. It returns the server's host:port.
func rawServer(t *testing.T, answer func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					answer(c)
				}
			}()
		}
	}()
	return ln.Addr().String()
}
