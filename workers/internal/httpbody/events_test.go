package httpbody_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/iii-on-nats/iii/workers/internal/httpbody"
)

func TestEvents(t *testing.T) {
	t.Parallel()
	long := "data: " + strings.Repeat("x", 20) + "\n"
	for _, tc := range []struct {
		name    string
		body    string
		limit   int64
		tooLong bool
	}{
		{"events under the limit", "event: a\ndata: 1234\n\nevent: b\ndata: 5678\n\n", 20, false},
		{"exactly the limit", "data: 12345678901234\n\n", 20, false},
		{"one byte over", "data: 123456789012345\n\n", 20, true},
		{"many lines, one event", strings.Repeat(long, 10), 100, true},
		{"many lines, many events", strings.Repeat(long+"\n", 10), 100, false},
		{"CRLF events end", strings.Repeat("data: "+strings.Repeat("x", 20)+"\r\n\r\n", 10), 30, false},
		{"CRLF lines are not blank lines", strings.Repeat("data: "+strings.Repeat("x", 20)+"\r\n", 10), 100, true},
		{"CR line ends", strings.Repeat("data: "+strings.Repeat("x", 20)+"\r\r", 10), 30, false},
		{"comments count", strings.Repeat(": keep-alive\n", 20), 100, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []func(io.Reader) io.Reader{
				func(r io.Reader) io.Reader { return r },
				iotest.OneByteReader,
			} {
				b := httpbody.Events(io.NopCloser(r(strings.NewReader(tc.body))), tc.limit)
				got, err := io.ReadAll(b)
				var te *httpbody.EventTooLargeError
				switch {
				case tc.tooLong && (!errors.As(err, &te) || !errors.Is(err, httpbody.ErrTooLarge) || te.Limit != tc.limit):
					t.Fatalf("err = %v, want an event too large", err)
				case !tc.tooLong && (err != nil || string(got) != tc.body):
					t.Fatalf("read %d of %d bytes, %v", len(got), len(tc.body), err)
				}
				if tc.tooLong {
					if _, err := b.Read(make([]byte, 8)); !errors.Is(err, httpbody.ErrTooLarge) {
						t.Fatalf("a read after the error: %v", err)
					}
				}
			}
		})
	}
}

func FuzzEvents(f *testing.F) {
	f.Add("data: x\n\ndata: y\r\n\r\n", int64(4))
	f.Add(strings.Repeat("data: y\r", 40), int64(16))
	f.Fuzz(func(t *testing.T, body string, limit int64) {
		limit = max(limit%1024, 0)
		got, err := io.ReadAll(httpbody.Events(io.NopCloser(strings.NewReader(body)), limit))
		if err == nil && string(got) != body {
			t.Fatalf("a body read whole changed")
		}
		if err != nil && (!errors.Is(err, httpbody.ErrTooLarge) || !strings.HasPrefix(body, string(got))) {
			t.Fatalf("err %v after %d bytes", err, len(got))
		}
	})
}
