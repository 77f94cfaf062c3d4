package region_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// TestSessionHomes: on a supercluster of regions A, B and a witness W, the
// per-session stores of each region's nodes are placed in that region; a
// session "A.s1" written from a client in B lands in A, a session "B.s2"
// in B. When A is lost, B's sessions keep working before any takeover (no
// write of theirs needs A), A's sessions are readable from B's mirrors,
// and after the takeover they are written in B under the same names.
func TestSessionHomes(t *testing.T) {
	sc := startSupercluster(t, 0, "A", "B", "W")
	ctx := ctxT(t, 90*time.Second)
	events := jetstream.StreamConfig{Name: subjects.EventStream, Storage: jetstream.FileStorage}
	turns := jetstream.KeyValueConfig{Bucket: subjects.TurnStateBucket, History: 1, Storage: jetstream.FileStorage}
	engines := map[string]*engine.Engine{}
	for _, r := range []string{"A", "B"} {
		e := enginetest.NewEngine(t, sc.servers[r], engine.WithRegion(r))
		if _, err := e.EnsureSessionStream(ctx, events, subjects.EventSubjectPrefix); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		if _, err := e.EnsureSessionKV(ctx, turns); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		engines[r] = e
	}
	eB := engines["B"]
	jsB := eB.JetStream()
	for _, c := range []struct{ stream, home string }{
		{"III_EVENTS_AT_A", "A"}, {"III_EVENTS_AT_B", "B"},
		{"KV_iii-turn-state-at-A", "A"}, {"KV_iii-turn-state-at-B", "B"},
	} {
		if h, err := region.Home(ctx, jsB, c.stream); err != nil || h != c.home {
			t.Errorf("%s is homed in %q (%v), want %s", c.stream, h, err, c.home)
		}
	}
	// A client in B writes both sessions; each lands in its home.
	write := func(sid, what string) error {
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		kv, err := eB.SessionKV(wctx, subjects.TurnStateBucket, sid)
		if err != nil {
			return err
		}
		if _, err := kv.Put(wctx, sid, []byte(what)); err != nil {
			return err
		}
		subj, err := subjects.EventSubject(sid)
		if err != nil {
			return err
		}
		_, err = jsB.Publish(wctx, subj, []byte(what))
		return err
	}
	for i := range 20 {
		for _, sid := range []string{"A.s1", "B.s2"} {
			if err := write(sid, fmt.Sprint(i)); err != nil {
				t.Fatalf("write %s: %v", sid, err)
			}
		}
	}
	for _, c := range []struct{ stream, subject string }{
		{"III_EVENTS_AT_A", "iii.events.A.s1"}, {"III_EVENTS_AT_B", "iii.events.B.s2"},
	} {
		s, err := jsB.Stream(ctx, c.stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 20 || info.State.Subjects[c.subject] != 20 {
			t.Errorf("%s: %d messages, subjects %v", c.stream, info.State.Msgs, info.State.Subjects)
		}
	}

	// B mirrors A's stores; then A is lost.
	if _, err := region.Mirror(ctx, jsB, "B"); err != nil {
		t.Fatalf("mirror: %v", err)
	}
	enginetest.Eventually(t, 20*time.Second, func() error {
		lag, err := region.Lag(ctx, jsB, "B")
		if err != nil {
			return err
		}
		for m, n := range lag {
			if n > 0 {
				return fmt.Errorf("%s is %d behind", m, n)
			}
		}
		return nil
	})
	kvA, err := jsB.KeyValue(ctx, "iii-turn-state-at-A")
	if err != nil {
		t.Fatal(err)
	}
	sc.servers["A"].Shutdown()
	lost := time.Now()
	// B's session is served at once: none of its writes goes to A.
	enginetest.Eventually(t, 20*time.Second, func() error { return write("B.s2", "during") })
	t.Logf("B.s2 written %v after A was lost, before any takeover", time.Since(lost).Round(time.Millisecond))
	if err := write("A.s1", "lost"); err == nil {
		t.Fatal("a write of A.s1 succeeded with A lost and no takeover")
	}
	// A's session reads from B's mirror (through a handle bound while A
	// was up: binding asks the origin stream for its configuration).
	if e, err := kvA.Get(ctx, "A.s1"); err != nil || string(e.Value()) != "19" {
		t.Fatalf("A.s1 read in B with A lost: %v", err)
	}

	// Takeover: A's stores are re-homed in B, and A.s1 carries on there.
	var rep region.Report
	enginetest.Eventually(t, 40*time.Second, func() error {
		var err error
		rep, err = region.Takeover(ctx, jsB, "A", "B")
		if errors.Is(err, region.ErrOriginAlive) {
			return err // not marked offline yet
		}
		if err != nil {
			return err
		}
		return nil
	})
	t.Logf("takeover done %v after the loss (%d streams)", time.Since(lost).Round(time.Millisecond), len(rep.Streams))
	for _, s := range []string{"III_EVENTS_AT_A", "KV_iii-turn-state-at-A"} {
		if h, err := region.Home(ctx, jsB, s); err != nil || h != "B" {
			t.Errorf("after the takeover %s is homed in %q (%v)", s, h, err)
		}
	}
	// A fresh engine (a restarted node) finds A's copies again.
	e2 := enginetest.NewEngine(t, sc.servers["B"], engine.WithRegion("B"))
	kv, err := e2.SessionKV(ctx, subjects.TurnStateBucket, "A.s1")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "A.s1"); err != nil || string(e.Value()) != "19" {
		t.Fatalf("A.s1 after the takeover: %v", err)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if _, err := kv.Put(wctx, "A.s1", []byte("after")); err != nil {
			return err
		}
		_, err := e2.JetStream().Publish(wctx, "iii.events.A.s1", []byte("after"))
		return err
	})
}
