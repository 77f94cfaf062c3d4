package region_test

import (
	"errors"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNoWitnessNoTakeover shows why a deployment of two data regions needs
// a third (witness) cluster: the JetStream meta group spans every
// JetStream server of the supercluster, so with A and B alone, losing A
// loses the meta quorum and nothing can be created, promoted or deleted.
func TestNoWitnessNoTakeover(t *testing.T) {
	t.Parallel()
	sc := startSupercluster(t, 0, "A", "B")
	ctx := ctxT(t, 30*time.Second)
	_, jsA := sc.js("A")
	_, jsB := sc.js("B")
	if _, err := jsA.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.TurnStateBucket,
		Placement: &jetstream.Placement{Cluster: "A"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := region.Mirror(ctx, jsB, "B"); err != nil {
		t.Fatal(err)
	}
	sc.servers["A"].Shutdown()
	start := time.Now()
	rep, err := region.Takeover(ctxT(t, 4*time.Second), jsB, "A", "B")
	t.Logf("takeover without a witness after %v: %v (%+v)", time.Since(start), err, rep.Streams)
	if err == nil {
		t.Fatal("takeover without quorum succeeded")
	}
	if !errors.Is(err, region.ErrNoQuorum) {
		t.Errorf("want ErrNoQuorum, got %v", err)
	}
}
