package topic_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/topic"
	"github.com/iii-on-nats/iii/engine/wire"
)

func TestServePublish(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	if _, err := topic.Serve(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	r.serve(t, e, "news::read", nil)
	subscribe(t, e, "news", "news::read", fast()...)

	// JSON, as `nats req iii.fn.topic.publish` sends it.
	nc := enginetest.Connect(t, ns)
	m, err := nc.Request("iii.fn.topic.publish", []byte(`{"topic":"news","data":{"n":0}}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var resp topic.PublishResponse
	if werr := wire.Decode(m); werr != nil || json.Unmarshal(m.Data, &resp) != nil || resp.Topic != "news" || resp.Sequence == 0 {
		t.Fatalf("publish reply %s, %v", m.Data, werr)
	}
	// msgpack, through the engine.
	got, err := engine.Call[topic.PublishResponse](context.Background(), e, topic.FnPublish, map[string]any{"topic": "news", "data": event{N: 1}})
	if err != nil || got.Sequence <= resp.Sequence {
		t.Fatalf("publish = %+v, %v", got, err)
	}
	enginetest.Eventually(t, 5*time.Second, r.exactly("news::read", 2))

	// A retried publish with a dedup_id (its answer was lost) is stored
	// once and answers the first one's sequence; the same id on another
	// topic is another message.
	first, err := engine.Call[topic.PublishResponse](context.Background(), e, topic.FnPublish, map[string]any{"topic": "news", "data": event{N: 2}, "dedup_id": "order-42"})
	if err != nil || first.Duplicate {
		t.Fatalf("publish with a dedup id = %+v, %v", first, err)
	}
	again, err := engine.Call[topic.PublishResponse](context.Background(), e, topic.FnPublish, map[string]any{"topic": "news", "data": event{N: 2}, "dedup_id": "order-42"})
	if err != nil || !again.Duplicate || again.Sequence != first.Sequence {
		t.Fatalf("retried publish = %+v, %v (first %+v)", again, err, first)
	}
	other, err := engine.Call[topic.PublishResponse](context.Background(), e, topic.FnPublish, map[string]any{"topic": "sports", "data": event{N: 2}, "dedup_id": "order-42"})
	if err != nil || other.Duplicate {
		t.Fatalf("the same id on another topic = %+v, %v", other, err)
	}
	enginetest.Eventually(t, 5*time.Second, r.exactly("news::read", 3))
	// Topic names and ids both may hold '-': topic "a-b" with id "c" and
	// topic "a" with id "b-c" are two messages.
	for _, p := range []map[string]any{{"topic": "a-b", "dedup_id": "c"}, {"topic": "a", "dedup_id": "b-c"}} {
		got, err := engine.Call[topic.PublishResponse](context.Background(), e, topic.FnPublish, p)
		if err != nil || got.Duplicate {
			t.Fatalf("publish %v = %+v, %v: taken for another topic's", p, got, err)
		}
	}

	for _, bad := range []any{
		map[string]any{"topic": "a.b"}, map[string]any{"topic": "*"}, map[string]any{"topic": ">"},
		map[string]any{"topic": "a b"}, map[string]any{"topic": ""}, map[string]any{"topic": strings.Repeat("x", 200)},
		map[string]any{"topic": 3}, []string{"news"},
		map[string]any{"topic": "news", "dedup_id": "a b"}, map[string]any{"topic": "news", "dedup_id": strings.Repeat("d", 300)},
	} {
		if err := e.Trigger(context.Background(), topic.FnPublish, bad, nil); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("publish %v: %v", bad, err)
		}
	}
	m, err = nc.Request("iii.fn.topic.publish", []byte("\xff{"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if werr := wire.Decode(m); !errors.Is(werr, wire.ErrInvalidPayload) {
		t.Fatalf("garbage: %v", werr)
	}
}
