package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// QueueStreamConfig is the work-queue stream behind every durable queue.
func QueueStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        subjects.QueueStream,
		Description: "iii durable queues: one subject per queue, one consumer per queue",
		Subjects:    []string{subjects.QueueSubjectPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		Duplicates:  2 * time.Minute,
	}
}

// DLQStreamConfig keeps dead-lettered queue messages for 30 days.
func DLQStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        subjects.DLQStream,
		Description: "iii dead letters: queue messages that used up their deliveries",
		Subjects:    []string{subjects.DLQSubjectPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		MaxAge:      30 * 24 * time.Hour,
	}
}

// TopicStreamConfig is the stream behind durable topics; messages are kept
// until every subscribing function's consumer has them (interest retention).
func TopicStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        subjects.TopicStream,
		Description: "iii durable topics: one durable consumer per subscribing function",
		Subjects:    []string{subjects.TopicSubjectPrefix + ">"},
		Retention:   jetstream.InterestPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		MaxAge:      7 * 24 * time.Hour,
	}
}

// EnsureStream creates the stream cfg describes if it does not exist and
// returns it, caching the handle per process. An existing stream is used as
// it is (operators may have tuned it).
func (e *Engine) EnsureStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := cached(e, e.streams, cfg.Name, func() (s jetstream.Stream, err error) {
		err = ensure(ctx, e, func(ctx context.Context) error {
			s, err = e.js.Stream(ctx, cfg.Name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				s, err = e.js.CreateStream(ctx, cfg)
				if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
					s, err = e.js.Stream(ctx, cfg.Name)
				}
			}
			return err
		})
		return s, err
	})
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "stream %s", cfg.Name)
	}
	return s, nil
}

// ForgetStream drops the handle [Engine.EnsureStream] cached for stream
// name when err says the stream is not there — JetStream's "stream not
// found", or a publish that no stream answered — so that the next
// EnsureStream finds or creates it again: without this, a stream deleted
// under a running engine failed every call that ensured it until restart.
// It reports whether err said so. Callers pass the error of a call on the
// stream they ensured; a call that succeeds costs nothing more.
func (e *Engine) ForgetStream(name string, err error) bool {
	if !StreamMissing(err) {
		return false
	}
	e.mu.Lock()
	delete(e.streams, name)
	e.mu.Unlock()
	return true
}

// StreamMissing reports whether err says a stream does not exist: not
// found (404, 10059), or a publish to its subjects that no stream answered.
// A publish that nobody answered was stored nowhere, so it is safe to
// send again.
func StreamMissing(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// EnsureKV opens the KV bucket cfg describes, creating it when missing.
func (e *Engine) EnsureKV(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = e.opts.replicas
	}
	var kv jetstream.KeyValue
	err := ensure(ctx, e, func(ctx context.Context) error {
		var err error
		kv, err = e.js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = e.js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				kv, err = e.js.KeyValue(ctx, cfg.Bucket)
			}
			if err == nil {
				// In a cluster, a server that has not applied the new
				// stream's assignment yet answers "not found" for a
				// moment: return once the bucket answers.
				if _, serr := kv.Status(ctx); serr != nil {
					return fmt.Errorf("%w: %w", errNotYet, serr)
				}
			}
		}
		return err
	})
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "kv bucket %s", cfg.Bucket)
	}
	return kv, nil
}

// JetStream error codes nats.go has no names for: an R3 stream created
// while the third node is still joining (10005), a cluster without a meta
// leader for a moment (10008).
const (
	errCodeNoSuitablePeers     jetstream.ErrorCode = 10005
	errCodeClusterNotAvailable jetstream.ErrorCode = 10008
	// 10023 "insufficient resources": also what a consumer create gets
	// while its stream is still recovering on a node that just started.
	errCodeInsufficientResources jetstream.ErrorCode = 10023
)

// EnsureConsumer creates or updates the durable consumer cfg on stream,
// trying again (like EnsureStream) while the cluster is electing or the
// stream is still recovering after a node start. When stream is not there
// it forgets EnsureStream's handle of it ([Engine.ForgetStream]), so that
// ensuring the stream again creates it.
func (e *Engine) EnsureConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	var c jetstream.Consumer
	err := ensure(ctx, e, func(ctx context.Context) error {
		var err error
		c, err = e.js.CreateOrUpdateConsumer(ctx, stream, cfg)
		return err
	})
	e.ForgetStream(stream, err)
	return c, err
}

// errNotYet marks a stream that was just created but does not answer yet.
var errNotYet = errors.New("just created, not answering yet")

// ensureAttempt bounds one attempt to find or create a stream or bucket.
const ensureAttempt = 5 * time.Second

// ensure runs op (find or create an asset; safe to repeat) until it
// succeeds, fails for a reason a retry cannot fix, or ctx (the engine's
// call timeout without a deadline) ends. A clustered JetStream answers
// nothing while it elects the new stream's leader, and under load a create
// that several nodes send at once has been seen to hang for its whole
// timeout; the next attempt then finds the stream.
func ensure(ctx context.Context, e *Engine, op func(ctx context.Context) error) error {
	ctx, cancel := e.withDeadline(ctx)
	defer cancel()
	return Retry(ctx, ensureAttempt, op, TransientJS)
}

// TransientJS says whether a JetStream API error may go away by itself:
// no answer in time, nobody answering, or the cluster not ready (a
// cluster whose nodes all started at once elects its meta leader first).
// It is the retryable test [Retry] wants for setting up JetStream assets.
func TransientJS(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, errNotYet):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return true
	case errors.As(err, &apiErr):
		return apiErr.Code == 503 || apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled ||
			apiErr.ErrorCode == errCodeNoSuitablePeers || apiErr.ErrorCode == errCodeClusterNotAvailable ||
			apiErr.ErrorCode == errCodeInsufficientResources
	}
	return false
}
