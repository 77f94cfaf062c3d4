package membership

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func entryJSON(t *testing.T, id, status string, port int) []byte {
	t.Helper()
	b, err := json.Marshal(Entry{ID: id, Host: "10.0.0.1", Port: port, Kinds: []string{"echo"}, Status: status})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestView folds watch updates into a view step by step: each step's
// update, then the expected change, error and live ids.
func TestView(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	put, del, purge := jetstream.KeyValuePut, jetstream.KeyValueDelete, jetstream.KeyValuePurge

	type step struct {
		key      string
		op       jetstream.KeyValueOp
		value    []byte
		at       float64 // seconds after t0
		topology bool
		selfGone bool
		// selfExpired: the own entry was expired by the bucket
		selfExpired bool
		err         error
		live        []string
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"join, heartbeat, leave", []step{
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 1), at: 0, topology: true, live: []string{"a"}},
			{key: "c.b", op: put, value: entryJSON(t, "b", StatusUp, 2), at: 0.1, topology: true, live: []string{"a", "b"}},
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 1), at: 1, live: []string{"a", "b"}},
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusDraining, 1), at: 2, live: []string{"a", "b"}},
			{key: "c.b", op: del, at: 2.5, topology: true, live: []string{"a"}},
		}},
		{"an expiry marker after an outage is no leave", []step{
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 0, topology: true, live: []string{"self"}},
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 2), at: 0.1, topology: true, live: []string{"a", "self"}},
			// The bucket was out for a minute; its new leader expires
			// both entries by its clock.
			{key: "c.a", op: purge, at: 60, live: []string{"a", "self"}},
			{key: "c.self", op: purge, at: 60, selfExpired: true, live: []string{"a", "self"}},
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 60.1, live: []string{"a", "self"}},
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 2), at: 60.2, live: []string{"a", "self"}},
		}},
		{"an expired member that stays silent is swept", []step{
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 0, topology: true, live: []string{"self"}},
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 2), at: 0.1, topology: true, live: []string{"a", "self"}},
			{key: "c.a", op: purge, at: 60, live: []string{"a", "self"}},
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 61.5, live: []string{"a", "self"}},
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 63, live: []string{"a", "self"}},
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 64.1, topology: true, live: []string{"self"}},
		}},
		{"an expiry marker of an unknown id", []step{
			{key: "c.x", op: purge, at: 0, live: []string{}},
			{key: "c.x", op: put, value: entryJSON(t, "x", StatusUp, 1), at: 0.1, topology: true, live: []string{"x"}},
		}},
		{"a departed id never comes back", []step{
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 1), at: 0, topology: true, live: []string{"a"}},
			{key: "c.a", op: del, at: 5, topology: true, live: []string{}},
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 1), at: 5.1, live: []string{}},
		}},
		{"delete of an unknown id", []step{
			{key: "c.x", op: del, at: 0, live: []string{}},
			{key: "c.x", op: put, value: entryJSON(t, "x", StatusUp, 1), at: 1, live: []string{}},
		}},
		{"address change republishes", []step{
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 1), at: 0, topology: true, live: []string{"a"}},
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 2), at: 1, topology: true, live: []string{"a"}},
		}},
		{"own entry gone", []step{
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 0, topology: true, live: []string{"self"}},
			{key: "c.self", op: del, at: 1, topology: true, selfGone: true, live: []string{}},
		}},
		{"bad updates leave the view alone", []step{
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 1), at: 0, topology: true, live: []string{"a"}},
			{key: "c.a", op: put, value: []byte("{not json"), at: 0.5, err: ErrInvalidEntry, live: []string{"a"}},
			{key: "c.a", op: put, value: entryJSON(t, "b", StatusUp, 1), at: 0.6, err: ErrInvalidEntry, live: []string{"a"}},
			{key: "other.a", op: del, at: 0.7, err: ErrInvalidEntry, live: []string{"a"}},
			{key: "c.", op: del, at: 0.8, err: ErrInvalidEntry, live: []string{"a"}},
			{key: "c.a.b", op: del, at: 0.9, err: ErrInvalidEntry, live: []string{"a"}},
			{key: "c.a", op: put, value: entryJSON(t, "a", "sleeping", 1), at: 1, err: ErrInvalidEntry, live: []string{"a"}},
		}},
		{"sweep drops what markers missed, in server time", []step{
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 0, topology: true, live: []string{"self"}},
			{key: "c.b", op: put, value: entryJSON(t, "b", StatusUp, 2), at: 0, topology: true, live: []string{"b", "self"}},
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 1.9, live: []string{"b", "self"}},
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 3.9, live: []string{"b", "self"}},
			// b's last put is 4.1 s older than the own last put: more
			// than the stale threshold of 4 s.
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 4.1, topology: true, live: []string{"self"}},
		}},
		{"a member never sweeps itself", []step{
			{key: "c.self", op: put, value: entryJSON(t, "self", StatusUp, 1), at: 0, topology: true, live: []string{"self"}},
			// Its heartbeats fail while a's land: a sweeps it and deletes
			// its key, which expels it; its own view proves nothing.
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 2), at: 0.1, topology: true, live: []string{"a", "self"}},
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 2), at: 2, live: []string{"a", "self"}},
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 2), at: 4, live: []string{"a", "self"}},
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 2), at: 6, live: []string{"a", "self"}},
			{key: "c.self", op: del, at: 6.1, topology: true, selfGone: true, live: []string{"a"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newView("c", "self", 4*time.Second)
			for i, s := range tc.steps {
				c, err := v.apply(s.key, s.op, s.value, at(s.at))
				c.merge(v.sweep())
				if !errors.Is(err, s.err) || (s.err == nil) != (err == nil) {
					t.Fatalf("step %d: err %v, want %v", i, err, s.err)
				}
				if c.topology != s.topology || c.selfGone != s.selfGone || c.selfExpired != s.selfExpired {
					t.Errorf("step %d: change %+v, want topology=%v selfGone=%v selfExpired=%v", i, c, s.topology, s.selfGone, s.selfExpired)
				}
				var live []string
				for _, e := range v.entries() {
					live = append(live, e.ID)
				}
				if !slices.Equal(live, s.live) && len(live)+len(s.live) > 0 {
					t.Errorf("step %d: live %v, want %v", i, live, s.live)
				}
			}
		})
	}
}

