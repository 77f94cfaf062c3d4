package topic

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// TestEnsureConsumerWaitsOutUnavailableJetStream: a subscription's
// consumer set up while JetStream does not answer (the hub serving it is
// down, so the leaf node the engine is on has nobody answering) is retried
// until JetStream is back, instead of failing on the first error; a bad
// configuration still fails at once.
func TestEnsureConsumerWaitsOutUnavailableJetStream(t *testing.T) {
	t.Parallel()
	ports := enginetest.FreePorts(t, 1)
	hubOpts := []enginetest.ServerOption{enginetest.WithStoreDir(t.TempDir()), func(o *server.Options) {
		o.LeafNode.Host, o.LeafNode.Port = "127.0.0.1", ports[0]
		o.JsAccDefaultDomain = map[string]string{"$G": ""} // JetStream API through the leaf node
	}}
	hub := enginetest.RunServer(t, hubOpts...)
	leaf := enginetest.RunServer(t, func(o *server.Options) {
		o.JetStream = false
		o.JsAccDefaultDomain = map[string]string{"$G": ""}
		o.LeafNode.ReconnectInterval = 50 * time.Millisecond
		o.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{{Scheme: "nats-leaf", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}}}}
	})
	enginetest.Eventually(t, 5*time.Second, func() error {
		if leaf.NumLeafNodes() != 1 {
			return fmt.Errorf("leaf not connected")
		}
		return nil
	})
	e := enginetest.NewEngine(t, leaf)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := e.EnsureStream(ctx, engine.TopicStreamConfig(e.Replicas())); err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       "topic-t~_f",
		FilterSubject: "iii.topic.t",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
	}
	bad := cfg
	bad.Durable, bad.DeliverPolicy = "topic-t~_bad", jetstream.DeliverByStartSequencePolicy // and no start sequence
	start := time.Now()
	if _, err := ensureConsumer(ctx, e.JetStream(), bad); err == nil || time.Since(start) > time.Second {
		t.Fatalf("bad config: %v after %v, want an error at once", err, time.Since(start))
	}

	restart := enginetest.StopServer(t, hub, hubOpts...)
	go func() {
		time.Sleep(time.Second)
		restart()
	}()
	cons, err := ensureConsumer(ctx, e.JetStream(), cfg)
	if err != nil {
		t.Fatalf("consumer set up while JetStream is away: %v", err)
	}
	if got := cons.CachedInfo().Stream; got != subjects.TopicStream {
		t.Fatalf("consumer on stream %q", got)
	}
}
