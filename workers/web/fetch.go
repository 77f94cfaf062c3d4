package web

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/iii-on-nats/iii/engine/wire"
)

// sniffLen is how much of a body without Content-Type is read to guess it.
const sniffLen = 512

// accept is the Accept header: text first, anything else after.
const accept = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,text/*;q=0.8,*/*;q=0.5"

// errFetchTimeout is the cause of a fetch that ran out of its own time
// (timeout_ms), as opposed to its caller's.
var errFetchTimeout = errors.New("web: fetch timed out")

// Fetcher fetches web resources for a model: one GET per call, at most
// [MaxRedirects] redirects, the body read up to a byte limit and returned
// as text. Unless [WithAllowPrivate], it connects only to public internet
// addresses: every address is checked after DNS resolution, on the IP
// actually dialed, so a name that resolves to an internal address, a DNS
// answer that changes between lookups, and a redirect to an internal host
// are all refused (forbidden). It never uses a proxy from the environment,
// which would bypass the check. A Fetcher is safe for concurrent use.
type Fetcher struct {
	o         options
	maxBytes  int64 // the default max_bytes
	transport *http.Transport
	client    *http.Client
	logger    *slog.Logger
}

// NewFetcher returns a fetcher configured by opts. Its errors wrap
// engine.ErrInvalidOption.
func NewFetcher(opts ...Option) (*Fetcher, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	g := newGuard(o)
	t := &http.Transport{
		Proxy:                  nil, // a proxy would dial for us, unchecked
		DialContext:            g.DialContext,
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    10 * time.Second,
		MaxIdleConns:           32,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	f := &Fetcher{
		o:         o,
		maxBytes:  min(DefaultMaxBytes, o.maxBytes),
		transport: t,
		logger:    o.logger,
	}
	f.client = &http.Client{Transport: t, CheckRedirect: checkRedirect}
	return f, nil
}

// redirectError is a redirect the fetcher will not follow.
type redirectError struct{ we *wire.Error }

func (e *redirectError) Error() string { return e.we.Message }

// checkRedirect follows at most MaxRedirects redirects, each to a URL the
// request itself could have named.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > MaxRedirects {
		return &redirectError{wire.Errorf(wire.CodeUnavailable, "stopped after %d redirects (the next was to %s)", MaxRedirects, clip(req.URL.String(), 512)).Permanent()}
	}
	if _, err := parseURL(req.URL.String()); err != nil {
		return &redirectError{wire.Errorf(wire.CodeForbidden, "redirect from %s refused: its url %s", via[len(via)-1].URL, err.Error())}
	}
	return nil
}

// Fetch GETs req.URL and returns its content. Errors are *wire.Error:
// invalid_payload for a request that does not validate, forbidden for an
// address or redirect refused, timeout when the fetch outlives
// timeout_ms or ctx's deadline, unavailable when the server cannot be
// reached (DNS, connection, TLS) or the body breaks off, canceled when
// ctx is. A response, whatever its status, is no error.
func (f *Fetcher) Fetch(ctx context.Context, req FetchRequest) (FetchResponse, error) {
	if err := req.Validate(); err != nil {
		return FetchResponse{}, err
	}
	u, _ := parseURL(req.URL)
	limit := f.maxBytes
	if req.MaxBytes > 0 {
		limit = min(req.MaxBytes, f.o.maxBytes)
	}
	timeout := req.timeout()
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, errFetchTimeout)
	defer cancel()

	began := time.Now()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return FetchResponse{}, wire.Errorf(wire.CodeInvalidPayload, "url: %v", err)
	}
	hreq.Header.Set("User-Agent", UserAgent)
	hreq.Header.Set("Accept", accept)
	resp, err := f.client.Do(hreq)
	if err != nil {
		return FetchResponse{}, f.failure(ctx, u, timeout, err)
	}
	defer resp.Body.Close()

	out := FetchResponse{
		URL:         resp.Request.URL.String(),
		Status:      resp.StatusCode,
		ContentType: clip(strings.ToValidUTF8(resp.Header.Get("Content-Type"), "\uFFFD"), maxContentTypeLen),
	}
	mt, cs := mediaType(out.ContentType)
	if mt != "" && !isText(mt) {
		out.Binary = true
		out.DurationMs = time.Since(began).Milliseconds()
		return out, nil
	}
	br := bufio.NewReaderSize(io.LimitReader(resp.Body, limit+1), sniffLen)
	if mt == "" {
		head, err := br.Peek(sniffLen)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
			return FetchResponse{}, f.failure(ctx, u, timeout, err)
		}
		if len(head) > 0 {
			out.ContentType = http.DetectContentType(head)
			if mt, cs = mediaType(out.ContentType); !isText(mt) {
				out.Binary = true
				out.DurationMs = time.Since(began).Milliseconds()
				return out, nil
			}
		}
	}
	body, err := io.ReadAll(br)
	if err != nil {
		return FetchResponse{}, f.failure(ctx, u, timeout, err)
	}
	if int64(len(body)) > limit {
		body, out.Truncated = body[:limit], true
	}
	out.Bytes = int64(len(body))
	text := decodeText(body, out.ContentType, mt, cs, out.Truncated)
	if isHTML(mt) {
		var cut bool
		text, cut = htmlToText(text, resp.Request.URL, int(limit))
		out.Truncated = out.Truncated || cut
	}
	out.Content = text
	out.DurationMs = time.Since(began).Milliseconds()
	return out, nil
}

// failure turns a failed request or body read into a wire error.
func (f *Fetcher) failure(ctx context.Context, u *url.URL, timeout time.Duration, err error) *wire.Error {
	if ae, ok := asAddressError(err); ok {
		f.logger.Info("fetch refused", slog.String("url", u.Redacted()), slog.String("address", ae.addr.String()), slog.String("reason", ae.reason))
		return wire.Wrap(wire.CodeForbidden, ae, "")
	}
	var re *redirectError
	if errors.As(err, &re) {
		if re.we.Code == wire.CodeForbidden {
			f.logger.Info("fetch refused", slog.String("url", u.Redacted()), slog.String("reason", re.we.Message))
		}
		return re.we
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		var we *wire.Error
		switch {
		case errors.As(cause, &we):
			return we
		case errors.Is(cause, errFetchTimeout):
			return wire.Wrap(wire.CodeTimeout, errFetchTimeout, "fetch of %s took longer than %v", u.Redacted(), timeout)
		case errors.Is(cause, context.DeadlineExceeded):
			return wire.Wrap(wire.CodeTimeout, cause, "fetch of %s: the caller's deadline passed", u.Redacted())
		default:
			return wire.Wrap(wire.CodeCanceled, cause, "fetch of %s canceled", u.Redacted())
		}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return wire.Wrap(wire.CodeTimeout, err, "fetch of %s timed out", u.Redacted())
	}
	we := wire.Wrap(wire.CodeUnavailable, err, "fetch of %s failed", u.Redacted())
	var (
		dnsErr  *net.DNSError
		certErr *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
	)
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		we.Message = fmt.Sprintf("fetch of %s failed: host %s not found", u.Redacted(), u.Hostname())
		we.Retryable = false
	case errors.As(err, &certErr), errors.As(err, &unknown), errors.As(err, &host):
		we.Retryable = false
	}
	return we
}

// Close closes the fetcher's idle connections; fetches in flight go on.
// It returns nil.
func (f *Fetcher) Close(context.Context) error {
	f.transport.CloseIdleConnections()
	return nil
}
