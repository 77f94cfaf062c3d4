package engine

import (
	"context"
	"errors"
	"time"

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
	e.mu.Lock()
	s, ok := e.streams[cfg.Name]
	e.mu.Unlock()
	if ok {
		return s, nil
	}
	ctx, cancel := e.withDeadline(ctx)
	defer cancel()
	s, err := e.js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = e.js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = e.js.Stream(ctx, cfg.Name)
		}
	}
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "stream %s", cfg.Name)
	}
	e.mu.Lock()
	e.streams[cfg.Name] = s
	e.mu.Unlock()
	return s, nil
}

// EnsureKV opens the KV bucket cfg describes, creating it when missing.
func (e *Engine) EnsureKV(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	ctx, cancel := e.withDeadline(ctx)
	defer cancel()
	kv, err := e.js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if cfg.Replicas == 0 {
			cfg.Replicas = e.opts.replicas
		}
		kv, err = e.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			kv, err = e.js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "kv bucket %s", cfg.Bucket)
	}
	return kv, nil
}
