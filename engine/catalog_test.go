package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestDiscoverContext: a caller that gives up stops the discovery at once
// with its error, rather than waiting out the collection (up to 1.5 s
// with nobody on the bus) and getting a catalog as if it were complete; a
// context ended before the call discovers nothing and says so. A deadline
// during the collection ends it with what arrived (package doc).
func TestDiscoverContext(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	echoWorker(t, e, "echo", nil)

	t.Run("canceled during the collection", func(t *testing.T) {
		t.Parallel()
		qs := enginetest.RunServer(t)
		quiet := enginetest.NewEngine(t, qs)
		// A service that never answers: the collection waits for one.
		silent := enginetest.Connect(t, qs)
		if _, err := silent.Subscribe("$SRV.INFO", func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		if err := silent.Flush(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		_, err := quiet.FunctionsList(ctx)
		if !errors.Is(err, wire.ErrCanceled) {
			t.Fatalf("FunctionsList = %v, want canceled", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("FunctionsList returned %v after the cancel", d)
		}
	})
	t.Run("nobody on the bus", func(t *testing.T) {
		t.Parallel()
		empty := enginetest.NewEngine(t, enginetest.RunServer(t))
		fns, err := empty.FunctionsList(context.Background())
		if err != nil || len(fns) != 0 {
			t.Fatalf("FunctionsList = %+v, %v; want none, no error", fns, err)
		}
	})
	t.Run("ended before the call", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if fns, err := e.FunctionsList(ctx); !errors.Is(err, wire.ErrCanceled) {
			t.Fatalf("FunctionsList = %d functions, %v; want canceled", len(fns), err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), -time.Second)
		defer cancel()
		if ws, err := e.WorkersList(ctx); !errors.Is(err, wire.ErrTimeout) {
			t.Fatalf("WorkersList = %d workers, %v; want timeout", len(ws), err)
		}
	})
	t.Run("deadline during the collection", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		fns, err := e.FunctionsList(ctx)
		if err != nil || len(fns) != 1 || fns[0].ID != "test::echo" {
			t.Fatalf("FunctionsList = %+v, %v", fns, err)
		}
	})
}

// catalogPage calls the catalog function id with req in codec: the
// reply must fit maxPayload.
func catalogPage(t *testing.T, e *engine.Engine, id string, req, resp any, codec wire.Codec, maxPayload int) {
	t.Helper()
	body, err := codec.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, rc, err := e.TriggerRaw(context.Background(), id, body, codec)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if len(raw) > maxPayload {
		t.Fatalf("%s: answer of %d bytes, max payload %d", id, len(raw), maxPayload)
	}
	if err := rc.Unmarshal(raw, resp); err != nil {
		t.Fatal(err)
	}
}

// TestCatalogAnswersFitMaxPayload: with more workers and schemas than one
// max payload holds, engine::functions::list and engine::workers::list
// answer in pages that fit it, in either codec, where the whole list was
// refused as internal; paging with after lists every function and worker
// once. An entry too large alone comes without its details, so paging
// still moves on.
func TestCatalogAnswersFitMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 8 << 10
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(maxPayload))
	e := enginetest.NewEngine(t, ns)
	if _, err := e.ServeCatalog(); err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *engine.Request) (any, error) { return engine.Empty{}, nil }
	schema := `{"type":"object","description":"` + strings.Repeat("s", 500) + `"}`
	for i := range 20 {
		w, err := e.Worker(fmt.Sprintf("fit%02d", i))
		if err != nil {
			t.Fatal(err)
		}
		for j := range 4 {
			id := fmt.Sprintf("test::fit%02d::%s%d", i, strings.Repeat("f", 90), j)
			if err := w.Register(engine.Function{ID: id, Description: "fits", RequestSchema: schema, Handler: noop}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Its $SRV.INFO reply fits the max payload; its entry, with the
	// headroom of an answer, does not.
	bigSchema := `{"description":"` + strings.Repeat("x", 7200) + `"}`
	big, err := e.Worker("big")
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Register(engine.Function{ID: "test::big", Description: "big", RequestSchema: bigSchema, Handler: noop}); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	wantFns, err := e.FunctionsList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(wantFns) != 20*4+3 {
		t.Fatalf("FunctionsList: %d functions, want %d", len(wantFns), 20*4+3)
	}
	wantWs, err := e.WorkersList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []wire.Codec{wire.JSON, wire.Msgpack} {
		t.Run(c.ContentType(), func(t *testing.T) {
			t.Parallel()
			t.Run("functions", func(t *testing.T) {
				t.Parallel()
				var got []engine.FunctionInfo
				req := engine.FunctionsListRequest{}
				for pages := 1; ; pages++ {
					var page engine.FunctionsListResponse
					catalogPage(t, e, "engine::functions::list", req, &page, c, maxPayload)
					if page.Incomplete || len(page.Functions) == 0 {
						t.Fatalf("page %d: incomplete %v, %d functions", pages, page.Incomplete, len(page.Functions))
					}
					got = append(got, page.Functions...)
					if !page.Truncated {
						if pages < 3 {
							t.Fatalf("%d pages, want several", pages)
						}
						break
					}
					req.After = page.Functions[len(page.Functions)-1].ID
				}
				if len(got) != len(wantFns) {
					t.Fatalf("%d functions listed, want %d", len(got), len(wantFns))
				}
				for i, fi := range got {
					want := wantFns[i]
					if fi.ID == "test::big" {
						if !fi.DetailsOmitted || fi.RequestSchema != nil || fi.Description != "" || fi.Worker != "big" {
							t.Fatalf("big entry = %+v, want it without details", fi)
						}
						continue
					}
					if fi.ID != want.ID || fi.Worker != want.Worker || fi.Description != want.Description ||
						string(fi.RequestSchema) != string(want.RequestSchema) || fi.DetailsOmitted {
						t.Fatalf("entry %d = %+v, want %+v", i, fi, want)
					}
				}
			})
			t.Run("workers", func(t *testing.T) {
				t.Parallel()
				var got []engine.WorkerInfo
				req := engine.WorkersListRequest{}
				for pages := 1; ; pages++ {
					var page engine.WorkersListResponse
					catalogPage(t, e, "engine::workers::list", req, &page, c, maxPayload)
					if page.Incomplete || len(page.Workers) == 0 {
						t.Fatalf("page %d: incomplete %v, %d workers", pages, page.Incomplete, len(page.Workers))
					}
					got = append(got, page.Workers...)
					if !page.Truncated {
						if pages < 2 {
							t.Fatalf("%d pages, want several", pages)
						}
						break
					}
					last := page.Workers[len(page.Workers)-1]
					req.After = last.Name + "/" + last.ID
				}
				if len(got) != len(wantWs) {
					t.Fatalf("%d workers listed, want %d", len(got), len(wantWs))
				}
				for i, wi := range got {
					if want := wantWs[i]; wi.Name != want.Name || wi.ID != want.ID || !slices.Equal(wi.Functions, want.Functions) || wi.FunctionsOmitted {
						t.Fatalf("worker %d = %+v, want %+v", i, wi, want)
					}
				}
			})
		})
	}
}

// TestDiscoverDropsSayIncomplete: $SRV.INFO replies the client drops
// (its pending limit reached) are counted and logged, and the catalog
// answers say incomplete; before, they went missing unsaid, or a drop
// the collection noticed failed the whole discovery. Not parallel: the
// limit is the package's.
func TestDiscoverDropsSayIncomplete(t *testing.T) {
	// Registered first, so it runs after the engines closed: no handler
	// reads the limit any more.
	t.Cleanup(engine.SetDiscoverPendingBytes(1)) // every reply is over it
	ns := enginetest.RunServer(t)
	var logs enginetest.Buffer
	e := enginetest.NewEngine(t, ns, engine.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if _, err := e.ServeCatalog(); err != nil {
		t.Fatal(err)
	}
	echoWorker(t, e, "echo", nil)
	caller := enginetest.NewEngine(t, ns)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wsc := make(chan error, 1)
	var ws engine.WorkersListResponse
	go func() { wsc <- caller.Trigger(ctx, "engine::workers::list", nil, &ws) }()
	var fns engine.FunctionsListResponse
	if err := caller.Trigger(ctx, "engine::functions::list", nil, &fns); err != nil {
		t.Fatal(err)
	}
	if err := <-wsc; err != nil {
		t.Fatal(err)
	}
	if !fns.Incomplete || !ws.Incomplete {
		t.Fatalf("functions incomplete %v (%d listed), workers incomplete %v (%d listed); want both incomplete",
			fns.Incomplete, len(fns.Functions), ws.Incomplete, len(ws.Workers))
	}
	if !strings.Contains(logs.String(), "catalog discovery dropped service info replies") {
		t.Fatalf("no warning logged: %s", logs.String())
	}
}
