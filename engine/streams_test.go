package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// TestEnsureStreamAfterDelete: a stream deleted under a running engine is
// created again by the next EnsureStream once a call on it said it is not
// there (a consumer create: stream not found; a publish: no stream
// answered); the cached handle kept failing them until restart.
func TestEnsureStreamAfterDelete(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// use is a call on the ensured stream; it must fail once the
		// stream is deleted, and tell the engine so.
		use func(ctx context.Context, e *engine.Engine) error
	}{
		{"consumer", func(ctx context.Context, e *engine.Engine) error {
			_, err := e.EnsureConsumer(ctx, subjects.QueueStream, jetstream.ConsumerConfig{
				Durable: "ensure-after-delete", AckPolicy: jetstream.AckExplicitPolicy,
			})
			return err
		}},
		{"publish", func(ctx context.Context, e *engine.Engine) error {
			_, err := e.JetStream().PublishMsg(ctx, &nats.Msg{Subject: subjects.QueueSubjectPrefix + "after-delete", Data: []byte("x")})
			e.ForgetStream(subjects.QueueStream, err)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := enginetest.Engine(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cfg := engine.QueueStreamConfig(1)
			if _, err := e.EnsureStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			if err := tc.use(ctx, e); err != nil {
				t.Fatal(err)
			}
			if err := e.JetStream().DeleteStream(ctx, cfg.Name); err != nil {
				t.Fatal(err)
			}
			err := tc.use(ctx, e)
			if !engine.StreamMissing(err) {
				t.Fatalf("call on a deleted stream: %v, want stream missing", err)
			}
			if _, err := e.EnsureStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			if err := tc.use(ctx, e); err != nil {
				t.Fatalf("call after EnsureStream: %v", err)
			}
		})
	}
}

func TestForgetStreamKeepsOnOtherErrors(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	for _, err := range []error{nil, context.DeadlineExceeded, nats.ErrTimeout, jetstream.ErrConsumerNotFound} {
		if e.ForgetStream(subjects.QueueStream, err) {
			t.Errorf("ForgetStream(%v) forgot the stream", err)
		}
	}
	for _, err := range []error{jetstream.ErrStreamNotFound, jetstream.ErrNoStreamResponse,
		&jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound}} {
		if !e.ForgetStream(subjects.QueueStream, err) {
			t.Errorf("ForgetStream(%v) kept the stream", err)
		}
	}
}

// TestEnqueueAfterStreamDeleted: an enqueue on a stream deleted under the
// engine creates it again and stores the message (nothing stored it the
// first time); it failed unavailable until restart.
func TestEnqueueAfterStreamDeleted(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.Enqueue(ctx, "q1", "t::job", map[string]any{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.JetStream().DeleteStream(ctx, subjects.QueueStream); err != nil {
		t.Fatal(err)
	}
	if err := e.Enqueue(ctx, "q1", "t::job", map[string]any{"n": 2}); err != nil {
		t.Fatalf("enqueue after the stream was deleted: %v", err)
	}
	s, err := e.JetStream().Stream(ctx, subjects.QueueStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("the stream created again holds %d messages, want 1", n)
	}
}
