package openai_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/openai"
)

// modelList is the body of a GET /models with one model.
const modelList = `{"object":"list","data":[{"id":"gpt-4o-mini","object":"model","created":1721172741,"owned_by":"system"}]}`

// serveModels answers with modelList.
func serveModels(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, modelList)
}

// TestModelsStalled: a server that accepts the models request and then
// sends nothing (no headers, or no byte of the body while the provider
// waits for one) fails the call after the idle timeout as a dropped
// connection does (unavailable, transient, retried), not at the
// function's timeout; a server that is slow but keeps sending is not
// silent.
func TestModelsStalled(t *testing.T) {
	t.Parallel()
	const idle = 2 * time.Second
	noHeaders := func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	stalledBody := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, modelList[:20])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	cases := []struct {
		name     string
		handle   func(w http.ResponseWriter, r *http.Request, n int)
		retries  int
		ok       bool // the call must list gpt-4o-mini
		requests int
	}{
		{name: "no headers", handle: func(w http.ResponseWriter, r *http.Request, _ int) { noHeaders(w, r) }, requests: 1},
		{name: "stalled body", handle: func(w http.ResponseWriter, r *http.Request, _ int) { stalledBody(w, r) }, requests: 1},
		{
			name: "retried",
			handle: func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 0 {
					stalledBody(w, r)
					return
				}
				serveModels(w)
			},
			retries: 1, ok: true, requests: 2,
		},
		{
			name: "slow but alive",
			handle: func(w http.ResponseWriter, r *http.Request, _ int) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, modelList[:9])
				w.(http.Flusher).Flush()
				for range 2 * 20 { // two idle timeouts' worth
					select {
					case <-time.After(idle / 20):
					case <-r.Context().Done():
						return
					}
					_, _ = io.WriteString(w, " ")
					w.(http.Flusher).Flush()
				}
				_, _ = io.WriteString(w, modelList[9:])
			},
			ok: true, requests: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := setup(t, tc.handle, config{opts: []openai.Option{openai.WithIdleTimeout(idle), openai.WithMaxRetries(tc.retries)}})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			start := time.Now()
			got, err := engine.Call[openai.ModelsResponse](ctx, ev.e, ev.p.ModelsFunction(), openai.ModelsRequest{})
			if took := time.Since(start); took > 15*time.Second {
				t.Fatalf("the call took %v", took)
			}
			if n := len(ev.api.requests()); n != tc.requests {
				t.Fatalf("%d requests, want %d", n, tc.requests)
			}
			if !tc.ok {
				var werr *wire.Error
				if !errors.Is(err, wire.ErrUnavailable) || !errors.As(err, &werr) || werr.Details["kind"] != string(agent.ErrorTransient) || !strings.Contains(werr.Message, "idle timeout") {
					t.Fatalf("error %v, want unavailable (transient) naming the idle timeout", err)
				}
				return
			}
			if err != nil || len(got.Models) != 1 || got.Models[0].ID != "gpt-4o-mini" {
				t.Fatalf("models %+v, error %v", got.Models, err)
			}
		})
	}
}

// TestModelsHugeBody: a server that answers GET /models with an endless
// 200 body does not make the provider read (and allocate) it: past
// [openai.MaxModelsResponse] the call fails with a coded error naming the
// limit, not retried, and the connection is dropped.
func TestModelsHugeBody(t *testing.T) {
	// Not parallel: reading megabytes under the race detector takes the
	// CPU from the tests that time a server's silence.
	const size = 48 << 20
	var written atomic.Int64
	var once sync.Once
	done := make(chan struct{})
	ev := setup(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		defer once.Do(func() { close(done) })
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"`)
		chunk := []byte(strings.Repeat("x", 32<<10))
		for written.Load() < size {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}, config{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := engine.Call[openai.ModelsResponse](ctx, ev.e, ev.p.ModelsFunction(), openai.ModelsRequest{})
	var werr *wire.Error
	if !errors.Is(err, wire.ErrInternal) || !errors.As(err, &werr) || werr.Details["kind"] != string(agent.ErrorPermanent) || !strings.Contains(werr.Message, "8 MiB") {
		t.Fatalf("error %v, want internal (permanent) naming the 8 MiB limit", err)
	}
	if n := len(ev.api.requests()); n != 1 {
		t.Fatalf("%d requests, want 1 (not retried)", n)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server is still writing the body")
	}
	if n := written.Load(); n >= 32<<20 {
		t.Fatalf("the server wrote %d MiB: the provider read past the limit", n>>20)
	}
}
