package httpgw_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/httpgw"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestListRoutesPagesWithinMaxPayload: more routes than one answer holds
// (http::list_routes answered internal once they outgrew the max payload)
// are listed a page at a time, each within the max payload, every route
// once, in order; a bad cursor is invalid_payload.
func TestListRoutesPagesWithinMaxPayload(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, enginetest.WithMaxPayload(16<<10))
	ctx := context.Background()
	caller := enginetest.NewEngine(t, f.ns)
	const n = 60 // ~520 bytes each: about 30 fit an answer
	var want []string
	for i := range n {
		path := fmt.Sprintf("/%s/r%02d", strings.Repeat("p", 500), i)
		method := []string{"GET", "POST"}[i%2]
		if err := f.gw.AddRoute(ctx, httpgw.Route{Method: method, Path: path, FunctionID: "test::echo"}); err != nil {
			t.Fatal(err)
		}
		want = append(want, method+" "+path)
	}
	var got []string
	req, pages := `{}`, 0
	for {
		reply, err := caller.Conn().Request("iii.fn.http.list_routes", []byte(req), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if werr := wire.Decode(reply); werr != nil {
			t.Fatalf("page %d: %v", pages+1, werr)
		}
		if len(reply.Data) > int(caller.Conn().MaxPayload()) {
			t.Fatalf("answer of %d bytes exceeds the max payload", len(reply.Data))
		}
		var resp httpgw.ListRoutesResponse
		if err := json.Unmarshal(reply.Data, &resp); err != nil {
			t.Fatal(err)
		}
		pages++
		if len(resp.Routes) == 0 || pages > n {
			t.Fatalf("page %d: %d routes, truncated %v", pages, len(resp.Routes), resp.Truncated)
		}
		for _, r := range resp.Routes {
			got = append(got, r.Method+" "+r.Path)
		}
		if !resp.Truncated {
			break
		}
		last, _ := json.Marshal(resp.Routes[len(resp.Routes)-1])
		req = fmt.Sprintf(`{"after":%s}`, last)
	}
	if pages < 2 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%d pages, %d routes:\n%s", pages, len(got), strings.Join(got, "\n"))
	}
	for _, after := range []*httpgw.Route{{Method: "GET", Path: "no-slash"}, {Method: "", Path: "/x"}, {Method: "G ET", Path: "/x"}} {
		err := caller.Trigger(ctx, httpgw.FnListRoutes, httpgw.ListRoutesRequest{After: after}, nil)
		if !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("after %+v: %v, want invalid_payload", after, err)
		}
	}
	// A cursor past a route that is gone still moves on.
	resp := struct {
		Routes    []httpgw.Route `json:"routes"`
		Truncated bool           `json:"truncated"`
	}{}
	reply, err := caller.Conn().Request("iii.fn.http.list_routes",
		[]byte(`{"after":{"method":"PUT","path":"/`+strings.Repeat("p", 500)+`/r58"}}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil || len(resp.Routes) != 1 || resp.Routes[0].Method != "POST" || resp.Truncated {
		t.Fatalf("after a gone route: %s (%v)", reply.Data, err)
	}
}
