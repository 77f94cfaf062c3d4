package httpbody_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/iii-on-nats/iii/workers/internal/httpbody"
)

// body is a ReadCloser over data that counts what was read of it and
// whether it was closed.
type body struct {
	r      io.Reader
	read   int64
	closed bool
}

func newBody(data []byte, oneByte bool) *body {
	var r io.Reader = bytes.NewReader(data)
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	return &body{r: r}
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += int64(n)
	return n, err
}

func (b *body) Close() error { b.closed = true; return nil }

func TestLimit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		size    int
		limit   int64
		oneByte bool
		tooBig  bool
	}{
		{name: "empty, limit 0", size: 0, limit: 0},
		{name: "one byte, limit 0", size: 1, limit: 0, tooBig: true},
		{name: "under", size: 10, limit: 11},
		{name: "exactly", size: 10, limit: 10},
		{name: "exactly, byte by byte", size: 10, limit: 10, oneByte: true},
		{name: "one over", size: 11, limit: 10, tooBig: true},
		{name: "one over, byte by byte", size: 11, limit: 10, oneByte: true, tooBig: true},
		{name: "far over", size: 1 << 20, limit: 64 << 10, tooBig: true},
		{name: "negative limit", size: 1, limit: -5, tooBig: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := bytes.Repeat([]byte("x"), tc.size)
			src := newBody(data, tc.oneByte)
			rc := httpbody.Limit(src, tc.limit)
			got, err := io.ReadAll(rc)
			limit := max(tc.limit, 0)
			if !tc.tooBig {
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("read %d bytes, error %v; want all %d", len(got), err, tc.size)
				}
			} else {
				var tl *httpbody.TooLargeError
				if !errors.Is(err, httpbody.ErrTooLarge) || !errors.As(err, &tl) || tl.Limit != limit || int64(len(got)) != limit {
					t.Fatalf("read %d bytes, error %v; want %d and a TooLargeError", len(got), err, limit)
				}
				// The error sticks.
				if n, err2 := rc.Read(make([]byte, 8)); n != 0 || !errors.Is(err2, httpbody.ErrTooLarge) {
					t.Fatalf("read after the error: %d, %v", n, err2)
				}
			}
			if src.read > limit+1 {
				t.Fatalf("read %d bytes of the body, past the limit %d + 1", src.read, limit)
			}
			if err := rc.Close(); err != nil || !src.closed {
				t.Fatalf("close: %v, closed %v", err, src.closed)
			}
		})
	}
}

func TestTooLargeErrorText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		limit int64
		want  string
	}{
		{8 << 20, "8 MiB"},
		{64 << 10, "64 KiB"},
		{1000, "1000 bytes"},
		{(1 << 20) + 1, "1048577 bytes"},
		{0, "0 bytes"},
	}
	for _, tc := range cases {
		if got := (&httpbody.TooLargeError{Limit: tc.limit}).Error(); !strings.Contains(got, tc.want) {
			t.Errorf("limit %d: %q does not name %q", tc.limit, got, tc.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		size  int
		limit int64
	}{
		{name: "under", size: 5, limit: 10},
		{name: "exactly", size: 10, limit: 10},
		{name: "over", size: 100, limit: 10},
		{name: "limit 0", size: 3, limit: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := bytes.Repeat([]byte("y"), tc.size)
			src := newBody(data, false)
			rc := httpbody.Truncate(src, tc.limit)
			got, err := io.ReadAll(rc)
			want := data[:min(int64(tc.size), tc.limit)]
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes, error %v; want %d", len(got), err, len(want))
			}
			if src.read > tc.limit {
				t.Fatalf("read %d bytes of the body, past the limit %d", src.read, tc.limit)
			}
			if err := rc.Close(); err != nil || !src.closed {
				t.Fatalf("close: %v, closed %v", err, src.closed)
			}
		})
	}
}

// FuzzLimit: whatever the body, the limit and the size of the reads, Limit
// and Truncate give the body's first bytes up to the limit, Limit fails
// exactly when the body is longer, and neither reads more of the body
// than the limit (plus one byte for Limit).
func FuzzLimit(f *testing.F) {
	f.Add([]byte(""), int64(0), uint8(1))
	f.Add([]byte("hello"), int64(5), uint8(0))
	f.Add([]byte("hello"), int64(4), uint8(2))
	f.Add([]byte("hello, world"), int64(-1), uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, limit int64, chunk uint8) {
		limit %= 1 << 16
		buf := make([]byte, int(chunk)+1)
		read := func(rc io.Reader) ([]byte, error) {
			var out []byte
			for {
				n, err := rc.Read(buf)
				out = append(out, buf[:n]...)
				if err == io.EOF {
					return out, nil
				}
				if err != nil {
					return out, err
				}
			}
		}
		bound := max(limit, 0)
		want := data[:min(int64(len(data)), bound)]

		src := newBody(data, false)
		got, err := read(httpbody.Limit(src, limit))
		if !bytes.Equal(got, want) {
			t.Fatalf("Limit read %q, want %q", got, want)
		}
		if tooBig := int64(len(data)) > bound; tooBig != errors.Is(err, httpbody.ErrTooLarge) || (!tooBig && err != nil) {
			t.Fatalf("Limit of %d bytes at %d: error %v", len(data), limit, err)
		}
		if src.read > bound+1 {
			t.Fatalf("Limit read %d bytes of the body at %d", src.read, limit)
		}

		src = newBody(data, false)
		got, err = read(httpbody.Truncate(src, bound))
		if err != nil || !bytes.Equal(got, want) || src.read > bound {
			t.Fatalf("Truncate read %q (%d of the body), error %v; want %q", got, src.read, err, want)
		}
	})
}

