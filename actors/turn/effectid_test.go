package turn_test

import (
	"strconv"
	"testing"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
)

func TestParseEffectID(t *testing.T) {
	rec, effs, err := turn.New(agent.RunStart{SessionID: "s1", Provider: "scripted", Model: "echo", Messages: []agent.Message{{Role: agent.RoleUser, Content: []agent.Content{agent.Text("hi")}}}}, "runA", 1)
	if err != nil {
		t.Fatal(err)
	}
	rec, more, err := turn.Apply(rec, turn.Provisioned{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range append(effs, more...) {
		run, step, i, ok := turn.ParseEffectID(e.ID)
		if !ok || run != "runA" || step == 0 || step > rec.Step || e.ID != run+":"+strconv.FormatUint(step, 10)+":"+strconv.Itoa(i) {
			t.Errorf("ParseEffectID(%q) = %q, %d, %d, %v", e.ID, run, step, i, ok)
		}
	}
	for _, bad := range []string{"", "run", "run:1", ":1:2", "run:x:1", "run:1:x", "run:1:-1", "run:1:+1", "a:b:1:2", "run:1:2:u3"} {
		if _, _, _, ok := turn.ParseEffectID(bad); ok {
			t.Errorf("ParseEffectID(%q) ok", bad)
		}
	}
}

func FuzzParseEffectID(f *testing.F) {
	for _, s := range []string{"runA:3:1", "r:18446744073709551615:0", "::", "a:1:2:3", "run:01:002"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		run, step, i, ok := turn.ParseEffectID(id)
		if !ok {
			return
		}
		again := run + ":" + strconv.FormatUint(step, 10) + ":" + strconv.Itoa(i)
		r2, s2, i2, ok2 := turn.ParseEffectID(again)
		if !ok2 || r2 != run || s2 != step || i2 != i || i < 0 {
			t.Fatalf("%q parsed as %q %d %d, which does not format back (%q)", id, run, step, i, again)
		}
	})
}