func TestViewAccepting(t *testing.T) {
	t.Parallel()
	v := newView("c", "", time.Minute)
	now := time.Now()
	for _, e := range []Entry{
		{ID: "up", Host: "h", Port: 1, Kinds: []string{"echo", "session"}, Status: StatusUp},
		{ID: "dr", Host: "h", Port: 2, Kinds: []string{"echo"}, Status: StatusDraining},
	} {
		b, _ := json.Marshal(e)
		if _, err := v.apply("c."+e.ID, jetstream.KeyValuePut, b, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		id, kind string
		want     bool
	}{
		{"up", "echo", true},
		{"up", "session", true},
		{"up", "other", false},
		{"dr", "echo", false},
		{"nobody", "echo", false},
	} {
		if got := v.accepting(tc.id, tc.kind); got != tc.want {
			t.Errorf("accepting(%s, %s) = %v, want %v", tc.id, tc.kind, got, tc.want)
		}
	}
	top := v.topology()
	if len(top) != 2 || top[0].Id != "dr" || top[1].Id != "up" || top[1].Port != 1 {
		t.Errorf("topology %v: draining members stay, sorted by id", top)
	}
}

// BenchmarkViewHeartbeat is the watch's steady state: heartbeat puts of
// members=N, each decoded, folded in and swept.
func BenchmarkViewHeartbeat(b *testing.B) {
	for _, n := range []int{3, 30, 300} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			v := newView("c", "", 10*time.Second)
			values := make([][]byte, n)
			for i := range values {
				data, err := json.Marshal(Entry{ID: fmt.Sprintf("m%03d", i), Host: "10.0.0.1", Port: 8000 + i,
					Kinds: []string{"prototopic", "session"}, Status: StatusUp, Meta: map[string]string{"node": "n"}})
				if err != nil {
					b.Fatal(err)
				}
				values[i] = data
			}
			now := time.Now()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := i % n
				if _, err := v.apply(fmt.Sprintf("c.m%03d", j), jetstream.KeyValuePut, values[j], now.Add(time.Duration(i))); err != nil {
					b.Fatal(err)
				}
				v.sweep()
			}
		})
	}
}

