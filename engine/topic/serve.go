package topic

import (
	"context"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/queue"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// WorkerName is the name of the worker [Serve] starts.
const WorkerName = "topic"

// FnPublish is the function id [Serve] registers.
const FnPublish = "topic::publish"

// PublishRequest is the payload of topic::publish.
type PublishRequest struct {
	Topic string `json:"topic"`
	// Data is any JSON or msgpack value; it is re-encoded in the engine's
	// codec (a missing or null value is the empty object).
	Data queue.Payload `json:"data"`
	// DedupID, when set, makes a publish with the same id on the same
	// topic within the stream's duplicate window (2 minutes) a no-op that
	// answers the first one's sequence: a caller retrying after a timeout
	// or unavailable publishes once.
	DedupID string `json:"dedup_id,omitempty"`
}

// Validate checks the topic name and the dedup id.
func (r PublishRequest) Validate() error {
	if err := subjects.ValidateID("topic", r.Topic); err != nil {
		return err
	}
	return queue.ValidateDedupID(r.DedupID)
}

// PublishResponse is the reply of topic::publish.
type PublishResponse struct {
	Topic string `json:"topic"`
	// Sequence is the message's sequence in stream III_TOPIC.
	Sequence uint64 `json:"sequence"`
	// Duplicate: a publish with the same dedup_id was stored before;
	// Sequence is that one's.
	Duplicate bool `json:"duplicate,omitempty"`
}

const (
	publishSchema = `{"type":"object","required":["topic"],"properties":{` +
		`"topic":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,128}$"},"data":{},"dedup_id":{"type":"string","maxLength":256}}}`
	publishRespSchema = `{"type":"object","properties":{"topic":{"type":"string"},"sequence":{"type":"integer"},"duplicate":{"type":"boolean"}}}`
)

// Serve starts worker "topic" with
//
//	topic::publish {topic, data, dedup_id?} → {topic, sequence, duplicate?}
//
// which publishes data on the durable topic (see [Publish]). ctx bounds
// the stream setup.
func Serve(ctx context.Context, e *engine.Engine) (*engine.Worker, error) {
	if _, err := e.EnsureStream(ctx, engine.TopicStreamConfig(e.Replicas())); err != nil {
		return nil, err
	}
	w, err := e.Worker(WorkerName, engine.WithDescription("durable topics: publish to every subscribing function"))
	if err != nil {
		return nil, err
	}
	err = w.Register(engine.Function{
		ID:             FnPublish,
		Description:    "Publish data on a durable topic; every subscribing function gets it once",
		RequestSchema:  publishSchema,
		ResponseSchema: publishRespSchema,
		Handler: engine.Typed(func(ctx context.Context, r PublishRequest) (PublishResponse, error) {
			body, err := r.Data.Encode(e.Codec())
			if err != nil {
				return PublishResponse{}, wire.Wrap(wire.CodeInvalidPayload, err, "data")
			}
			ack, err := publish(ctx, e, r.Topic, body, e.Codec(), r.DedupID)
			if err != nil {
				return PublishResponse{}, err
			}
			return PublishResponse{Topic: r.Topic, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
		}),
	})
	if err != nil {
		_ = w.Close(ctx)
		return nil, err
	}
	return w, nil
}
