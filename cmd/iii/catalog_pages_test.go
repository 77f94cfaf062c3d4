package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// iii functions and iii workers read every page of a catalog larger than
// the max payload; they printed the first page only.
func TestCatalogCommandsReadEveryPage(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(8<<10))
	e := enginetest.NewEngine(t, ns)
	if _, err := e.ServeCatalog(); err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *engine.Request) (any, error) { return engine.Empty{}, nil }
	for i := range 30 {
		w, err := e.Worker(fmt.Sprintf("page%02d", i))
		if err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			if err := w.Register(engine.Function{ID: fmt.Sprintf("test::page%02d::%s%d", i, strings.Repeat("f", 60), j), Description: "paged", Handler: noop}); err != nil {
				t.Fatal(err)
			}
		}
	}
	url := ns.ClientURL()
	out, err := runIII(t, "functions", "--nats", url)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		for j := range 3 {
			if id := fmt.Sprintf("test::page%02d::%s%d", i, strings.Repeat("f", 60), j); !strings.Contains(out, id) {
				t.Fatalf("iii functions lacks %s:\n%s", id, out)
			}
		}
	}
	out, err = runIII(t, "workers", "--nats", url)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if name := fmt.Sprintf("page%02d", i); !strings.Contains(out, name) {
			t.Fatalf("iii workers lacks %s:\n%s", name, out)
		}
	}
}
