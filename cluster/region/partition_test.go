package region_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPartitionTakeoverRejoin cuts A (and the meta leader with it) off the
// supercluster (5 ms one way between regions) while its servers keep running: no shutdown event reaches
// the others, A keeps acknowledging writes to its R1 streams, B takes over
// anyway. Then the partition heals: A drops its stale copies, its clients
// reach the streams now homed in B, and A becomes a mirror region.
func TestPartitionTakeoverRejoin(t *testing.T) {
	t.Parallel()
	sc := startSupercluster(t, 5*time.Millisecond, "A", "B", "W")
	sc.moveMetaLeader("A")
	ctx := ctxT(t, 50*time.Second)
	_, jsA := sc.js("A")
	_, jsB := sc.js("B")

	inA := &jetstream.Placement{Cluster: "A"}
	turns, err := jsA.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.TurnStateBucket, Placement: inA})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := turns.Put(ctx, fmt.Sprintf("s%03d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := jsA.CreateStream(ctx, jetstream.StreamConfig{Name: subjects.StepStream,
		Subjects: []string{subjects.StepSubjectPrefix + ">"}, Retention: jetstream.WorkQueuePolicy, Placement: inA}); err != nil {
		t.Fatal(err)
	}
	if _, err := region.Mirror(ctx, jsB, "B"); err != nil {
		t.Fatal(err)
	}
	mirror := region.MirrorName("KV_"+subjects.TurnStateBucket, "B")
	enginetest.Eventually(t, 5*time.Second, func() error {
		lag, err := region.Lag(ctx, jsB, "B")
		if err != nil || lag[mirror] != 0 || len(lag) != 1 {
			return fmt.Errorf("lag %v, %v", lag, err)
		}
		return nil
	})

	// A writer in A that keeps going through the partition.
	wctx, wc := context.WithCancel(ctx)
	w := startWriter(wctx, turns, false)
	var cutAt atomic.Int64 // writes acked when the cut happened
	w.atLeast(t, 300)

	cutTime := time.Now()
	sc.net.cut("A")
	cutAt.Store(w.writes.Load())
	var noticed time.Duration
	var how error
	enginetest.Eventually(t, 30*time.Second, func() error {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := region.Home(hctx, jsB, "KV_"+subjects.TurnStateBucket)
		if errors.Is(err, region.ErrOffline) || errors.Is(err, region.ErrUnreachable) {
			noticed, how = time.Since(cutTime), err
			return nil
		}
		return fmt.Errorf("home: %v", err)
	})
	rep, err := region.Takeover(ctx, jsB, "A", "B")
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	for _, sr := range rep.Streams {
		t.Logf("  %-20s %-10s msgs=%d last=%d took=%v %s", sr.Stream, sr.Action, sr.Messages, sr.LastSeq, sr.Took, sr.Reason)
	}
	// A, cut off but running, acknowledged writes all along.
	wc()
	acked := w.stop()
	var last uint64
	for _, sr := range rep.Streams {
		if sr.Stream == "KV_"+subjects.TurnStateBucket {
			last = sr.LastSeq
		}
	}
	missing, before := 0, 0
	for i, a := range acked {
		if a.rev > last {
			missing++
			if int64(i) < cutAt.Load() {
				before++
			}
		}
	}
	t.Logf("notice %v (%v)", noticed, how)
	t.Logf("RTO: notice %v + takeover %v = %v (meta leader lost with A)", noticed, rep.Took, noticed+rep.Took)
	t.Logf("RPO: %d of %d acked writes lost: %d acked before the cut (the mirror's lag: what a crash loses), %d acked by A after it",
		missing, len(acked), before, missing-before)
	if missing == 0 {
		t.Errorf("A acked nothing after the cut?")
	}

	kvB, err := jsB.KeyValue(ctx, subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvB.Put(ctx, "in-b", []byte("b")); err != nil {
		t.Fatal(err)
	}

	// Heal: A rejoins, learns that its streams now live in B, and drops
	// its stale copies (with the writes only it had).
	sc.net.heal("A")
	healed := time.Now()
	kvA, err := jsA.KeyValue(ctx, subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 40*time.Second, func() error {
		if sc.servers["A"].JetStreamIsStreamAssigned("$G", "KV_"+subjects.TurnStateBucket) {
			return fmt.Errorf("A still holds its copy")
		}
		if e, err := kvA.Get(ctx, "in-b"); err != nil || string(e.Value()) != "b" {
			return fmt.Errorf("A reads B's write: %v", err)
		}
		return nil
	})
	t.Logf("A converged %v after the heal", time.Since(healed))
	lostKey := acked[len(acked)-1]
	if _, err := kvA.Get(ctx, lostKey.key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("write acked by A during the partition: %v", err)
	}
	if _, err := kvA.Put(ctx, "from-a", []byte("a")); err != nil {
		t.Errorf("A writes to B's stream: %v", err)
	}
	if e, err := kvB.Get(ctx, "from-a"); err != nil || string(e.Value()) != "a" {
		t.Errorf("B reads A's write: %v", err)
	}
	// Fail back later: A becomes a mirror region of B.
	rep, err = region.Mirror(ctx, jsA, "A")
	if err != nil {
		t.Fatal(err)
	}
	for _, sr := range rep.Streams {
		if sr.Home != "B" || (sr.Action != region.ActionCreated && sr.Action != region.ActionPlaceholder) {
			t.Errorf("mirror into A: %+v", sr)
		}
	}
	if len(rep.Streams) != 2 {
		t.Errorf("mirror into A: %+v", rep.Streams)
	}
}
