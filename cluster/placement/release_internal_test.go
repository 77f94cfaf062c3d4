package placement

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/enginetest"
)

// A grains bucket created without per-message TTLs (by hand, or by an
// older build) refuses the TTL of a release's purge marker: the release
// purges without it. It failed, and the claim stayed until a survivor
// took the key over.
func TestReleaseWithoutMessageTTL(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "grains-old", History: 1}); err != nil {
		t.Fatal(err)
	}
	l, err := New(js, WithBucket("grains-old"))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := l.kv.Create(ctx, "session.s1", []byte(`{"member":"m1"}`))
	if err != nil {
		t.Fatal(err)
	}
	l.release("session.s1", rev)
	if _, err := l.kv.Get(ctx, "session.s1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the claim after its release: %v", err)
	}
}
