package web

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/wire"
)

func TestFetchLoopbackRefusedByDefault(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := serve(t, func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) })
	f := newFetcher(t)
	_, err := fetch(t, f, FetchRequest{URL: srv.URL})
	wantCode(t, err, wire.CodeForbidden, "127.0.0.1", "loopback", "public internet")
	if !errors.Is(err, ErrRefusedAddress) {
		t.Fatalf("%v is not ErrRefusedAddress", err)
	}
	if hits.Load() != 0 {
		t.Fatal("the server was reached")
	}
}

func TestFetchAllowPrivate(t *testing.T) {
	t.Parallel()
	var ua, acceptHdr atomic.Value
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		ua.Store(r.UserAgent())
		acceptHdr.Store(r.Header.Get("Accept"))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("hello, world"))
	})
	f := newFetcher(t, WithAllowPrivate(true))
	res, err := fetch(t, f, FetchRequest{URL: srv.URL + "/path?q=1#frag"})
	if err != nil {
		t.Fatal(err)
	}
	want := FetchResponse{URL: srv.URL + "/path?q=1", Status: 200, ContentType: "text/plain; charset=utf-8", Content: "hello, world", Bytes: 12}
	res.DurationMs = 0
	if res != want {
		t.Fatalf("got %+v\nwant %+v", res, want)
	}
	if ua.Load() != UserAgent || !strings.HasPrefix(acceptHdr.Load().(string), "text/html") {
		t.Fatalf("User-Agent %q, Accept %q", ua.Load(), acceptHdr.Load())
	}
}

func TestFetchLocalhostNameRefused(t *testing.T) {
	t.Parallel()
	srv := serve(t, text("text/plain", "x"))
	f := newFetcher(t) // the real resolver
	url := "http://localhost:" + strconv.Itoa(int(addrPort(t, srv).Port())) + "/"
	_, err := fetch(t, f, FetchRequest{URL: url})
	wantCode(t, err, wire.CodeForbidden, "localhost resolves to", "loopback")
}

func TestFetchNameResolvingToInternal(t *testing.T) {
	t.Parallel()
	srv := serve(t, text("text/plain", "public"))
	pub := addrPort(t, srv)
	port := strconv.Itoa(int(pub.Port()))
	f := newFetcher(t, withExempt(pub, netip.AddrPortFrom(netip.IPv6Loopback(), pub.Port())), hosts(map[string][]string{
		// Nobody listens on [::1]:port: the next address is tried.
		"multi.test":    {"::1", "127.0.0.1"},
		"metadata.test": {"169.254.169.254"},
		"intranet.test": {"10.1.2.3", "fd00::1"},
		// A rebinding answer: one internal address among the public one.
		"mixed.test":  {"10.0.0.1", "127.0.0.1"},
		"public.test": {"127.0.0.1"},
	}))
	_, err := fetch(t, f, FetchRequest{URL: "http://metadata.test/latest/meta-data/"})
	wantCode(t, err, wire.CodeForbidden, "metadata.test resolves to 169.254.169.254", "link-local")
	_, err = fetch(t, f, FetchRequest{URL: "http://intranet.test:" + port + "/"})
	wantCode(t, err, wire.CodeForbidden, "10.1.2.3", "RFC 1918")

	// Only the allowed address is dialed.
	res, err := fetch(t, f, FetchRequest{URL: "http://mixed.test:" + port + "/"})
	if err != nil || res.Content != "public" {
		t.Fatalf("mixed: %+v, %v", res, err)
	}
	for _, host := range []string{"public.test", "multi.test"} {
		res, err = fetch(t, f, FetchRequest{URL: "http://" + host + ":" + port + "/"})
		if err != nil || res.Content != "public" {
			t.Fatalf("%s: %+v, %v", host, res, err)
		}
	}
	// The literal IPs too, in their IPv6 forms.
	for _, u := range []string{"http://169.254.169.254/", "http://[::ffff:169.254.169.254]/", "http://[::1]/", "http://0.0.0.0:" + port + "/", "http://[fe80::1]/"} {
		_, err := fetch(t, f, FetchRequest{URL: u})
		wantCode(t, err, wire.CodeForbidden)
	}
	// A name that does not resolve.
	_, err = fetch(t, f, FetchRequest{URL: "http://nowhere.test/"})
	we := wantCode(t, err, wire.CodeUnavailable, "nowhere.test not found")
	if we.Retryable {
		t.Fatal("an unknown host is retryable")
	}
}