// An outage of NATS itself (nothing lands in the bucket for more than
// half a lifetime) gives everyone a fresh lifetime: the first put after it
// must not sweep members whose heartbeats could not land meanwhile. A
// member that is silent while others write is still swept, and its key is
// named for deletion with the revision of its last put.
func TestViewOutageForgiven(t *testing.T) {
	v := newView("c", "self", 4*time.Second)
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	step := func(id string, s float64, rev uint64) change {
		t.Helper()
		c, err := v.applyRev("c."+id, jetstream.KeyValuePut, entryJSON(t, id, StatusUp, 1), at(s), rev)
		if err != nil {
			t.Fatal(err)
		}
		c.merge(v.sweep())
		return c
	}
	step("self", 0, 1)
	step("a", 0.5, 2)
	v.synced = true
	// Ten seconds of silence (an election), then self's put lands first.
	if c := step("self", 10, 3); len(c.swept) != 0 || len(v.entries()) != 2 {
		t.Fatalf("after the outage: swept %v, live %v", c.swept, v.entries())
	}
	step("a", 10.5, 4)
	// a stops; self keeps writing every second.
	var swept map[string]uint64
	for s := 11.0; s < 16; s++ {
		if c := step("self", s, uint64(s)); len(c.swept) > 0 {
			swept = c.swept
		}
	}
	if swept["a"] != 4 || len(v.entries()) != 1 {
		t.Fatalf("silent member: swept %v, live %v", swept, v.entries())
	}
}

// A member that joins as the bucket comes back from an outage (the killed
// node restarting under the election) reads, in its initial values, the
// survivors' last puts from before the outage and then its own. Staleness
// there is no evidence: it must sweep nobody (it would delete the
// survivors' keys and expel them all), and only the members that then stay
// silent while it heartbeats are swept.
func TestViewJoinAfterOutage(t *testing.T) {
	t.Parallel()
	for _, self := range []string{"n4", ""} { // a member, a client
		t.Run("self="+self, func(t *testing.T) {
			t.Parallel()
			v := newView("c", self, 2*time.Second)
			at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
			var swept map[string]uint64
			step := func(id string, s float64, rev uint64) {
				t.Helper()
				c, err := v.applyRev("c."+id, jetstream.KeyValuePut, entryJSON(t, id, StatusUp, 1), at(s), rev)
				if err != nil {
					t.Fatal(err)
				}
				c.merge(v.sweep())
				if c.selfGone {
					t.Fatalf("put of %s at %v: own entry gone", id, s)
				}
				for k, r := range c.swept {
					if swept == nil {
						swept = map[string]uint64{}
					}
					swept[k] = r
				}
			}
			live := func() []string {
				var ids []string
				for _, e := range v.entries() {
					ids = append(ids, e.ID)
				}
				return ids
			}
			// Initial values: one message per key, by revision; the
			// bucket had no leader from 0.5 to 5.5.
			step("n1", 0.2, 1)
			step("n2", 0.3, 2)
			step("n3", 0.4, 3) // killed
			writer := "n4"
			if self == "" {
				writer = "n1" // a client's first message after the outage
			}
			step(writer, 5.5, 4)
			v.synced = true
			want := []string{"n1", "n2", "n3", "n4"}
			if self == "" {
				want = want[:3]
			}
			if len(swept) != 0 || !slices.Equal(live(), want) {
				t.Fatalf("after the initial values: swept %v, live %v, want none swept and %v", swept, live(), want)
			}
			// The survivors' heartbeats land; n3 stays silent.
			rev := uint64(5)
			for s := 5.7; s < 8.5; s += 0.4 {
				for _, id := range []string{"n1", "n2", "n4"} {
					if id == "n4" && self == "" {
						continue
					}
					step(id, s, rev)
					rev++
				}
			}
			want = slices.DeleteFunc(want, func(id string) bool { return id == "n3" })
			if !slices.Equal(live(), want) || len(swept) != 1 || swept["n3"] != 3 {
				t.Fatalf("after the survivors' heartbeats: swept %v, live %v, want n3 swept (rev 3) and %v", swept, live(), want)
			}
		})
	}
}
