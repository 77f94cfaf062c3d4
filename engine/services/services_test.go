package services_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/services"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Start serves the engine's functions (the gateway's only when asked), the
// default queue runs what is enqueued on it, and Close stops them.
func TestStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    []services.Option
		gateway bool
		queue   bool
	}{
		{name: "default", queue: true},
		{name: "gateway", opts: []services.Option{services.WithGateway()}, gateway: true, queue: true},
		{name: "no queue", opts: []services.Option{services.WithDefaultQueue("")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			e := enginetest.NewEngine(t, ns)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ran := make(chan string, 1)
			w, err := e.Worker("services-test")
			if err != nil {
				t.Fatal(err)
			}
			type job struct {
				Tag string `json:"tag"`
			}
			if err := w.Register(engine.Function{ID: "services_test::job", Handler: engine.Typed(func(_ context.Context, j job) (struct{}, error) {
				ran <- j.Tag
				return struct{}{}, nil
			})}); err != nil {
				t.Fatal(err)
			}
			svc, err := services.Start(ctx, e, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Trigger(ctx, "state::set", map[string]any{"scope": "s", "key": "k", "value": 1}, nil); err != nil {
				t.Errorf("state::set: %v", err)
			}
			for _, id := range []string{"cron::list"} {
				if err := e.Trigger(ctx, id, map[string]any{}, nil); err != nil {
					t.Errorf("%s: %v", id, err)
				}
			}
			err = e.Trigger(ctx, "http::list_routes", map[string]any{}, nil)
			if tt.gateway != (err == nil) || tt.gateway != (svc.Gateway() != nil) {
				t.Errorf("gateway asked %v: http::list_routes %v, Gateway %v", tt.gateway, err, svc.Gateway())
			}
			if err := e.Trigger(ctx, "queue::enqueue", map[string]any{"queue": services.DefaultQueue, "function_id": "services_test::job", "data": map[string]any{"tag": "a"}}, nil); err != nil {
				t.Fatalf("queue::enqueue: %v", err)
			}
			select {
			case tag := <-ran:
				if !tt.queue || tag != "a" {
					t.Errorf("the default queue ran %q, want it consumed: %v", tag, tt.queue)
				}
			case <-time.After(2 * time.Second):
				if tt.queue {
					t.Error("the default queue's job did not run")
				}
			}
			if err := svc.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := svc.Close(ctx); err != nil {
				t.Errorf("a second Close: %v", err)
			}
			// Closed services answer nothing: no function of theirs is
			// served by a node whose scheduler, queue consumer and gateway
			// are gone.
			ids := []string{"state::get", "queue::enqueue", "topic::publish", "cron::list"}
			if tt.gateway {
				ids = append(ids, "http::list_routes")
			}
			for _, id := range ids {
				err := e.Trigger(ctx, id, map[string]any{}, nil)
				if !errors.Is(err, wire.ErrFunctionNotFound) {
					t.Errorf("%s after Close: %v, want function_not_found", id, err)
				}
			}
		})
	}
}

// A Start that fails partway stops serving the functions it had started.
func TestStartFailsPartway(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A foreign stream on the topics' subjects: III_TOPIC cannot be made,
	// after state::* and queue::* are served.
	if _, err := e.JetStream().CreateStream(ctx, jetstream.StreamConfig{Name: "FOREIGN", Subjects: []string{subjects.TopicSubjectPrefix + ">"}}); err != nil {
		t.Fatal(err)
	}
	svc, err := services.Start(ctx, e)
	if err == nil || svc != nil {
		t.Fatalf("Start with III_TOPIC's subjects taken = %v, %v", svc, err)
	}
	for _, id := range []string{"state::get", "queue::enqueue"} {
		err := e.Trigger(ctx, id, map[string]any{}, nil)
		if !errors.Is(err, wire.ErrFunctionNotFound) {
			t.Errorf("%s after the failed Start: %v, want function_not_found", id, err)
		}
	}
}

// Start on a server without JetStream fails saying why, and leaves
// nothing running.
func TestStartWithoutJetStream(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, func(o *server.Options) { o.JetStream = false })
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	svc, err := services.Start(ctx, e)
	if err == nil || svc != nil {
		t.Fatalf("Start without JetStream = %v, %v", svc, err)
	}
	t.Logf("Start: %v", err)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = e.Trigger(ctx, "state::get", map[string]any{"scope": "s", "key": "k"}, nil)
	if !errors.Is(err, wire.ErrFunctionNotFound) {
		t.Errorf("state::get after the failed Start: %v", err)
	}
}

// A job the default queue runs while the services close can still call
// every service: the consumer is drained (its running jobs finish) before
// topic::*, cron::* and http::* stop. Before, it started before them and
// so closed after them, and such a job got function_not_found.
func TestCloseDrainsTheQueueFirst(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := e.Worker("services-test")
	if err != nil {
		t.Fatal(err)
	}
	running, release, result := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	if err := w.Register(engine.Function{ID: "services_test::slow", Handler: engine.Typed(func(ctx context.Context, _ struct{}) (struct{}, error) {
		close(running)
		<-release
		result <- e.Trigger(ctx, "cron::list", map[string]any{}, nil)
		return struct{}{}, nil
	})}); err != nil {
		t.Fatal(err)
	}
	svc, err := services.Start(ctx, e, services.WithGateway())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Trigger(ctx, "queue::enqueue", map[string]any{"queue": services.DefaultQueue, "function_id": "services_test::slow", "data": map[string]any{}}, nil); err != nil {
		t.Fatalf("queue::enqueue: %v", err)
	}
	select {
	case <-running:
	case <-ctx.Done():
		t.Fatal("the job did not start")
	}
	closed := make(chan error, 1)
	go func() { closed <- svc.Close(ctx) }()
	// Give Close the time to stop what it stops before it waits on the
	// running job.
	time.Sleep(300 * time.Millisecond)
	close(release)
	select {
	case err := <-result:
		if err != nil {
			t.Errorf("a running job's cron::list during Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the job did not finish")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
