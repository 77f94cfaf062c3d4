package anthropic_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/anthropic"
	"github.com/iii-on-nats/iii/workers/models"
)

// modelsPage is a page of GET /v1/models; more says whether another follows.
func modelsPage(id string, more bool) string {
	hasMore := "false"
	if more {
		hasMore = "true"
	}
	return `{"data":[{"type":"model","id":"` + id + `","display_name":"` + id + `","created_at":"2025-09-29T00:00:00Z"}],"has_more":` + hasMore + `,"first_id":"` + id + `","last_id":"` + id + `"}`
}

// TestModelsStalled: a server that accepts the models request and then
// sends nothing (no headers, or no byte of the body while the provider
// waits for one, on any page) fails the call after the idle timeout as a
// dropped connection does (unavailable, transient, retried), not at the
// function's timeout; a server that is slow but keeps sending is not
// silent.
func TestModelsStalled(t *testing.T) {
	t.Parallel()
	const idle = 2 * time.Second
	page := modelsPage("claude-sonnet-4-5", false)
	ctJSON := map[string]string{"Content-Type": "application/json"}
	// trickle writes the page's head, then a space every twentieth of the idle
	// timeout for two idle timeouts, then the rest.
	trickle := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, page[:9])
		w.(http.Flusher).Flush()
		for range 2 * 20 {
			select {
			case <-time.After(idle / 20):
			case <-r.Context().Done():
				return
			}
			_, _ = io.WriteString(w, " ")
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, page[9:])
	}
	cases := []struct {
		name     string
		script   []response
		retries  int
		want     []string // the models listed; nil when the call must fail
		requests int
	}{
		{name: "no headers", script: []response{{silent: true}}, requests: 1},
		{name: "stalled body", script: []response{{status: 200, body: `{"data":[`, hold: true}}, requests: 1},
		{name: "stalled second page", script: []response{ok(modelsPage("claude-opus-4-1", true)), {status: 200, body: `{"data":[`, hold: true}}, requests: 2},
		{name: "retried", script: []response{{silent: true}, ok(page)}, retries: 1, want: []string{"claude-sonnet-4-5"}, requests: 2},
		{name: "slow but alive", script: []response{{status: 200, header: ctJSON, write: trickle}}, want: []string{"claude-sonnet-4-5"}, requests: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tc.script...)
			en := setup(t, api, config{opts: []anthropic.Option{anthropic.WithIdleTimeout(idle), anthropic.WithMaxRetries(tc.retries)}})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			start := time.Now()
			got, err := engine.Call[anthropic.ModelsResponse](ctx, en.e, anthropic.ModelsFunction, struct{}{})
			if took := time.Since(start); took > 15*time.Second {
				t.Fatalf("the call took %v", took)
			}
			if n := len(api.received()); n != tc.requests {
				t.Fatalf("%d requests, want %d", n, tc.requests)
			}
			if tc.want == nil {
				var werr *wire.Error
				if !errors.Is(err, wire.ErrUnavailable) || !errors.As(err, &werr) || werr.Details["kind"] != string(agent.ErrorTransient) || !strings.Contains(werr.Message, "idle timeout") {
					t.Fatalf("error %v, want unavailable (transient) naming the idle timeout", err)
				}
				return
			}
			if err != nil || len(got.Models) != len(tc.want) || got.Models[0].ID != tc.want[0] {
				t.Fatalf("models %+v, error %v", got.Models, err)
			}
		})
	}
}

// TestModelsHugeBody: a server that answers GET /v1/models with an
// endless 200 body does not make the provider read (and allocate) it: past
// [anthropic.MaxModelsResponse] the call fails with a coded error naming
// the limit, not retried, and the connection is dropped.
func TestModelsHugeBody(t *testing.T) {
	// Not parallel: reading megabytes under the race detector takes the
	// CPU from the tests that time a server's silence.
	const size = 48 << 20
	var written atomic.Int64
	var once sync.Once
	done := make(chan struct{})
	huge := func(w http.ResponseWriter, _ *http.Request) {
		defer once.Do(func() { close(done) })
		_, _ = io.WriteString(w, `{"data":[{"type":"model","id":"`)
		chunk := []byte(strings.Repeat("x", 32<<10))
		for written.Load() < size {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}
	api := newFakeAPI(t, response{status: 200, header: map[string]string{"Content-Type": "application/json"}, write: huge})
	en := setup(t, api, config{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := engine.Call[anthropic.ModelsResponse](ctx, en.e, anthropic.ModelsFunction, struct{}{})
	var werr *wire.Error
	if !errors.Is(err, wire.ErrInternal) || !errors.As(err, &werr) || werr.Details["kind"] != string(agent.ErrorPermanent) || !strings.Contains(werr.Message, "8 MiB") {
		t.Fatalf("error %v, want internal (permanent) naming the 8 MiB limit", err)
	}
	if n := len(api.received()); n != 1 {
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

// TestModelsBound: a listing of [anthropic.MaxModels] models (the most
// models::reconcile takes, models.MaxProviderModels) is answered whole; a
// longer one fails as permanent, naming the bound, with no page fetched
// past it. Before, up to 10000 were fetched and a longer listing was cut
// silently, which reconcile refused all the same.
func TestModelsBound(t *testing.T) {
	t.Parallel()
	if anthropic.MaxModels != models.MaxProviderModels {
		t.Fatalf("MaxModels %d, models.MaxProviderModels %d", anthropic.MaxModels, models.MaxProviderModels)
	}
	const perPage = 1000
	for _, tc := range []struct {
		name     string
		total    int
		requests int
	}{
		{"at the bound", anthropic.MaxModels, 5},
		{"past it", 100000, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pages := func(w http.ResponseWriter, r *http.Request) {
				first := 0
				if after := r.URL.Query().Get("after_id"); after != "" {
					first, _ = strconv.Atoi(strings.TrimPrefix(after, "m-"))
					first++
				}
				last := min(first+perPage, tc.total) - 1
				var b strings.Builder
				b.WriteString(`{"data":[`)
				for i := first; i <= last; i++ {
					if i > first {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, `{"type":"model","id":"m-%d","display_name":"M %d","created_at":"2025-09-29T00:00:00Z"}`, i, i)
				}
				fmt.Fprintf(&b, `],"has_more":%t,"first_id":"m-%d","last_id":"m-%d"}`, last < tc.total-1, first, last)
				_, _ = io.WriteString(w, b.String())
			}
			api := newFakeAPI(t, response{status: 200, header: map[string]string{"Content-Type": "application/json"}, write: pages})
			en := setup(t, api, config{})
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			got, err := engine.Call[anthropic.ModelsResponse](ctx, en.e, anthropic.ModelsFunction, struct{}{})
			if n := len(api.received()); n != tc.requests {
				t.Fatalf("%d requests, want %d", n, tc.requests)
			}
			if tc.total <= anthropic.MaxModels {
				if err != nil || len(got.Models) != tc.total || got.Models[tc.total-1].ID != fmt.Sprintf("m-%d", tc.total-1) {
					t.Fatalf("%d models, error %v", len(got.Models), err)
				}
				return
			}
			var werr *wire.Error
			if !errors.Is(err, wire.ErrInternal) || !errors.As(err, &werr) || werr.Details["kind"] != string(agent.ErrorPermanent) || !strings.Contains(werr.Message, "4096") {
				t.Fatalf("%d models, error %v; want internal (permanent) naming the bound", len(got.Models), err)
			}
		})
	}
}
