package httpbody

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ErrTooLarge is matched (errors.Is) by every [*TooLargeError].
var ErrTooLarge = errors.New("httpbody: response body too large")

// TooLargeError is the error of a [Limit] body that proved longer than its
// limit.
type TooLargeError struct {
	// Limit is the most the body may hold, in bytes.
	Limit int64
}

func (e *TooLargeError) Error() string {
	return "the response body is larger than " + size(e.Limit) + " (the limit)"
}

// Is reports whether target is [ErrTooLarge].
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// size writes n bytes for a person: "8 MiB", "64 KiB", "1000 bytes".
func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Truncate returns rc cut at n bytes (n ≥ 0): past them it reads as ended.
// Closing it closes rc.
func Truncate(rc io.ReadCloser, n int64) io.ReadCloser {
	return &truncated{r: io.LimitReader(rc, n), c: rc}
}

type truncated struct {
	r io.Reader
	c io.Closer
}

func (b *truncated) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *truncated) Close() error               { return b.c.Close() }

// Limit returns rc bounded at n bytes (n ≥ 0): it reads the first n bytes
// of rc, and a read that finds more fails with a [*TooLargeError] (as
// will every read after it), so a body of exactly n bytes reads whole.
// Closing it closes rc.
func Limit(rc io.ReadCloser, n int64) io.ReadCloser {
	return &limited{rc: rc, left: max(n, 0), limit: max(n, 0)}
}

type limited struct {
	rc    io.ReadCloser
	left  int64 // bytes still allowed
	limit int64
	err   error // the *TooLargeError once the body proved too long
}

func (b *limited) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Ask for one byte past the limit, to learn whether the body ends
	// there without reading any further.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if int64(n) <= b.left {
		b.left -= int64(n)
		return n, err
	}
	n = int(b.left)
	b.left = 0
	b.err = &TooLargeError{Limit: b.limit}
	return n, b.err
}

func (b *limited) Close() error { return b.rc.Close() }

// Idle returns rc whose every read arms t for d, and stops it when the
// read returns: t fires when one read waits longer than d for a byte. The
// timer runs only inside Read, so time the reading goroutine spends
// elsewhere (on a slow consumer of what it read) is not the server's
// silence, and any byte (an SSE comment, a ping) is not silence either.
// One goroutine reads at a time. Closing it closes rc; t is left as it is.
func Idle(rc io.ReadCloser, t *time.Timer, d time.Duration) io.ReadCloser {
	return &idle{rc: rc, t: t, d: d}
}

type idle struct {
	rc io.ReadCloser
	t  *time.Timer
	d  time.Duration
}

func (b *idle) Read(p []byte) (int, error) {
	b.t.Reset(b.d)
	n, err := b.rc.Read(p)
	b.t.Stop()
	return n, err
}

func (b *idle) Close() error { return b.rc.Close() }

// Middleware is an HTTP client middleware: both SDKs' option.Middleware is
// an alias of this type, so the functions below go to
// option.WithMiddleware as they are.
type Middleware = func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error)

// TruncateErrors is a middleware that cuts the body of every response
// without a 2xx status at n bytes ([Truncate]). The SDKs read such a body
// whole to build their error: an endless one would otherwise be allocated
// whole. A cut body is classified by its status.
func TruncateErrors(n int64) Middleware {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		res, err := next(req)
		if res != nil && res.Body != nil && (res.StatusCode < 200 || res.StatusCode > 299) {
			res.Body = Truncate(res.Body, n)
		}
		return res, err
	}
}

// Watch is a middleware that times every wait for the server with t: it
// arms t for d while the request waits for the response headers, and
// wraps the body with [Idle], then with [Limit] at limit bytes (none when
// limit < 0). t should be stopped when the request starts; the caller
// makes it cancel the request's context when it fires. Each request of a
// call (the pages of a list) is timed the same way; the requests must not
// overlap.
func Watch(t *time.Timer, d time.Duration, limit int64) Middleware {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		t.Reset(d)
		res, err := next(req)
		t.Stop()
		if res != nil && res.Body != nil {
			res.Body = Idle(res.Body, t, d)
			if limit >= 0 {
				res.Body = Limit(res.Body, limit)
			}
		}
		return res, err
	}
}
