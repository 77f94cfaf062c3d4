package region_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTakeoverReplacesRebornRewrittenStreams: a live client in the new
// home creates a lost origin's name again while the takeover runs (as a
// member's membership heartbeat does the moment the origin is deleted).
// A stream whose clients write it again ([region.MetaRewritten]) is
// replaced by the copy, whether it appears between the origin's delete and
// the copy's creation or before a run; any other is kept, and its stream
// fails saying what to do.
func TestTakeoverReplacesRebornRewrittenStreams(t *testing.T) {
	t.Parallel()
	sc := startSupercluster(t, 0, "A", "B", "W")
	sc.moveMetaLeader("B")
	ctx := ctxT(t, 50*time.Second)
	_, jsA := sc.js("A")
	_, jsB := sc.js("B")

	inA := &jetstream.Placement{Cluster: "A"}
	buckets := []string{"iii-beats", "iii-beats-early", "iii-data"}
	for _, b := range buckets {
		kv, err := jsA.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, Placement: inA})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "k", []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	mirrorCaughtUp(t, ctx, jsB, "B", "KV_iii-beats", "KV_iii-beats-early", "KV_iii-data")
	sc.servers["A"].Shutdown()
	waitLost(t, ctx, jsB, "KV_iii-beats")

	reborn := func(bucket string, marked bool) error {
		cfg := jetstream.KeyValueConfig{Bucket: bucket, Placement: &jetstream.Placement{Cluster: "B"}}
		if marked {
			cfg.Metadata = map[string]string{region.MetaRewritten: "test"}
		}
		kv, err := jsB.CreateKeyValue(ctx, cfg)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, "fresh", []byte("written during the takeover"))
		return err
	}
	// Before the run: an earlier run deleted the lost origin, and a live
	// client created it again.
	enginetest.Eventually(t, 20*time.Second, func() error {
		err := jsB.DeleteStream(ctx, "KV_iii-beats-early")
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		return err
	})
	if err := reborn("iii-beats-early", true); err != nil {
		t.Fatal(err)
	}
	// During the run: right after the takeover deleted the lost origin.
	hookErrs := make(chan error, len(buckets))
	after := region.WithAfterOriginDeleted(func(stream string) {
		switch stream {
		case "KV_iii-beats":
			hookErrs <- reborn("iii-beats", true)
		case "KV_iii-data":
			hookErrs <- reborn("iii-data", false)
		}
	})
	rep, err := region.Takeover(ctx, jsB, "A", "B", after)
	close(hookErrs)
	for err := range hookErrs {
		if err != nil {
			t.Fatalf("re-creating an origin: %v", err)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "stop the clients that write it") {
		t.Errorf("takeover: %v, want the reborn iii-data refused", err)
	}
	got := map[string]region.StreamReport{}
	for _, sr := range rep.Streams {
		got[sr.Stream] = sr
		t.Logf("  %-20s %-10s %s", sr.Stream, sr.Action, sr.Reason)
	}
	for _, b := range []string{"iii-beats", "iii-beats-early"} {
		if sr := got["KV_"+b]; sr.Action != region.ActionPromoted {
			t.Errorf("%s: %+v, want promoted", b, sr)
		}
		kv, err := jsB.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != b {
			t.Errorf("%s: the copy's entry after the takeover: %v", b, err)
		}
		if h, err := region.Home(ctx, jsB, "KV_"+b); err != nil || h != "B" {
			t.Errorf("%s home = %q, %v", b, h, err)
		}
	}
	if sr := got["KV_iii-data"]; sr.Action != region.ActionFailed {
		t.Errorf("iii-data: %+v, want failed", sr)
	}
	// The refused one keeps what its client wrote.
	kv, err := jsB.KeyValue(ctx, "iii-data")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "fresh"); err != nil {
		t.Errorf("iii-data lost a write acknowledged during the takeover: %v", err)
	}
}
