package workers_test

import (
	"context"
	"errors"
	"testing"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers"
)

type probe struct {
	log       *[]string
	name      string
	failStart bool
	failValid bool
}

var (
	_ workers.Provisioner = (*probe)(nil)
	_ workers.Validator   = (*probe)(nil)
	_ workers.Closer      = (*probe)(nil)
)

func (p *probe) Provision(_ context.Context, env workers.Env) error {
	*p.log = append(*p.log, p.name+".provision:"+env.Settings[p.name]["k"])
	return nil
}
func (p *probe) Validate() error {
	*p.log = append(*p.log, p.name+".validate")
	if p.failValid {
		return errors.New("bad config")
	}
	return nil
}
func (p *probe) Start(_ context.Context, e *engine.Engine) error {
	*p.log = append(*p.log, p.name+".start")
	if p.failStart {
		return errors.New("cannot start")
	}
	w, err := e.Worker(p.name)
	if err != nil {
		return err
	}
	return w.Register(engine.Function{ID: p.name + "::ping", Handler: func(context.Context, *engine.Request) (any, error) { return map[string]string{"pong": p.name}, nil }})
}
func (p *probe) Close(context.Context) error {
	*p.log = append(*p.log, p.name+".close")
	return nil
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	var log []string
	r := workers.NewRegistry()
	for _, name := range []string{"a", "b", "bad"} {
		name := name
		if err := r.Register(workers.Module{Name: name, New: func() workers.Worker {
			return &probe{log: &log, name: name, failStart: name == "bad"}
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Register(workers.Module{Name: "a", New: func() workers.Worker { return nil }}); !errors.Is(err, workers.ErrDuplicateModule) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := r.Register(workers.Module{Name: "a.b", New: func() workers.Worker { return nil }}); !errors.Is(err, workers.ErrInvalidModule) {
		t.Fatalf("bad name: %v", err)
	}
	env := workers.Env{Settings: map[string]map[string]string{"a": {"k": "v"}}}
	run, err := r.Start(context.Background(), e, env, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	var resp map[string]string
	if err := e.Trigger(context.Background(), "b::ping", nil, &resp); err != nil || resp["pong"] != "b" {
		t.Fatalf("b::ping = %v, %v", resp, err)
	}
	if err := run.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"a.provision:v", "a.validate", "a.start", "b.provision:", "b.validate", "b.start", "b.close", "a.close"}
	if len(log) != len(want) {
		t.Fatalf("log %v, want %v", log, want)
	}
	for i := range want {
		if log[i] != want[i] {
			t.Fatalf("log %v, want %v", log, want)
		}
	}
	log = nil
	if _, err := r.Start(context.Background(), e, env, "a", "bad"); err == nil {
		t.Fatal("a failing start must fail the node")
	}
	if log[len(log)-2] != "bad.close" || log[len(log)-1] != "a.close" {
		t.Fatalf("started workers not closed after failure: %v", log)
	}
	if _, err := r.Start(context.Background(), e, env, "nope"); !errors.Is(err, workers.ErrUnknownModule) {
		t.Fatalf("unknown: %v", err)
	}
}

func TestEndpointsLifecycle(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()
	var p workers.Endpoints
	builds := 0
	build := func() ([]engine.Function, error) {
		builds++
		return []engine.Function{{ID: "eps::ping", Handler: func(context.Context, *engine.Request) (any, error) { return "pong", nil }}}, nil
	}
	if err := p.Start(ctx, e, "eps", "test", build); err != nil {
		t.Fatal(err)
	}
	var out string
	if err := e.Trigger(ctx, "eps::ping", map[string]any{}, &out); err != nil || out != "pong" {
		t.Fatalf("ping = %q, %v", out, err)
	}
	if err := p.Start(ctx, e, "eps", "test", build); !errors.Is(err, workers.ErrStarted) || builds != 1 {
		t.Fatalf("second Start = %v (builds %d)", err, builds)
	}
	ran := 0
	if err := p.Close(ctx, func() { ran++ }); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx, func() { ran++ }); err != nil || ran != 1 {
		t.Fatalf("second Close = %v, before ran %d times", err, ran)
	}
	if err := p.Start(ctx, e, "eps", "test", build); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
	// A failed build or registration leaves nothing behind.
	var q workers.Endpoints
	if err := q.Start(ctx, e, "eps2", "test", func() ([]engine.Function, error) { return nil, errors.New("boom") }); err == nil {
		t.Fatal("a failed build started")
	}
	if err := q.Start(ctx, e, "eps2", "test", func() ([]engine.Function, error) {
		return []engine.Function{{ID: "bad id with spaces", Handler: func(context.Context, *engine.Request) (any, error) { return nil, nil }}}, nil
	}); err == nil {
		t.Fatal("a bad function registered")
	}
}

// closeCounter is a resource that counts its closes.
type closeCounter struct{ n *int }

func (c closeCounter) Close(context.Context) error { *c.n++; return nil }

func TestServedLifecycle(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()
	var s workers.Served[closeCounter]
	if _, ok := s.Resource(); ok {
		t.Fatal("a resource before Start")
	}
	closes := 0
	err := s.Start(ctx, e, "served", "test", func() (closeCounter, []engine.Function, error) {
		return closeCounter{&closes}, []engine.Function{{ID: "served::ping", Handler: func(context.Context, *engine.Request) (any, error) { return "pong", nil }}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Resource(); !ok {
		t.Fatal("no resource after Start")
	}
	if err := s.Close(ctx); err != nil || closes != 1 {
		t.Fatalf("Close = %v, %d closes", err, closes)
	}
	if err := s.Close(ctx); err != nil || closes != 1 {
		t.Fatalf("second Close = %v, %d closes", err, closes)
	}
	var failed workers.Served[closeCounter]
	if err := failed.Start(ctx, e, "served2", "test", func() (closeCounter, []engine.Function, error) {
		return closeCounter{}, nil, errors.New("boom")
	}); err == nil {
		t.Fatal("a failed open started")
	}
	if _, ok := failed.Resource(); ok {
		t.Fatal("a failed open left a resource")
	}
	// A resource whose functions do not register is closed again.
	var badFn workers.Served[closeCounter]
	closes = 0
	if err := badFn.Start(ctx, e, "served3", "test", func() (closeCounter, []engine.Function, error) {
		return closeCounter{&closes}, []engine.Function{{ID: "bad id", Handler: func(context.Context, *engine.Request) (any, error) { return nil, nil }}}, nil
	}); err == nil || closes != 1 {
		t.Fatalf("Start with a bad function = %v, %d closes", err, closes)
	}
	if _, ok := badFn.Resource(); ok {
		t.Fatal("a resource left after a failed registration")
	}
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	cause := errors.New("shutting down")
	s := workers.NewShutdown(cause)
	ctx, release := s.Bind(context.Background())
	released, releaseEarly := s.Bind(context.Background())
	releaseEarly()
	if context.Cause(released) != context.Canceled {
		t.Fatalf("a released context's cause is %v", context.Cause(released))
	}
	s.Close()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), cause) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
	release()
	// Bound after Close: ends at once.
	late, lateRelease := s.Bind(context.Background())
	defer lateRelease()
	<-late.Done()
	s.Close() // idempotent
	var none *workers.Shutdown
	none.Close()
}

// TestEnginePerModule: with env.Engine each module runs on the engine it
// gives; the modules still meet on the bus, and a module whose engine
// cannot be had fails the start and closes the ones started.
func TestEnginePerModule(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	shared := enginetest.NewEngine(t, ns)
	var log []string
	r := workers.NewRegistry()
	for _, name := range []string{"a", "b", "c"} {
		if err := r.Register(workers.Module{Name: name, New: func() workers.Worker { return &probe{log: &log, name: name} }}); err != nil {
			t.Fatal(err)
		}
	}
	given := map[string]*engine.Engine{}
	env := workers.Env{Engine: func(_ context.Context, module string) (*engine.Engine, error) {
		if module == "c" {
			return nil, errors.New("no connection")
		}
		e := enginetest.NewEngine(t, ns)
		given[module] = e
		return e, nil
	}}
	run, err := r.Start(context.Background(), shared, env, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if len(given) != 2 || given["a"] == given["b"] || given["a"] == shared {
		t.Fatalf("engines given: %v", given)
	}
	// b runs on its own engine; a caller on another one reaches it.
	var resp map[string]string
	if err := given["a"].Trigger(context.Background(), "b::ping", nil, &resp); err != nil || resp["pong"] != "b" {
		t.Fatalf("b::ping = %v, %v", resp, err)
	}
	if err := run.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	log = nil
	if _, err := r.Start(context.Background(), shared, env, "a", "c"); err == nil {
		t.Fatal("a module without an engine must fail the start")
	}
	if len(log) == 0 || log[len(log)-1] != "a.close" {
		t.Fatalf("started workers not closed after failure: %v", log)
	}
}
