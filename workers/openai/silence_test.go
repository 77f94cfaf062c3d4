package openai_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/openai"
)

// TestSilentServer: the server may stay silent (a reasoning model
// thinking, a big model's slow first token) for up to the provider's idle
// timeout, however short the channel's idle timeout is on either side;
// beyond it the stream ends with the provider's own idle error, not a
// channel timeout.
func TestSilentServer(t *testing.T) {
	const (
		chanIdle = time.Second     // the channel's, reader and writer
		apiIdle  = 3 * time.Second // the provider's
	)
	body := textBody(t)
	events := bytes.SplitAfter(body, []byte("\n\n"))
	// silent answers the first request after d without a byte, not even
	// the headers, when before; else it sends the headers and two chunks
	// (the role, then "Hello"), and nothing for d. Then the whole answer
	// (the rest of it). Later requests are answered at once.
	silent := func(d time.Duration, before bool) func(w http.ResponseWriter, r *http.Request, n int) {
		return func(w http.ResponseWriter, r *http.Request, n int) {
			if n > 0 {
				serveSSE(w, body, -1)
				return
			}
			if before {
				select {
				case <-time.After(d):
				case <-r.Context().Done():
					return
				}
				serveSSE(w, body, -1)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(bytes.Join(events[:2], nil))
			w.(http.Flusher).Flush()
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
			_, _ = w.Write(bytes.Join(events[2:], nil))
		}
	}
	cases := []struct {
		name   string
		handle func(w http.ResponseWriter, r *http.Request, n int)
		// retries is the provider's max retries.
		retries int
		// partial is the text streamed before the provider's idle error
		// ended the stream; "" when the call must succeed.
		partial string
	}{
		{name: "no headers for 2s", handle: silent(2*time.Second, true)},
		{name: "thinking for 2s", handle: silent(2*time.Second, false)},
		{name: "no headers for 4s", handle: silent(4*time.Second, true), partial: "-"},
		{name: "thinking for 4s", handle: silent(4*time.Second, false), partial: "Hello"},
		// The retry after a stall is silence too, and still the
		// provider's.
		{name: "no headers for 4s, then retried", handle: silent(4*time.Second, true), retries: 1},
	}
	enginetest.BusAndLocal(t, func(t *testing.T, local bool) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				ev := setup(t, tc.handle, config{local: local, opts: []openai.Option{
					openai.WithIdleTimeout(apiIdle),
					openai.WithMaxRetries(tc.retries),
					openai.WithCoalesce(0),
					openai.WithChannelOptions(channel.WithIdleTimeout(chanIdle)),
				}})
				start := time.Now()
				res := ev.streamWith(t, userReq("hi"), nil, channel.WithIdleTimeout(chanIdle))
				took := time.Since(start)
				if res.err != nil || !isEnd(res.end) {
					t.Fatalf("call err %v, stream end %v; want the stream's clean end", res.err, res.end)
				}
				if n := len(ev.api.requests()); n != tc.retries+1 {
					t.Fatalf("%d requests, want %d", n, tc.retries+1)
				}
				e := last(res.events)
				if tc.partial == "" {
					if e.Type != agent.ModelDone || e.Message == nil || e.Message.Content[0].Text != wantText {
						t.Fatalf("last event %+v; want done with the whole answer", e)
					}
					return
				}
				if e.Type != agent.ModelError || e.Kind != agent.ErrorTransient || !strings.Contains(e.Error, "stalled") {
					t.Fatalf("events %v, last %+v; want the provider's idle error", types(res.events), e)
				}
				if tc.partial != "-" && (e.Message == nil || len(e.Message.Content) != 1 || e.Message.Content[0].Text != tc.partial) {
					t.Fatalf("partial %+v, want %q", e.Message, tc.partial)
				}
				if res.resp.StopReason != agent.StopError || res.resp.Kind != agent.ErrorTransient {
					t.Fatalf("reply %+v", res.resp)
				}
				if took < apiIdle*9/10 {
					t.Fatalf("stalled after %v, before the provider's idle timeout %v", took, apiIdle)
				}
			})
		}
	})
}
