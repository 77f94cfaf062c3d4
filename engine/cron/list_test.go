package cron_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/cron"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// listRaw calls cron::list in JSON, as `nats req iii.fn.cron.list`, and
// checks the answer fits the max payload.
func listRaw(t *testing.T, e *engine.Engine, req string) cron.ListResponse {
	t.Helper()
	reply, err := e.Conn().Request("iii.fn.cron.list", []byte(req), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if werr := wire.Decode(reply); werr != nil {
		t.Fatalf("cron::list %s: %v", req, werr)
	}
	if n := int64(len(reply.Data)); n > e.Conn().MaxPayload() {
		t.Fatalf("answer of %d bytes exceeds the max payload %d", n, e.Conn().MaxPayload())
	}
	var resp cron.ListResponse
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		t.Fatalf("answer %.200s: %v", reply.Data, err)
	}
	return resp
}

// TestListPagesWithinMaxPayload: jobs whose data, together, outgrow the
// max payload are listed a page at a time (cron::list answered internal
// once about 16 jobs of 64 KiB were stored), each page within the max
// payload, every job once, its data whole.
func TestListPagesWithinMaxPayload(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ctx := context.Background()
	e := enginetest.NewEngine(t, ns)
	if _, err := cron.Serve(ctx, e, nil); err != nil {
		t.Fatal(err)
	}
	const n = 20
	data := strings.Repeat("x", cron.MaxDataBytes-100)
	for i := range n {
		if err := cron.Schedule(ctx, e, cron.Job{ID: fmt.Sprintf("job-%02d", i), Expression: "@daily", FunctionID: "test::x", Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	after, pages := "", 0
	for {
		resp := listRaw(t, e, fmt.Sprintf(`{"after":%q}`, after))
		pages++
		if len(resp.Jobs) == 0 {
			t.Fatalf("page %d is empty (truncated %v)", pages, resp.Truncated)
		}
		for _, j := range resp.Jobs {
			if j.Data != data || j.DataOmitted || j.Next == "" {
				t.Fatalf("job %s: %d bytes of data, omitted %v, next %q", j.ID, len(fmt.Sprint(j.Data)), j.DataOmitted, j.Next)
			}
			ids = append(ids, j.ID)
		}
		after = resp.Jobs[len(resp.Jobs)-1].ID
		if !resp.Truncated {
			break
		}
		if pages > n {
			t.Fatal("paging does not end")
		}
	}
	if pages < 2 || len(ids) != n {
		t.Fatalf("%d pages, ids %v", pages, ids)
	}
	for i, id := range ids {
		if want := fmt.Sprintf("job-%02d", i); id != want {
			t.Fatalf("ids %v: [%d] = %s, want %s", ids, i, id, want)
		}
	}
}

// TestListLimit: limit bounds a page, truncated says whether jobs follow,
// and a bad after or limit is invalid_payload.
func TestListLimit(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ctx := context.Background()
	e := enginetest.NewEngine(t, ns)
	if _, err := cron.Serve(ctx, e, nil); err != nil {
		t.Fatal(err)
	}
	if resp := listRaw(t, e, ``); resp.Jobs == nil || len(resp.Jobs) != 0 || resp.Truncated {
		t.Fatalf("empty list = %+v", resp)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if err := cron.Schedule(ctx, e, cron.Job{ID: id, Expression: "@hourly", FunctionID: "test::x"}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(r cron.ListResponse) string {
		var s []string
		for _, j := range r.Jobs {
			s = append(s, j.ID)
		}
		return fmt.Sprintf("%s truncated=%v", strings.Join(s, ","), r.Truncated)
	}
	for _, tt := range []struct{ req, want string }{
		{`{}`, "a,b,c,d truncated=false"},
		{`{"limit":2}`, "a,b truncated=true"},
		{`{"limit":2,"after":"b"}`, "c,d truncated=false"},
		{`{"limit":3,"after":"a"}`, "b,c,d truncated=false"},
		{`{"after":"bb"}`, "c,d truncated=false"},
		{`{"after":"d"}`, " truncated=false"},
		{`{"limit":1000}`, "a,b,c,d truncated=false"},
	} {
		if got := ids(listRaw(t, e, tt.req)); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.req, got, tt.want)
		}
	}
	for _, req := range []cron.ListRequest{{Limit: -1}, {Limit: cron.MaxListLimit + 1}, {After: "a.b"}, {After: "*"}, {After: strings.Repeat("x", 129)}} {
		if err := e.Trigger(ctx, cron.FnList, req, nil); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%+v: %v, want invalid_payload", req, err)
		}
	}
}

// TestListOmitsDataOfAJobTooLargeAlone: a job that does not fit the max
// payload with its data is listed without it, so the list answers; the
// jobs after it still fit; cron.List still reads it whole.
func TestListOmitsDataOfAJobTooLargeAlone(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(64<<10))
	ctx := context.Background()
	e := enginetest.NewEngine(t, ns)
	if _, err := cron.Serve(ctx, e, nil); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("y", 63<<10)
	for _, j := range []cron.Job{
		{ID: "a-big", Expression: "@daily", FunctionID: "test::x", Data: big},
		{ID: "b-small", Expression: "@daily", FunctionID: "test::x", Data: "small"},
	} {
		if err := cron.Schedule(ctx, e, j); err != nil {
			t.Fatal(err)
		}
	}
	resp := listRaw(t, e, `{}`)
	if len(resp.Jobs) != 2 || resp.Truncated {
		t.Fatalf("list = %+v", resp)
	}
	if j := resp.Jobs[0]; j.ID != "a-big" || !j.DataOmitted || j.Data != nil {
		t.Fatalf("big job %s: omitted %v, %d bytes of data", j.ID, j.DataOmitted, len(fmt.Sprint(j.Data)))
	}
	if j := resp.Jobs[1]; j.ID != "b-small" || j.DataOmitted || j.Data != "small" {
		t.Fatalf("small job = %+v", j)
	}
	jobs, err := cron.List(ctx, e)
	if err != nil || len(jobs) != 2 || jobs[0].Data != big {
		t.Fatalf("List: %d jobs, %v", len(jobs), err)
	}
}

// TestListDecodesInGo: a Go caller reads next and data_omitted in either
// codec (the embedded Job's JSON decoder dropped them).
func TestListDecodesInGo(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ctx := context.Background()
	srv := enginetest.NewEngine(t, ns)
	if _, err := cron.Serve(ctx, srv, nil); err != nil {
		t.Fatal(err)
	}
	if err := cron.Schedule(ctx, srv, cron.Job{ID: "j", Expression: "@daily", FunctionID: "test::x", Data: map[string]any{"n": 1}}); err != nil {
		t.Fatal(err)
	}
	for name, codec := range map[string]wire.Codec{"json": wire.JSON, "msgpack": wire.Msgpack} {
		t.Run(name, func(t *testing.T) {
			caller := enginetest.NewEngine(t, ns, engine.WithCodec(codec))
			resp, err := engine.Call[cron.ListResponse](ctx, caller, cron.FnList, cron.ListRequest{Limit: 1})
			if err != nil || len(resp.Jobs) != 1 {
				t.Fatalf("list = %+v, %v", resp, err)
			}
			j := resp.Jobs[0]
			if j.ID != "j" || j.FunctionID != "test::x" || j.Next == "" || fmt.Sprint(j.Data) != "map[n:1]" {
				t.Fatalf("job = %+v", j)
			}
		})
	}
}
