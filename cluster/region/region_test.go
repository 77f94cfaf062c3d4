package region_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/nats-io/nats.go/jetstream"
)

type ack struct {
	key string
	rev uint64
}

// TestMirrorTakeover runs the whole life of a region pair: assets homed in
// A, read mirrors in B, A lost mid-writes, B takes over under the same
// names. RPO and RTO are logged.
//
// Scenarios: the meta leader outside A (the usual case), the meta leader
// lost with A (a meta election is part of the time to notice), and gateway
// latency between regions (the mirror lags, so acked writes are lost).
func TestMirrorTakeover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		leader string
		delay  time.Duration
	}{
		{"meta_leader=B", "B", 0},
		{"meta_leader=A", "A", 0},
		{"meta_leader=W,gateway_delay=5ms", "W", 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testMirrorTakeover(t, tc.leader, tc.delay)
		})
	}
}

func testMirrorTakeover(t *testing.T, leader string, delay time.Duration) {
	sc := startSupercluster(t, delay, "A", "B", "W")
	sc.moveMetaLeader(leader)
	ctx := ctxT(t, 50*time.Second)
	_, jsA := sc.js("A")
	ncB, jsB := sc.js("B")

	// Assets homed in A.
	inA := &jetstream.Placement{Cluster: "A"}
	turns, err := jsA.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.TurnStateBucket, History: 2, Placement: inA})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := turns.Put(ctx, fmt.Sprintf("s%03d", i), []byte(fmt.Sprintf("turn-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := jsA.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.CompactionLeasesBucket,
		LimitMarkerTTL: time.Second, Placement: inA}); err != nil {
		t.Fatal(err)
	}
	if _, err := jsA.CreateStream(ctx, jetstream.StreamConfig{Name: subjects.EventStream,
		Subjects: []string{subjects.EventSubjectPrefix + ">"}, Placement: inA}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := jsA.Publish(ctx, subjects.EventSubjectPrefix+"s001", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := jsA.CreateStream(ctx, jetstream.StreamConfig{Name: subjects.StepStream,
		Subjects: []string{subjects.StepSubjectPrefix + ">"}, Retention: jetstream.WorkQueuePolicy, Placement: inA}); err != nil {
		t.Fatal(err)
	}
	if _, err := jsA.Publish(ctx, subjects.StepSubjectPrefix+"s001", []byte("step")); err != nil {
		t.Fatal(err)
	}
	// Not ours: never mirrored, never reported.
	if _, err := jsA.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Placement: inA}); err != nil {
		t.Fatal(err)
	}

	// Mirror into B.
	rep, err := region.Mirror(ctx, jsB, "B")
	if err != nil {
		t.Fatalf("mirror: %v", err)
	}
	t.Logf("mirror took %v", rep.Took)
	got := map[string]region.StreamReport{}
	for _, sr := range rep.Streams {
		got[sr.Stream] = sr
		t.Logf("  %-28s %-10s mirror=%s home=%s msgs=%d last=%d %s", sr.Stream, sr.Action, sr.Mirror, sr.Home, sr.Messages, sr.LastSeq, sr.Reason)
	}
	for _, name := range []string{"KV_" + subjects.TurnStateBucket, "KV_" + subjects.CompactionLeasesBucket, subjects.EventStream} {
		if sr := got[name]; sr.Action != region.ActionCreated || sr.Home != "A" || sr.Mirror != region.MirrorName(name, "B") {
			t.Errorf("%s: %+v", name, sr)
		}
	}
	if sr := got[subjects.StepStream]; sr.Action != region.ActionPlaceholder {
		t.Errorf("work queue: %+v", sr)
	}
	if _, ok := got["OTHER"]; ok || len(got) != 4 {
		t.Errorf("report: %v", got)
	}

	// Idempotent; a new bucket is picked up by the next run.
	if _, err := jsA.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.RunsBucket, Placement: inA}); err != nil {
		t.Fatal(err)
	}
	rep, err = region.Mirror(ctx, jsB, "B")
	if err != nil {
		t.Fatal(err)
	}
	for _, sr := range rep.Streams {
		want := region.ActionUnchanged
		switch sr.Stream {
		case "KV_" + subjects.RunsBucket:
			want = region.ActionCreated
		case subjects.StepStream:
			want = region.ActionPlaceholder
		}
		if sr.Action != want {
			t.Errorf("second run: %s %s, want %s", sr.Stream, sr.Action, want)
		}
	}

	// Bad input against a live supercluster.
	if _, err := region.Mirror(ctx, jsB, "Z"); !errors.Is(err, region.ErrUnknownRegion) {
		t.Errorf("unknown region: %v", err)
	}
	if _, err := region.Lag(ctx, jsB, "W"); !errors.Is(err, region.ErrNoMirrors) {
		t.Errorf("lag without mirrors: %v", err)
	}
	if _, err := region.Takeover(ctx, jsB, "Z", "B"); !errors.Is(err, region.ErrNoMirrors) {
		t.Errorf("takeover of a region without mirrors: %v", err)
	}
	if _, err := region.Takeover(ctx, jsB, "A", "B"); !errors.Is(err, region.ErrOriginAlive) {
		t.Errorf("takeover of a live region: %v", err)
	}
	if h, err := region.Home(ctx, jsB, subjects.EventStream); err != nil || h != "A" {
		t.Errorf("home = %q, %v", h, err)
	}

	// Reads in B by the origin name are served by the B mirror.
	kvB, err := jsB.KeyValue(ctx, subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		m, err := ncB.Request("$JS.API.DIRECT.GET.KV_"+subjects.TurnStateBucket+".$KV."+subjects.TurnStateBucket+".s007", nil, time.Second)
		if err != nil {
			return err
		}
		if s := m.Header.Get("Nats-Stream"); s != region.MirrorName("KV_"+subjects.TurnStateBucket, "B") || string(m.Data) != "turn-7" {
			return fmt.Errorf("answered by %q: %q", s, m.Data)
		}
		return nil
	})
	if e, err := kvB.Get(ctx, "s007"); err != nil || string(e.Value()) != "turn-7" {
		t.Fatalf("kv get in B: %v", err)
	}

	// A writer in A at full speed.
	w := startWriter(ctx, turns, true)
	w.atLeast(t, 300)
	lag, err := region.Lag(ctx, jsB, "B")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lag while writing: %v", lag)
	if _, ok := lag[region.MirrorName("KV_"+subjects.TurnStateBucket, "B")]; !ok || len(lag) != 4 {
		t.Errorf("lag: %v", lag)
	}

	// Lose A mid-writes.
	metaLeader := sc.metaLeader()
	lostAt := time.Now()
	sc.servers["A"].Shutdown()
	var noticed time.Duration
	enginetest.Eventually(t, 30*time.Second, func() error {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := region.Home(hctx, jsB, "KV_"+subjects.TurnStateBucket)
		if errors.Is(err, region.ErrOffline) || errors.Is(err, region.ErrUnreachable) {
			noticed = time.Since(lostAt)
			return nil
		}
		return fmt.Errorf("home: %v", err)
	})
	acked := w.stop()
	// Still readable in B, from the mirror.
	if e, err := kvB.Get(ctx, "s042"); err != nil || string(e.Value()) != "turn-42" {
		t.Fatalf("read from mirror with A down: %v", err)
	}

	if leader == "B" {
		// A live client in B creates the (empty) leases bucket again the
		// moment its lost origin is deleted, as a member's membership
		// heartbeat does: the takeover adopts it.
		enginetest.Eventually(t, 20*time.Second, func() error {
			err := jsB.DeleteStream(ctx, "KV_"+subjects.CompactionLeasesBucket)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			return err
		})
		if _, err := jsB.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.CompactionLeasesBucket,
			LimitMarkerTTL: time.Second, Placement: &jetstream.Placement{Cluster: "B"}}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = region.Takeover(ctx, jsB, "A", "B")
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	t.Logf("takeover took %v", rep.Took)
	got = map[string]region.StreamReport{}
	for _, sr := range rep.Streams {
		got[sr.Stream] = sr
		t.Logf("  %-28s %-10s mirror=%s msgs=%d last=%d took=%v %s", sr.Stream, sr.Action, sr.Mirror, sr.Messages, sr.LastSeq, sr.Took, sr.Reason)
	}
	if sr := got[subjects.StepStream]; sr.Action != region.ActionRecreated {
		t.Errorf("work queue: %+v", sr)
	}
	for _, name := range []string{"KV_" + subjects.TurnStateBucket, "KV_" + subjects.CompactionLeasesBucket, "KV_" + subjects.RunsBucket, subjects.EventStream} {
		if sr := got[name]; sr.Action != region.ActionPromoted {
			t.Errorf("%s: %+v", name, sr)
		}
		if h, err := region.Home(ctx, jsB, name); err != nil || h != "B" {
			t.Errorf("%s home = %q, %v", name, h, err)
		}
	}

	// RPO: acked writes in A missing in B.
	last := got["KV_"+subjects.TurnStateBucket].LastSeq
	missing := 0
	for _, a := range acked {
		e, err := kvB.Get(ctx, a.key)
		switch {
		case err == nil && e.Revision() == a.rev:
			if a.rev > last {
				t.Errorf("%s rev %d beyond last seq %d", a.key, a.rev, last)
			}
		case errors.Is(err, jetstream.ErrKeyNotFound) && a.rev > last:
			missing++
		default:
			t.Errorf("%s (rev %d): %v", a.key, a.rev, err)
		}
	}
	t.Logf("RPO: %d of %d acked writes missing in B", missing, len(acked))
	t.Logf("RTO: notice %v (meta leader was %s) + takeover %v = %v", noticed, metaLeader, rep.Took, noticed+rep.Took)

	// The origin names work in B: same revisions (CAS tokens survive), new
	// writes, old handles, events, the recreated work queue.
	e, err := kvB.Get(ctx, "s100")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvB.Update(ctx, "s100", []byte("after"), e.Revision()); err != nil {
		t.Fatalf("CAS with a pre-takeover revision: %v", err)
	}
	fresh, err := jsB.KeyValue(ctx, subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	if rev, err := fresh.Put(ctx, "new", []byte("x")); err != nil || rev != last+2 {
		t.Errorf("put after takeover: rev %d (last %d), %v", rev, last, err)
	}
	pa, err := jsB.Publish(ctx, subjects.EventSubjectPrefix+"x", []byte("after"))
	if err != nil || pa.Stream != subjects.EventStream || pa.Sequence != 51 {
		t.Errorf("publish after takeover: %+v, %v", pa, err)
	}
	steps, err := jsB.Stream(ctx, subjects.StepStream)
	if err != nil {
		t.Fatal(err)
	}
	if c := steps.CachedInfo(); c.Config.Retention != jetstream.WorkQueuePolicy || c.State.Msgs != 0 || c.Cluster.Name != "B" {
		t.Errorf("steps: %+v", c)
	}
	leases, err := jsB.KeyValue(ctx, subjects.CompactionLeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := leases.Status(ctx); st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.SubjectDeleteMarkerTTL != time.Second {
		t.Errorf("limit marker TTL lost")
	}
	// B is home now: nothing to mirror into B, no mirror left to lag.
	rep, err = region.Mirror(ctx, jsB, "B")
	if err != nil {
		t.Fatal(err)
	}
	for _, sr := range rep.Streams {
		if sr.Action != region.ActionSkipped || sr.Home != "B" {
			t.Errorf("mirror into the new home: %+v", sr)
		}
	}
	if _, err := region.Lag(ctx, jsB, "B"); !errors.Is(err, region.ErrNoMirrors) {
		t.Errorf("lag after takeover: %v", err)
	}
	// No mirror left behind.
	for name := range jsB.StreamNames(ctx).Name() {
		if len(name) > 2 && name[len(name)-2:] == "_B" {
			t.Errorf("leftover %s", name)
		}
	}
}
