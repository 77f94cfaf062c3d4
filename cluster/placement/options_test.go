package placement_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/placement"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

func TestBadOptions(t *testing.T) {
	t.Parallel()
	js, err := jetstream.New(enginetest.Connect(t, enginetest.RunServer(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  placement.Option
	}{
		{"empty bucket", placement.WithBucket("")},
		{"bucket with dot", placement.WithBucket("a.b")},
		{"bucket with space", placement.WithBucket("a b")},
		{"zero replicas", placement.WithReplicas(0)},
		{"six replicas", placement.WithReplicas(6)},
		{"nil logger", placement.WithLogger(nil)},
		{"nil accepting", placement.WithAccepting(nil)},
		{"nil preferred", placement.WithPreferred(nil)},
		{"zero timeout", placement.WithActivationTimeout(0)},
		{"negative timeout", placement.WithActivationTimeout(-time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := placement.New(js, tc.opt); !errors.Is(err, engine.ErrInvalidOption) {
				t.Fatalf("New: %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := placement.New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	if _, err := placement.New(js, placement.WithDrainMessage(nil), placement.WithBucket("other-grains")); err != nil {
		t.Fatalf("nil drain message (= poison): %v", err)
	}
}
