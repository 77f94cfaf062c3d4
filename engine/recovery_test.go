package engine_test

import (
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

func TestRecoveryPace(t *testing.T) {
	t.Parallel()
	p := engine.RecoveryPace{Base: 500 * time.Millisecond, Max: 4 * time.Second}
	var got []time.Duration
	got = append(got, p.Lost(), p.Failed(), p.Failed(), p.Failed(), p.Failed())
	p.Recovered()
	got = append(got, p.Lost()) // lost again at once: keeps doubling
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	q := engine.RecoveryPace{Base: time.Second, Max: time.Millisecond}
	if d := q.Lost(); d != time.Millisecond {
		t.Fatalf("Base over Max: first wait %v, want Max", d)
	}
}
