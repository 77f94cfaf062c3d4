package anthropic_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/anthropic"
)

// TestSilentAPI: the API may stay silent (thinking, or a slow first token)
// for up to the provider's idle timeout, however short the channel's idle
// timeout is on either side; beyond it the stream ends with the provider's
// own idle error, not a channel timeout.
func TestSilentAPI(t *testing.T) {
	const (
		chanIdle = time.Second     // the channel's, reader and writer
		apiIdle  = 3 * time.Second // the provider's
	)
	body := sse(t, "text")
	delta := strings.Index(body, "event: content_block_delta")
	// thinks writes the stream up to its first delta, then nothing for d,
	// then the rest.
	thinks := func(d time.Duration) func(w http.ResponseWriter, r *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			serveSSE(w, body[:delta])
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
			serveSSE(w, body[delta:])
		}
	}
	cases := []struct {
		name   string
		script []response
		// retries is the provider's max retries.
		retries int
		// stalled: the provider's idle timeout ends the stream.
		stalled bool
		// events is how many events precede the error of a stalled one.
		events int
	}{
		{name: "no headers for 2s", script: []response{{status: 200, body: body, delay: 2 * time.Second}}},
		{name: "thinking for 2s", script: []response{{status: 200, write: thinks(2 * time.Second)}}},
		{name: "no headers for 4s", script: []response{{status: 200, body: body, delay: 4 * time.Second}}, stalled: true},
		{name: "thinking for 4s", script: []response{{status: 200, write: thinks(4 * time.Second)}}, stalled: true, events: 3},
		// The retry after a stall is silence too, and still the
		// provider's.
		{name: "no headers for 4s, then retried", script: []response{{status: 200, body: body, delay: 4 * time.Second}, ok(body)}, retries: 1},
	}
	enginetest.BusAndLocal(t, func(t *testing.T, local bool) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				api := newFakeAPI(t, tc.script...)
				en := setup(t, api, config{local: local, opts: []anthropic.Option{
					anthropic.WithIdleTimeout(apiIdle),
					anthropic.WithMaxRetries(tc.retries),
					anthropic.WithChannelOptions(channel.WithIdleTimeout(chanIdle)),
				}})
				start := time.Now()
				res := en.stream(t, userReq("Hello"), nil, channel.WithIdleTimeout(chanIdle))
				took := time.Since(start)
				if res.err != nil || !errors.Is(res.end, channel.ErrEnd) {
					t.Fatalf("call err %v, stream end %v; want the stream's clean end", res.err, res.end)
				}
				if n := len(api.received()); n != tc.retries+1 {
					t.Fatalf("%d requests, want %d", n, tc.retries+1)
				}
				ev := last(res.Events)
				if !tc.stalled {
					if ev.Type != agent.ModelDone || res.Reply.StopReason != agent.StopEnd {
						t.Fatalf("last event %+v, reply %+v; want done and end", ev, res.Reply)
					}
					return
				}
				if len(res.Events) != tc.events+1 || ev.Type != agent.ModelError || ev.Kind != agent.ErrorTransient || !strings.Contains(ev.Error, "stalled") {
					t.Fatalf("events %v, last %+v; want %d events and the provider's idle error", types(res.Events), ev, tc.events)
				}
				if res.Reply.StopReason != agent.StopError || res.Reply.Kind != agent.ErrorTransient {
					t.Fatalf("reply %+v", res.Reply)
				}
				if took < apiIdle*9/10 {
					t.Fatalf("stalled after %v, before the provider's idle timeout %v", took, apiIdle)
				}
			})
		}
	})
}
