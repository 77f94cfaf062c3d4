package region_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMirrorFollowsANewIncarnation: an origin deleted and created again
// under its name (its sequences start over) gets a new mirror at the next
// Mirror run, holding the new incarnation only. The old mirror went on
// from its own last sequence: it kept the old incarnation's messages and
// missed the new one's first ones, and a takeover brought back that mix.
func TestMirrorFollowsANewIncarnation(t *testing.T) {
	t.Parallel()
	sc := startSupercluster(t, 0, "A", "B", "W")
	sc.moveMetaLeader("B")
	ctx := ctxT(t, 50*time.Second)
	_, jsA := sc.js("A")
	_, jsB := sc.js("B")
	inA := &jetstream.Placement{Cluster: "A"}
	fill := func(values ...string) {
		t.Helper()
		kv, err := jsA.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "iii-things", Placement: inA})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range values {
			if _, err := kv.Put(ctx, fmt.Sprintf("k%d", i), []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	mirrorName := region.MirrorName("KV_iii-things", "B")
	caughtUp := func(n uint64) {
		t.Helper()
		enginetest.Eventually(t, 10*time.Second, func() error {
			m, err := jsB.Stream(ctx, mirrorName)
			if err != nil {
				return err
			}
			if st := m.CachedInfo().State; st.Msgs != n || st.LastSeq != n {
				return fmt.Errorf("mirror holds %d messages, last %d; want %d", st.Msgs, st.LastSeq, n)
			}
			return nil
		})
	}
	fill("old-0", "old-1", "old-2", "old-3", "old-4")
	if _, err := region.Mirror(ctx, jsB, "B"); err != nil {
		t.Fatal(err)
	}
	caughtUp(5)
	if err := jsA.DeleteKeyValue(ctx, "iii-things"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a creation time of its own
	fill("new-0", "new-1")
	rep, err := region.Mirror(ctx, jsB, "B")
	if err != nil {
		t.Fatal(err)
	}
	for _, sr := range rep.Streams {
		if sr.Stream == "KV_iii-things" && (sr.Action != region.ActionCreated || sr.Reason == "") {
			t.Errorf("report %+v, want created anew", sr)
		}
	}
	caughtUp(2)
	m, err := jsB.Stream(ctx, mirrorName)
	if err != nil {
		t.Fatal(err)
	}
	for seq, want := range map[uint64]string{1: "new-0", 2: "new-1"} {
		msg, err := m.GetMsg(ctx, seq)
		if err != nil || string(msg.Data) != want {
			t.Errorf("mirror seq %d: %v, want %q", seq, err, want)
		}
	}
	// Unchanged at the next run.
	rep, err = region.Mirror(ctx, jsB, "B")
	if err != nil {
		t.Fatal(err)
	}
	for _, sr := range rep.Streams {
		if sr.Stream == "KV_iii-things" && sr.Action != region.ActionUnchanged {
			t.Errorf("third run: %+v, want unchanged", sr)
		}
	}
}
