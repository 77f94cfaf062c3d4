package region_test

import (
	"errors"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTakeoverKeepsDeletedOriginsDeleted: a bucket and a work queue of A,
// mirrored into B and then deleted on purpose while A was alive, are not
// brought back by a takeover of A; the bucket still there is.
func TestTakeoverKeepsDeletedOriginsDeleted(t *testing.T) {
	t.Parallel()
	sc := startSupercluster(t, 0, "A", "B", "W")
	sc.moveMetaLeader("B")
	ctx := ctxT(t, 50*time.Second)
	_, jsA := sc.js("A")
	_, jsB := sc.js("B")

	inA := &jetstream.Placement{Cluster: "A"}
	for _, b := range []string{"iii-keep", "iii-gone"} {
		kv, err := jsA.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, Placement: inA})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "k", []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := jsA.CreateStream(ctx, jetstream.StreamConfig{Name: "III_GONE_Q", Subjects: []string{"iii.goneq.>"},
		Retention: jetstream.WorkQueuePolicy, Placement: inA}); err != nil {
		t.Fatal(err)
	}
	mirrorCaughtUp(t, ctx, jsB, "B", "KV_iii-keep")
	// Deleted on purpose after the mirror run.
	if err := jsA.DeleteKeyValue(ctx, "iii-gone"); err != nil {
		t.Fatal(err)
	}
	if err := jsA.DeleteStream(ctx, "III_GONE_Q"); err != nil {
		t.Fatal(err)
	}

	sc.servers["A"].Shutdown()
	waitLost(t, ctx, jsB, "KV_iii-keep")
	rep, err := region.Takeover(ctx, jsB, "A", "B")
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	got := map[string]region.StreamReport{}
	for _, sr := range rep.Streams {
		got[sr.Stream] = sr
		t.Logf("  %-14s %-10s %s", sr.Stream, sr.Action, sr.Reason)
	}
	if sr := got["KV_iii-keep"]; sr.Action != region.ActionPromoted {
		t.Errorf("kept bucket: %+v", sr)
	}
	for _, name := range []string{"KV_iii-gone", "III_GONE_Q"} {
		if sr := got[name]; sr.Action != region.ActionSkipped {
			t.Errorf("%s: %+v, want skipped", name, sr)
		}
		if _, err := jsB.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("%s deleted on purpose is back after the takeover: %v", name, err)
		}
	}
	kv, err := jsB.KeyValue(ctx, "iii-keep")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "iii-keep" {
		t.Errorf("kept bucket after takeover: %v", err)
	}
}
