package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// TestListOutgrowsOneMessage: a catalog whose list is larger than the
// server's max payload is served in pages (truncated, then after), in
// both codecs, instead of failing as a whole.
func TestListOutgrowsOneMessage(t *testing.T) {
	t.Parallel()
	const n = 400
	catalog := make([]agent.Model, n)
	for i := range catalog {
		id := fmt.Sprintf("m-%03d/%s", i, strings.Repeat("x", 100))
		catalog[i] = agent.Model{
			Provider: []string{"p1", "p2"}[i%2], ID: id, DisplayName: strings.Repeat("D", 200),
			ContextWindow: 1000, MaxOutputTokens: 100, Pricing: agent.Pricing{InputPer1M: 1.25, OutputPer1M: 10},
		}
	}
	var want []string // cursors, sorted by provider then id
	for _, p := range []string{"p1", "p2"} {
		for _, m := range catalog {
			if m.Provider == p {
				want = append(want, p+"/"+m.ID)
			}
		}
	}
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(32<<10))
	e := enginetest.NewEngine(t, ns)
	w := NewWorker(WithCatalog(catalog))
	if err := w.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	ctx := ctxT(t)

	t.Run("msgpack", func(t *testing.T) {
		var got []string
		req := ListRequest{}
		for pages := 1; ; pages++ {
			resp, err := engine.Call[ListResponse](ctx, e, ListFunction, req)
			if err != nil {
				t.Fatalf("page %d: %v", pages, err)
			}
			for _, m := range resp.Models {
				got = append(got, ListCursor(m))
			}
			if !resp.Truncated {
				if pages < 3 {
					t.Errorf("%d pages, want the list cut by the max payload", pages)
				}
				break
			}
			if len(resp.Models) == 0 || pages > n {
				t.Fatalf("page %d: truncated with %d models", pages, len(resp.Models))
			}
			req.After = ListCursor(resp.Models[len(resp.Models)-1])
		}
		if !slices.Equal(got, want) {
			t.Fatalf("paged %d models, want %d in order", len(got), len(want))
		}
	})
	t.Run("json", func(t *testing.T) {
		nc := enginetest.Connect(t, ns)
		var got []string
		after := ""
		for pages := 1; ; pages++ {
			body, _ := json.Marshal(ListRequest{Provider: "p2", After: after})
			msg, err := nc.Request(subjects.MustFunctionSubject(ListFunction), body, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
				t.Fatalf("page %d: error %s: %s", pages, code, msg.Data)
			}
			var resp ListResponse
			if err := json.Unmarshal(msg.Data, &resp); err != nil {
				t.Fatal(err)
			}
			for _, m := range resp.Models {
				got = append(got, ListCursor(m))
			}
			if !resp.Truncated {
				break
			}
			if len(resp.Models) == 0 || pages > n {
				t.Fatalf("page %d: truncated with %d models", pages, len(resp.Models))
			}
			after = ListCursor(resp.Models[len(resp.Models)-1])
		}
		if !slices.Equal(got, want[n/2:]) {
			t.Fatalf("paged %d p2 models, want %d in order", len(got), n/2)
		}
	})
	t.Run("bad cursor", func(t *testing.T) {
		for _, after := range []string{"p1", "/m", "p.1/m", "p1/", "p1/a b"} {
			if _, err := engine.Call[ListResponse](ctx, e, ListFunction, ListRequest{After: after}); !errors.Is(err, wire.ErrInvalidPayload) {
				t.Errorf("after %q: err = %v, want invalid_payload", after, err)
			}
		}
		resp, err := engine.Call[ListResponse](ctx, e, ListFunction, ListRequest{After: "zz/z"})
		if err != nil || len(resp.Models) != 0 || resp.Truncated || resp.Models == nil {
			t.Errorf("after the last model: %+v, %v", resp, err)
		}
	})
}
