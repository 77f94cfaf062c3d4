package membership_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/membership"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// seenWithin bounds how long after its connection is back a member's view
// lags a change (nats.go's own watch resumes only once it misses its
// heartbeats, and the provider's silence guard only after a member TTL).
const seenWithin = 3 * time.Second

// startOn runs member self of cluster "c" on connection nc.
func startOn(t *testing.T, nc *nats.Conn, self *membership.Entry, opts ...membership.Option) (*membership.Provider, *recorder) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := membership.New(js, testOpts(opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := p.StartForTest("c", self, rec.publish); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(false) })
	return p, rec
}

// reconnected waits for a status of back and returns when it came.
func reconnected(t *testing.T, back chan nats.Status) time.Time {
	t.Helper()
	select {
	case <-back:
		return time.Now()
	case <-time.After(15 * time.Second):
		t.Fatal("connection not back 15 s after the server restarted")
		return time.Time{}
	}
}

// TestViewAcrossServerRestart restarts the server members a and b are
// connected to (same port and store). A member joins while they are away
// (or right after a is back), b marks itself draining once it is back,
// then leaves: a sees each within seenWithin of its reconnect or of the
// change, where its watch used to wait for its silence guard (a member
// TTL after the last update). The bucket is kept across the restart (a
// replicated bucket when one node of a NATS cluster restarts; here one on
// file storage), or lost (the memory-stored bucket of a single server:
// the watch ends at the reconnect and is tried again until a member has
// created the bucket again).
func TestViewAcrossServerRestart(t *testing.T) {
	t.Parallel()
	// A TTL long enough that the silence guard cannot pass for a fix.
	const ttl, hb = 10 * time.Second, time.Second
	opts := []membership.Option{membership.WithTTL(ttl), membership.WithHeartbeat(hb)}
	for _, tc := range []struct {
		name string
		kept bool
		// late: c joins a second after a is back instead of while it is
		// away, so nobody has created a lost bucket again when a's watch
		// finds it gone.
		late bool
	}{
		{"bucket kept", true, false},
		{"bucket lost", false, false},
		{"bucket lost, join right after", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ns := enginetest.RunServer(t)
			if tc.kept {
				// Created first, so the providers use it as it is.
				js := newJS(t, ns)
				if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
					Bucket: subjects.MembersBucket, History: 1, TTL: time.Minute, LimitMarkerTTL: time.Minute,
					Storage: jetstream.FileStorage,
				}); err != nil {
					t.Fatal(err)
				}
			}
			ncA, ncB := enginetest.Connect(t, ns), enginetest.Connect(t, ns)
			a, recA := startOn(t, ncA, testEntry("a", 1), opts...)
			b, _ := startOn(t, ncB, testEntry("b", 2), opts...)
			recA.sees(t, 2*time.Second, "a", "b")
			backA, backB := ncA.StatusChanged(nats.CONNECTED), ncB.StatusChanged(nats.CONNECTED)
			defer ncA.RemoveStatusListener(backA)
			defer ncB.RemoveStatusListener(backB)

			ns = enginetest.StopServer(t, ns)()
			var (
				c  *membership.Provider
				at time.Time
			)
			if tc.late {
				at = reconnected(t, backA)
				time.Sleep(time.Second)
				c, _ = start(t, ns, testEntry("c", 3), opts...)
			} else {
				// a and b reconnect ReconnectWait (2 s) after they lost
				// the server: c joins meanwhile.
				c, _ = start(t, ns, testEntry("c", 3), opts...)
				if ncA.Status() == nats.CONNECTED {
					t.Fatal("a reconnected before c joined: the join is not during the outage")
				}
				at = reconnected(t, backA)
			}
			enginetest.Eventually(t, time.Until(at.Add(seenWithin)), func() error {
				if got := recA.ids(); fmt.Sprint(got) != "[a b c]" {
					return fmt.Errorf("a sees %v, want [a b c] (c joined around the restart)", got)
				}
				return nil
			})
			t.Logf("join seen %v after a's reconnect", time.Since(at).Round(time.Millisecond))

			reconnected(t, backB)
			if !a.Accepting("b", "echo") {
				t.Fatal("a does not accept b before b drains")
			}
			at = time.Now()
			if err := b.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			enginetest.Eventually(t, seenWithin, func() error {
				if a.Accepting("b", "echo") {
					return fmt.Errorf("a still places grains on b, which drains")
				}
				return nil
			})
			t.Logf("draining seen %v after the write", time.Since(at).Round(time.Millisecond))

			at = time.Now()
			if err := b.Shutdown(true); err != nil {
				t.Fatal(err)
			}
			recA.sees(t, seenWithin, "a", "c")
			t.Logf("leave seen %v after the delete", time.Since(at).Round(time.Millisecond))
			for name, p := range map[string]*membership.Provider{"a": a, "c": c} {
				if expelled(p) {
					t.Errorf("%s expelled", name)
				}
			}
		})
	}
}
