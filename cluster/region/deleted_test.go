package region_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/engine/enginetest"
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
	if _, err := region.Mirror(ctx, jsB, "B"); err != nil {
		t.Fatalf("mirror: %v", err)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		lag, err := region.Lag(ctx, jsB, "B")
		if l, ok := lag[region.MirrorName("KV_iii-keep", "B")]; err != nil || !ok || l > 0 {
			return fmt.Errorf("lag %v, %v", lag, err)
		}
		return nil
	})
	// Deleted on purpose after the mirror run.
	if err := jsA.DeleteKeyValue(ctx, "iii-gone"); err != nil {
		t.Fatal(err)
	}
	if err := jsA.DeleteStream(ctx, "III_GONE_Q"); err != nil {
		t.Fatal(err)
	}

	sc.servers["A"].Shutdown()
	enginetest.Eventually(t, 30*time.Second, func() error {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := region.Home(hctx, jsB, "KV_iii-keep")
		if errors.Is(err, region.ErrOffline) || errors.Is(err, region.ErrUnreachable) {
			return nil
		}
		return fmt.Errorf("home: %v", err)
	})
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
