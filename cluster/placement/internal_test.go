package placement

import (
	"fmt"
	"testing"

	"github.com/asynkron/protoactor-go/cluster"
)

func TestPick(t *testing.T) {
	t.Parallel()
	members := []*cluster.Member{
		{Id: "a", Host: "h", Port: 1, Kinds: []string{"session"}},
		{Id: "b", Host: "h", Port: 2, Kinds: []string{"session", "other"}},
		{Id: "c", Host: "h", Port: 3, Kinds: []string{"session"}},
		{Id: "d", Host: "h", Port: 4, Kinds: []string{"other"}},
		nil,
		{Id: ""},
	}
	topo := newTopology(members)
	reversed := newTopology([]*cluster.Member{members[3], members[2], members[1], members[0]})
	counts := map[string]int{}
	for i := range 3000 {
		key := Key("session", fmt.Sprintf("s-%d", i))
		m := topo.pick("session", key, nil, nil, nil)
		if m == nil || m.Id == "d" {
			t.Fatalf("%s placed on %v", key, m)
		}
		if r := reversed.pick("session", key, nil, nil, nil); r.Id != m.Id {
			t.Fatalf("%s: pick depends on member order: %s vs %s", key, m.Id, r.Id)
		}
		counts[m.Id]++
		// Excluding another member never moves a key (rendezvous property).
		for _, other := range []string{"a", "b", "c"} {
			if other == m.Id {
				continue
			}
			if r := topo.pick("session", key, nil, map[string]bool{other: true}, nil); r.Id != m.Id {
				t.Fatalf("%s moved from %s to %s when %s was excluded", key, m.Id, r.Id, other)
			}
		}
		if r := topo.pick("session", key, func(id, _ string) bool { return id != m.Id }, nil, nil); r == nil || r.Id == m.Id {
			t.Fatalf("%s: accepting func ignored", key)
		}
	}
	// Preferred members take the keys while one accepts; the rest is
	// placed as before.
	inRegion := func(id string) bool { return id == "b" || id == "c" }
	for i := range 300 {
		key := Key("session", fmt.Sprintf("eu.s-%d", i))
		m := topo.pick("session", key, nil, nil, inRegion)
		if m == nil || !inRegion(m.Id) {
			t.Fatalf("%s placed on %v, not a preferred member", key, m)
		}
		if r := topo.pick("session", key, nil, map[string]bool{"b": true, "c": true}, inRegion); r == nil || r.Id != "a" {
			t.Fatalf("%s: preferred members excluded, placed on %v, want the fallback a", key, r)
		}
		if r := topo.pick("session", key, nil, nil, func(string) bool { return false }); r.Id != topo.pick("session", key, nil, nil, nil).Id {
			t.Fatalf("%s: no preferred member changed the pick", key)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		if counts[id] < 800 || counts[id] > 1200 {
			t.Fatalf("uneven spread over 3 members: %v", counts)
		}
	}
	if m := topo.pick("none", "k", nil, nil, nil); m != nil {
		t.Fatalf("kind hosted nowhere placed on %s", m.Id)
	}
	if m := topo.pick("session", "k", nil, map[string]bool{"a": true, "b": true, "c": true}, nil); m != nil {
		t.Fatalf("all excluded, placed on %s", m.Id)
	}
	var none *topology
	if none.pick("session", "k", nil, nil, nil) != nil || none.member("a") != nil {
		t.Fatal("nil topology has members")
	}
	if topo.member("d") == nil || topo.member("x") != nil || topo.member("") != nil {
		t.Fatal("member lookup")
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, s := range []string{`{"member":"m1","address":"127.0.0.1:1"}`, `{"member":""}`, `{}`, `null`, `[]`, `}{`, `{"member":1}`, ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			return
		}
		back, err := decodeRecord(r.encode())
		if err != nil || back != r {
			t.Fatalf("round trip %q → %+v → %+v, %v", b, r, back, err)
		}
	})
}