func TestFetchRedirectToInternalRefused(t *testing.T) {
	t.Parallel()
	var internalHits atomic.Int32
	internal := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		internalHits.Add(1)
		_, _ = w.Write([]byte("secret"))
	})
	var public *http.ServeMux = http.NewServeMux()
	public.HandleFunc("/to-internal", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, internal.URL+"/secret", http.StatusFound)
	})
	public.HandleFunc("/to-internal-name", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://internal.test:"+strconv.Itoa(int(addrPort(t, internal).Port()))+"/", http.StatusMovedPermanently)
	})
	public.HandleFunc("/to-metadata", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam/", http.StatusTemporaryRedirect)
	})
	public.HandleFunc("/to-internal-308", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, internal.URL+"/secret", http.StatusPermanentRedirect)
	})
	public.HandleFunc("/to-internal-303", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://[::ffff:127.0.0.1]:"+strconv.Itoa(int(addrPort(t, internal).Port()))+"/", http.StatusSeeOther)
	})
	// Refresh (header or <meta>) is not a redirect: it is not followed.
	public.HandleFunc("/refresh", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Refresh", "0; url="+internal.URL+"/secret")
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<meta http-equiv="refresh" content="0; url=` + internal.URL + `/secret"><p>moved`))
	})
	public.HandleFunc("/to-file", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	})
	public.HandleFunc("/to-credentials", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://user:pw@public.test/", http.StatusFound)
	})
	public.HandleFunc("/to-self", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/final", http.StatusFound)
	})
	public.HandleFunc("/final", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("landed")) })
	pubSrv := serve(t, public.ServeHTTP)
	pub := addrPort(t, pubSrv)
	base := "http://public.test:" + strconv.Itoa(int(pub.Port()))
	f := newFetcher(t, withExempt(pub), hosts(map[string][]string{
		"public.test":   {"127.0.0.1"},
		"internal.test": {"127.0.0.1"},
	}))

	res, err := fetch(t, f, FetchRequest{URL: base + "/to-self"})
	if err != nil || res.Content != "landed" || res.URL != base+"/final" {
		t.Fatalf("allowed redirect: %+v, %v", res, err)
	}
	res, err = fetch(t, f, FetchRequest{URL: base + "/refresh"})
	if err != nil || res.Content != "moved" || res.URL != base+"/refresh" {
		t.Fatalf("refresh: %+v, %v", res, err)
	}
	for path, words := range map[string][]string{
		"/to-internal":      {"127.0.0.1", "loopback"},
		"/to-internal-308":  {"127.0.0.1", "loopback"},
		"/to-internal-303":  {"IPv4-mapped loopback"},
		"/to-internal-name": {"internal.test resolves to 127.0.0.1"},
		"/to-metadata":      {"169.254.169.254", "link-local"},
		"/to-file":          {"redirect from", "scheme \"file\""},
		"/to-credentials":   {"redirect from", "credentials"},
	} {
		_, err := fetch(t, f, FetchRequest{URL: base + path})
		wantCode(t, err, wire.CodeForbidden, words...)
	}
	if internalHits.Load() != 0 {
		t.Fatal("the internal server was reached")
	}
}

func TestFetchRedirectLimit(t *testing.T) {
	t.Parallel()
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
		if n > 0 {
			http.Redirect(w, r, fmt.Sprintf("/r/%d", n-1), http.StatusFound)
			return
		}
		_, _ = w.Write([]byte("done"))
	})
	f := newFetcher(t, WithAllowPrivate(true))
	res, err := fetch(t, f, FetchRequest{URL: srv.URL + fmt.Sprintf("/r/%d", MaxRedirects)})
	if err != nil || res.Content != "done" || res.URL != srv.URL+"/r/0" {
		t.Fatalf("%d redirects: %+v, %v", MaxRedirects, res, err)
	}
	_, err = fetch(t, f, FetchRequest{URL: srv.URL + fmt.Sprintf("/r/%d", MaxRedirects+1)})
	we := wantCode(t, err, wire.CodeUnavailable, "stopped after 5 redirects")
	if we.Retryable {
		t.Fatal("a redirect loop is retryable")
	}
}

func TestFetchTruncation(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("0123456789", 1000)
	srv := serve(t, text("text/plain", body))
	f := newFetcher(t, WithAllowPrivate(true), WithMaxBytes(5000))
	tests := []struct {
		maxBytes  int64
		bytes     int64
		truncated bool
	}{
		{100, 100, true},
		{10000, 5000, true}, // lowered to the ceiling
		{0, 5000, true},     // the default, lowered to the ceiling
		{1, 1, true},
	}
	for _, tt := range tests {
		res, err := fetch(t, f, FetchRequest{URL: srv.URL, MaxBytes: tt.maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		if res.Bytes != tt.bytes || res.Truncated != tt.truncated || res.Content != body[:tt.bytes] {
			t.Errorf("max_bytes %d: bytes %d truncated %v content %d bytes", tt.maxBytes, res.Bytes, res.Truncated, len(res.Content))
		}
	}
	exact := newFetcher(t, WithAllowPrivate(true))
	res, err := fetch(t, exact, FetchRequest{URL: srv.URL, MaxBytes: int64(len(body))})
	if err != nil || res.Truncated || res.Bytes != int64(len(body)) {
		t.Fatalf("exact size: truncated %v bytes %d, %v", res.Truncated, res.Bytes, err)
	}
	// A multi-byte character cut in half is dropped, not replaced.
	euro := serve(t, text("text/plain; charset=utf-8", "ab€"))
	res, err = fetch(t, exact, FetchRequest{URL: euro.URL, MaxBytes: 4})
	if err != nil || res.Content != "ab" || !res.Truncated {
		t.Fatalf("cut rune: %+v, %v", res, err)
	}
}

// Links made absolute can make an HTML page's text far longer than its
// markup: a long <base href> (or the page's own long URL) repeated in every
// 15-byte link. The text is cut at max_bytes too, so a small page cannot
// make the worker build gigabytes of text.
func TestFetchHTMLTextBounded(t *testing.T) {
	t.Parallel()
	const maxBytes = 64 << 10
	links := strings.Repeat(`<a href=a>b</a>`, maxBytes/15)
	mux := http.NewServeMux()
	mux.HandleFunc("/base", text("text/html", `<base href="http://example.com/`+strings.Repeat("q", 32<<10)+`/">`+links[:15000]))
	mux.HandleFunc("/", text("text/html", links))
	srv := serve(t, mux.ServeHTTP)
	f := newFetcher(t, WithAllowPrivate(true))
	for _, u := range []string{srv.URL + "/base", srv.URL + "/" + strings.Repeat("p", 4000) + "/"} {
		res, err := fetch(t, f, FetchRequest{URL: u, MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Content) > maxBytes || !res.Truncated || res.Bytes >= maxBytes || !strings.HasPrefix(res.Content, "[b](http://") {
			t.Fatalf("%.40s: %d bytes of text from %d, truncated %v: %.60q", u, len(res.Content), res.Bytes, res.Truncated, res.Content)
		}
	}
}

// A compressed body is limited after decompression: no zip bomb.
func TestFetchGzipLimited(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	_, _ = zw.Write(bytes.Repeat([]byte("a"), 256<<10))
	_ = zw.Close()
	srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(buf.Bytes())
	})
	f := newFetcher(t, WithAllowPrivate(true))
	res, err := fetch(t, f, FetchRequest{URL: srv.URL, MaxBytes: 1000})
	if err != nil || res.Bytes != 1000 || !res.Truncated || res.Content != strings.Repeat("a", 1000) {
		t.Fatalf("bytes %d truncated %v, %v", res.Bytes, res.Truncated, err)
	}
}

func TestFetchTimeout(t *testing.T) {
	t.Parallel()
	hang := serve(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	slowBody := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("first part"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	f := newFetcher(t, WithAllowPrivate(true))
	for _, srv := range []string{hang.URL, slowBody.URL} {
		began := time.Now()
		_, err := fetch(t, f, FetchRequest{URL: srv, TimeoutMs: 200})
		wantCode(t, err, wire.CodeTimeout, "longer than 200ms")
		if d := time.Since(began); d > 3*time.Second {
			t.Fatalf("timeout after %v", d)
		}
	}
	// The caller's deadline, shorter than timeout_ms.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err := f.Fetch(ctx, FetchRequest{URL: hang.URL})
	wantCode(t, err, wire.CodeTimeout, "caller's deadline")
	// A canceled caller.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = f.Fetch(ctx, FetchRequest{URL: hang.URL})
	wantCode(t, err, wire.CodeCanceled)
	// A cause that is a wire error is the answer.
	ctx, cancelCause := context.WithCancelCause(context.Background())
	time.AfterFunc(50*time.Millisecond, func() { cancelCause(wire.Errorf(wire.CodeUnavailable, "shutting down")) })
	_, err = f.Fetch(ctx, FetchRequest{URL: hang.URL})
	wantCode(t, err, wire.CodeUnavailable, "shutting down")
}

func TestFetchNetworkErrors(t *testing.T) {
	t.Parallel()
	closed := serve(t, text("text/plain", "x"))
	closedURL := closed.URL
	closed.Close()
	broken := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte("only ten b"))
		panic(http.ErrAbortHandler)
	})
	tlsSrv := httptestTLS(t)
	f := newFetcher(t, WithAllowPrivate(true))

	_, err := fetch(t, f, FetchRequest{URL: closedURL})
	wantCode(t, err, wire.CodeUnavailable, "refused")
	_, err = fetch(t, f, FetchRequest{URL: broken.URL})
	wantCode(t, err, wire.CodeUnavailable)
	_, err = fetch(t, f, FetchRequest{URL: tlsSrv})
	we := wantCode(t, err, wire.CodeUnavailable, "certificate")
	if we.Retryable {
		t.Fatal("a bad certificate is retryable")
	}
}

func TestFetchStatusIsAnAnswer(t *testing.T) {
	t.Parallel()
	srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("<h1>Not Found</h1><p>No such page.</p>"))
	})
	f := newFetcher(t, WithAllowPrivate(true))
	res, err := fetch(t, f, FetchRequest{URL: srv.URL})
	if err != nil || res.Status != 404 || res.Content != "# Not Found\n\nNo such page." {
		t.Fatalf("%+v, %v", res, err)
	}
	for _, code := range []int{http.StatusInternalServerError, http.StatusTooManyRequests, http.StatusNoContent} {
		srv := serve(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) })
		res, err := fetch(t, f, FetchRequest{URL: srv.URL})
		if err != nil || res.Status != code {
			t.Fatalf("status %d: %+v, %v", code, res, err)
		}
	}
}

func TestFetchContent(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + strings.Repeat("\x00", 600))
	mux := http.NewServeMux()
	mux.HandleFunc("/page.html", text("text/html; charset=utf-8", `<html><head><title>T</title><script>evil()</script></head>
		<body><p>Read <a href="next.html">the next page</a>.</p></body></html>`))
	mux.HandleFunc("/latin1", text("text/plain; charset=ISO-8859-1", "caf\xe9"))
	mux.HandleFunc("/meta", text("text/html", `<meta charset="windows-1252"><p>caf`+"\xe9</p>"))
	mux.HandleFunc("/json", text("application/json", `{"a": 1}`))
	mux.HandleFunc("/image", text("image/png", string(png)))
	mux.HandleFunc("/pdf", text("application/pdf", "%PDF-1.7"))
	mux.HandleFunc("/untyped-png", func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = nil // no sniffing by the server
		_, _ = w.Write(png)
	})
	mux.HandleFunc("/untyped-text", func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = nil
		_, _ = w.Write([]byte("just text"))
	})
	mux.HandleFunc("/untyped-html", func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = nil
		_, _ = w.Write([]byte("<!DOCTYPE html><p>sniffed <b>html</b></p>"))
	})
	srv := serve(t, mux.ServeHTTP)
	f := newFetcher(t, WithAllowPrivate(true))
	tests := []struct {
		path, contentType, content string
		binary                     bool
	}{
		{"/page.html", "text/html; charset=utf-8", "T\n\nRead [the next page](" + srv.URL + "/next.html).", false},
		{"/latin1", "text/plain; charset=ISO-8859-1", "café", false},
		{"/meta", "text/html", "café", false},
		{"/json", "application/json", `{"a": 1}`, false},
		{"/image", "image/png", "", true},
		{"/pdf", "application/pdf", "", true},
		{"/untyped-png", "image/png", "", true},
		{"/untyped-text", "text/plain; charset=utf-8", "just text", false},
		{"/untyped-html", "text/html; charset=utf-8", "sniffed html", false},
	}
	for _, tt := range tests {
		res, err := fetch(t, f, FetchRequest{URL: srv.URL + tt.path})
		if err != nil {
			t.Fatalf("%s: %v", tt.path, err)
		}
		if res.ContentType != tt.contentType || res.Content != tt.content || res.Binary != tt.binary {
			t.Errorf("%s: type %q content %q binary %v", tt.path, res.ContentType, res.Content, res.Binary)
		}
		if tt.binary && res.Bytes != 0 {
			t.Errorf("%s: %d bytes of a binary body", tt.path, res.Bytes)
		}
	}
}

// A Content-Type header with bytes that are not UTF-8 is echoed as valid
// UTF-8: every string of the answer is, or a strict msgpack or JSON
// decoder would refuse the whole reply.
func TestFetchContentTypeUTF8(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header, want string
		binary       bool
	}{
		{"text/plain; charset=\xff\xfe", "text/plain; charset=\uFFFD", false},
		{"application/x-\xe9", "application/x-\uFFFD", true},
	}
	for _, tt := range tests {
		srv := serve(t, text(tt.header, "hi"))
		f := newFetcher(t, WithAllowPrivate(true))
		res, err := fetch(t, f, FetchRequest{URL: srv.URL})
		if err != nil || res.ContentType != tt.want || res.Binary != tt.binary {
			t.Fatalf("%q: %+v, %v", tt.header, res, err)
		}
	}
}

func TestFetchBadInput(t *testing.T) {
	t.Parallel()
	f := newFetcher(t)
	for _, req := range []FetchRequest{
		{},
		{URL: "file:///etc/passwd"},
		{URL: "ftp://example.com/"},
		{URL: "gopher://example.com/"},
		{URL: "ws://example.com/"},
		{URL: "http://user:pw@example.com/"},
		{URL: "https://example.com/", TimeoutMs: 60001},
		{URL: "https://example.com/", MaxBytes: -5},
	} {
		_, err := fetch(t, f, req)
		wantCode(t, err, wire.CodeInvalidPayload)
	}
}

func TestNewFetcherOptions(t *testing.T) {
	t.Parallel()
	for _, opt := range []Option{WithMaxBytes(0), WithMaxBytes(-1), WithMaxBytes(MaxBytesLimit + 1), WithLogger(nil), withLookup(nil), withExempt(netip.AddrPort{})} {
		if _, err := NewFetcher(opt); err == nil {
			t.Error("an invalid option was accepted")
		}
	}
	f := newFetcher(t, nil, WithMaxBytes(100))
	if f.maxBytes != 100 || f.o.maxBytes != 100 {
		t.Fatalf("default %d, ceiling %d", f.maxBytes, f.o.maxBytes)
	}
	if f.transport.Proxy != nil {
		t.Fatal("the transport uses a proxy")
	}
}

// A name whose DNS answer turns internal between two fetches (DNS
// rebinding) is refused at the second dial: the check is on the address
// dialed, every time.
func TestFetchDNSRebinding(t *testing.T) {
	t.Parallel()
	srv := serve(t, text("text/plain", "public"))
	pub := addrPort(t, srv)
	var lookups atomic.Int32
	f := newFetcher(t, withExempt(pub), withLookup(func(context.Context, string) ([]netip.Addr, error) {
		if lookups.Add(1) == 1 {
			return []netip.Addr{pub.Addr()}, nil // "public" (exempt)
		}
		return []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil
	}))
	target := "http://rebind.test:" + strconv.Itoa(int(pub.Port())) + "/"
	res, err := fetch(t, f, FetchRequest{URL: target})
	if err != nil || res.Content != "public" {
		t.Fatalf("first: %+v, %v", res, err)
	}
	_ = f.Close(context.Background()) // no kept-alive connection: the next fetch dials
	_, err = fetch(t, f, FetchRequest{URL: target})
	wantCode(t, err, wire.CodeForbidden, "rebind.test resolves to 10.0.0.1", "RFC 1918")
	if lookups.Load() != 2 {
		t.Fatalf("%d lookups", lookups.Load())
	}
}

// Every spelling of an internal address is refused, with a server
// listening there to prove that none reaches it: IP literals in their IPv6
// forms, hosts that are numbers (names to the fetcher; a resolver that
// reads them as IPv4, as glibc's inet_aton does, has its answer checked)
// and userinfo or fragment tricks.
func TestFetchAddressForms(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := serve(t, func(http.ResponseWriter, *http.Request) { hits.Add(1) })
	port := strconv.Itoa(int(addrPort(t, srv).Port()))
	f := newFetcher(t, withLookup(func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}))
	tests := []struct {
		url   string
		code  wire.Code
		words []string
	}{
		{"http://127.0.0.1:" + port + "/", wire.CodeForbidden, []string{"loopback"}},
		{"http://127.1:" + port + "/", wire.CodeForbidden, []string{"127.1 resolves to 127.0.0.1"}},
		{"http://2130706433:" + port + "/", wire.CodeForbidden, []string{"2130706433 resolves to 127.0.0.1"}},
		{"http://0177.0.0.1:" + port + "/", wire.CodeForbidden, []string{"0177.0.0.1 resolves to 127.0.0.1"}},
		{"http://0x7f.1:" + port + "/", wire.CodeForbidden, []string{"0x7f.1 resolves to 127.0.0.1"}},
		{"http://0x7f000001:" + port + "/", wire.CodeForbidden, []string{"resolves to 127.0.0.1"}},
		{"http://0:" + port + "/", wire.CodeForbidden, []string{"resolves to 127.0.0.1"}},
		{"http://[::ffff:127.0.0.1]:" + port + "/", wire.CodeForbidden, []string{"IPv4-mapped loopback"}},
		{"http://[::ffff:7f00:1]:" + port + "/", wire.CodeForbidden, []string{"IPv4-mapped loopback"}},
		{"http://[::127.0.0.1]:" + port + "/", wire.CodeForbidden, []string{"IPv4-compatible loopback"}},
		{"http://[::1]:" + port + "/", wire.CodeForbidden, []string{"loopback (::1)"}},
		{"http://[::]:" + port + "/", wire.CodeForbidden, []string{"unspecified (::)"}},
		{"http://0.0.0.0:" + port + "/", wire.CodeForbidden, []string{"unspecified"}},
		{"http://[fe80::1%25lo]:" + port + "/", wire.CodeForbidden, []string{"link-local"}},
		{"http://[fc00::1]:" + port + "/", wire.CodeForbidden, []string{"unique local"}},
		{"http://[fd00:ec2::254]/", wire.CodeForbidden, []string{"unique local"}},
		{"http://100.64.0.1:" + port + "/", wire.CodeForbidden, []string{"CGNAT"}},
		{"http://169.254.169.254/latest/meta-data/", wire.CodeForbidden, []string{"link-local"}},
		{"http://[::ffff:a9fe:a9fe]/", wire.CodeForbidden, []string{"IPv4-mapped link-local"}},
		{"http://127.0.0.1:" + port + "#@public.example/", wire.CodeForbidden, []string{"loopback"}},
		{"http://127.0.0.1:" + port + "\\@public.example/", wire.CodeInvalidPayload, []string{"invalid userinfo"}},
		{"http://public.example@127.0.0.1:" + port + "/", wire.CodeInvalidPayload, []string{"credentials"}},
		{"http://public.example:x@127.0.0.1:" + port + "/", wire.CodeInvalidPayload, []string{"credentials"}},
	}
	for _, tt := range tests {
		_, err := fetch(t, f, FetchRequest{URL: tt.url})
		wantCode(t, err, tt.code, tt.words...)
	}
	if hits.Load() != 0 {
		t.Fatalf("the loopback server was reached %d times", hits.Load())
	}
}

// A proxy from the environment is never used: it would connect on the
// fetcher's behalf, to internal hosts too, unchecked.
func TestFetchIgnoresProxyEnv(t *testing.T) {
	var proxied atomic.Int32
	proxy := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		proxied.Add(1)
		_, _ = w.Write([]byte("via proxy"))
	})
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"} {
		t.Setenv(k, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	srv := serve(t, text("text/plain", "direct"))
	pub := addrPort(t, srv)
	f := newFetcher(t, withExempt(pub), hosts(map[string][]string{
		"public.test":   {"127.0.0.1"},
		"internal.test": {"10.0.0.1"},
	}))
	res, err := fetch(t, f, FetchRequest{URL: "http://public.test:" + strconv.Itoa(int(pub.Port())) + "/"})
	if err != nil || res.Content != "direct" {
		t.Fatalf("%+v, %v", res, err)
	}
	_, err = fetch(t, f, FetchRequest{URL: "http://internal.test/"})
	wantCode(t, err, wire.CodeForbidden, "10.0.0.1")
	if proxied.Load() != 0 {
		t.Fatal("the proxy was used")
	}
}

// Hostile servers end in a coded error or a cut answer, within the
// fetch's time.
func TestFetchHostileServers(t *testing.T) {
	t.Parallel()
	hugeHeader := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("a", 100<<10))
		_, _ = w.Write([]byte("x"))
	})
	endless := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		chunk := bytes.Repeat([]byte("z"), 32<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	loop := serve(t, func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, r.URL.Path, http.StatusFound) })
	// Headers a byte at a time, slower than the fetch's timeout.
	trickle := rawServer(t, func(c net.Conn) {
		for _, b := range []byte("HTTP/1.1 200 OK\r\nX-Slow: " + strings.Repeat("s", 200)) {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	// Informational responses without end.
	early := rawServer(t, func(c net.Conn) {
		for {
			if _, err := c.Write([]byte("HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n")); err != nil {
				return
			}
		}
	})
	// A status line that is not HTTP.
	garbage := rawServer(t, func(c net.Conn) { _, _ = c.Write([]byte("\x00\xffSSH-2.0-OpenSSH\r\n\r\n")) })
	f := newFetcher(t, WithAllowPrivate(true))

	tests := []struct {
		name  string
		req   FetchRequest
		code  wire.Code
		words []string
	}{
		{"huge header", FetchRequest{URL: hugeHeader.URL}, wire.CodeUnavailable, []string{"headers exceeded"}},
		{"redirect loop", FetchRequest{URL: loop.URL + "/again"}, wire.CodeUnavailable, []string{"stopped after 5 redirects"}},
		{"trickled headers", FetchRequest{URL: "http://" + trickle + "/", TimeoutMs: 300}, wire.CodeTimeout, []string{"longer than 300ms"}},
		{"1xx without end", FetchRequest{URL: "http://" + early + "/", TimeoutMs: 5000}, wire.CodeUnavailable, []string{"headers exceeded"}},
		{"not http", FetchRequest{URL: "http://" + garbage + "/"}, wire.CodeUnavailable, []string{"malformed HTTP"}},
	}
	for _, tt := range tests {
		began := time.Now()
		_, err := fetch(t, f, tt.req)
		wantCode(t, err, tt.code, tt.words...)
		if d := time.Since(began); d > 3*time.Second {
			t.Errorf("%s: answered after %v", tt.name, d)
		}
	}
	res, err := fetch(t, f, FetchRequest{URL: endless.URL, MaxBytes: 100000})
	if err != nil || !res.Truncated || res.Bytes != 100000 || len(res.Content) != 100000 {
		t.Fatalf("endless body: bytes %d truncated %v, %v", res.Bytes, res.Truncated, err)
	}
}
