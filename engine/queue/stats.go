package queue

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Stats describes one queue as JetStream sees it.
type Stats struct {
	Queue string `json:"queue"`
	// Messages is how many messages the queue holds (waiting or in flight).
	Messages uint64 `json:"messages"`
	// Consumer reports whether the queue's durable consumer exists (someone
	// has called Consume); the next four fields are zero without it.
	Consumer bool `json:"consumer"`
	// Pending messages have not been delivered yet.
	Pending uint64 `json:"pending"`
	// AckPending messages are delivered and not yet acked (running, or
	// waiting for a retry).
	AckPending int `json:"ack_pending"`
	// Redelivered counts unacked messages delivered more than once.
	Redelivered int `json:"redelivered"`
	// Waiting counts the pull requests of idle consumers.
	Waiting int `json:"waiting"`
	// DeadLetters is how many dead letters of the queue are kept.
	DeadLetters uint64 `json:"dead_letters"`
}

// Inspect reads the stats of queue name from its stream, its consumer
// and its dead-letter subject.
func Inspect(ctx context.Context, e *engine.Engine, name string) (Stats, error) {
	subj, err := subjects.QueueSubject(name)
	if err != nil {
		return Stats{}, wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	dsubj, _ := subjects.DLQSubject(name)
	st := Stats{Queue: name}
	if st.Messages, err = subjectCount(ctx, e, engine.QueueStreamConfig(e.Replicas()), subj); err != nil {
		return Stats{}, err
	}
	if st.DeadLetters, err = subjectCount(ctx, e, engine.DLQStreamConfig(e.Replicas()), dsubj); err != nil {
		return Stats{}, err
	}
	cons, err := e.JetStream().Consumer(ctx, subjects.QueueStream, subjects.QueueConsumer(name))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return st, nil
	}
	if err != nil {
		return Stats{}, wire.Wrap(wire.CodeUnavailable, err, "consumer of queue %q", name)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return Stats{}, wire.Wrap(wire.CodeUnavailable, err, "consumer of queue %q", name)
	}
	st.Consumer = true
	st.Pending = ci.NumPending
	st.AckPending = ci.NumAckPending
	st.Redelivered = ci.NumRedelivered
	st.Waiting = ci.NumWaiting
	return st, nil
}

func subjectCount(ctx context.Context, e *engine.Engine, cfg jetstream.StreamConfig, subj string) (uint64, error) {
	s, err := e.EnsureStream(ctx, cfg)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, wire.Wrap(wire.CodeUnavailable, err, "stream %s", cfg.Name)
	}
	return info.State.Subjects[subj], nil
}