// stallReader blocks its first read until release is closed, then reads
// as data does.
type stallReader struct {
	release chan struct{}
	r       io.Reader
}

func (s *stallReader) Read(p []byte) (int, error) {
	<-s.release
	return s.r.Read(p)
}

func (s *stallReader) Close() error { return nil }

func TestIdle(t *testing.T) {
	t.Parallel()
	const d = 50 * time.Millisecond
	cases := []struct {
		name string
		// stall is how long the first read waits for its byte.
		stall time.Duration
		// between is how long the reader waits between its reads.
		between time.Duration
		fires   bool
	}{
		{name: "a read that waits past the timeout", stall: 4 * d, fires: true},
		{name: "quick reads", stall: 0, fires: false},
		{name: "slow reader between quick reads", stall: 0, between: 4 * d, fires: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var fired atomic.Int32
			timer := time.AfterFunc(time.Hour, func() { fired.Add(1) })
			timer.Stop()
			defer timer.Stop()
			src := &stallReader{release: make(chan struct{}), r: iotest.OneByteReader(strings.NewReader("abc"))}
			go func() {
				time.Sleep(tc.stall)
				close(src.release)
			}()
			rc := httpbody.Idle(src, timer, d)
			buf := make([]byte, 8)
			var got []byte
			for {
				n, err := rc.Read(buf)
				got = append(got, buf[:n]...)
				if err != nil {
					break
				}
				time.Sleep(tc.between)
			}
			// A timer that was going to fire has done so long before this.
			time.Sleep(2 * d)
			if string(got) != "abc" {
				t.Fatalf("read %q", got)
			}
			if f := fired.Load() > 0; f != tc.fires {
				t.Fatalf("the timer fired %d times, want fired=%v", fired.Load(), tc.fires)
			}
		})
	}
}

// TestWatch: the middleware cancels a request whose server sends nothing
// (no headers, or a body that stops) for the idle timeout, lets a server
// that is slow but keeps sending finish, and bounds the body.
func TestWatch(t *testing.T) {
	t.Parallel()
	const d = 200 * time.Millisecond
	errStalled := errors.New("stalled")
	cases := []struct {
		name    string
		handle  func(w http.ResponseWriter, r *http.Request)
		limit   int64
		want    string // the body read; "" when the read must fail
		stalled bool
		tooBig  bool
	}{
		{
			name:    "no headers",
			handle:  func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
			limit:   -1,
			stalled: true,
		},
		{
			name: "body stops",
			handle: func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "{")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			},
			limit:   -1,
			stalled: true,
		},
		{
			name: "slow but alive",
			handle: func(w http.ResponseWriter, r *http.Request) {
				for range 12 { // three idle timeouts' worth
					_, _ = io.WriteString(w, "x")
					w.(http.Flusher).Flush()
					time.Sleep(d / 4)
				}
			},
			limit: -1,
			want:  strings.Repeat("x", 12),
		},
		{
			name:   "too large",
			handle: func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, strings.Repeat("z", 1000)) },
			limit:  999,
			tooBig: true,
		},
		{
			name:   "exactly the limit",
			handle: func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, strings.Repeat("z", 1000)) },
			limit:  1000,
			want:   strings.Repeat("z", 1000),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(tc.handle))
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithCancelCause(t.Context())
			defer cancel(nil)
			timer := time.AfterFunc(time.Hour, func() { cancel(errStalled) })
			timer.Stop()
			defer timer.Stop()
			mw := httpbody.Watch(timer, d, tc.limit)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			got, err := func() ([]byte, error) {
				res, err := mw(req, srv.Client().Do)
				if err != nil {
					return nil, err
				}
				defer func() { _ = res.Body.Close() }()
				return io.ReadAll(res.Body)
			}()
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("took %v", took)
			}
			switch {
			case tc.stalled:
				if err == nil || !errors.Is(context.Cause(ctx), errStalled) {
					t.Fatalf("read %q, error %v, cause %v; want the timer to cancel it", got, err, context.Cause(ctx))
				}
			case tc.tooBig:
				if !errors.Is(err, httpbody.ErrTooLarge) || int64(len(got)) != tc.limit {
					t.Fatalf("read %d bytes, error %v", len(got), err)
				}
			default:
				if err != nil || string(got) != tc.want || context.Cause(ctx) != nil {
					t.Fatalf("read %q, error %v, cause %v", got, err, context.Cause(ctx))
				}
			}
		})
	}
}

func TestTruncateErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		want   int // bytes read of a 1000-byte body
	}{
		{http.StatusOK, 1000},
		{http.StatusNoContent, 0},
		{http.StatusBadRequest, 100},
		{http.StatusInternalServerError, 100},
		{http.StatusFound, 100},
	}
	for _, tc := range cases {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			mw := httpbody.TruncateErrors(100)
			next := func(*http.Request) (*http.Response, error) {
				n := 1000
				if tc.status == http.StatusNoContent {
					n = 0
				}
				return &http.Response{StatusCode: tc.status, Body: io.NopCloser(strings.NewReader(strings.Repeat("e", n)))}, nil
			}
			res, err := mw(&http.Request{}, next)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(res.Body)
			if err != nil || len(got) != tc.want {
				t.Fatalf("read %d bytes, error %v; want %d", len(got), err, tc.want)
			}
		})
	}
	// A failed request passes through.
	boom := errors.New("boom")
	if res, err := httpbody.TruncateErrors(1)(&http.Request{}, func(*http.Request) (*http.Response, error) { return nil, boom }); res != nil || err != boom {
		t.Fatalf("res %v, err %v", res, err)
	}
}
