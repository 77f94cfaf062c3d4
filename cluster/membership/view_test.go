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
		err      error
		live     []string
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
		{"expiry marker is a purge", []step{
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 1), at: 0, topology: true, live: []string{"a"}},
			{key: "c.a", op: purge, at: 5, topology: true, live: []string{}},
		}},
		{"a departed id never comes back", []step{
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 1), at: 0, topology: true, live: []string{"a"}},
			{key: "c.a", op: purge, at: 5, topology: true, live: []string{}},
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
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 1), at: 0, topology: true, live: []string{"a"}},
			{key: "c.b", op: put, value: entryJSON(t, "b", StatusUp, 2), at: 0, topology: true, live: []string{"a", "b"}},
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 1), at: 3.9, live: []string{"a", "b"}},
			// b's last put is 4.1 s older than the newest message: more
			// than the stale threshold of 4 s.
			{key: "c.a", op: put, value: entryJSON(t, "a", StatusUp, 1), at: 4.1, topology: true, live: []string{"a"}},
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
				if c.topology != s.topology || c.selfGone != s.selfGone {
					t.Errorf("step %d: change %+v, want topology=%v selfGone=%v", i, c, s.topology, s.selfGone)
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
