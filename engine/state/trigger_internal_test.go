package state

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/enginetest"
)

// TestTriggerBufferedEventNotRedeliveredWhileRunning: events fetched while
// every call slot is busy wait in the client's buffer behind the one that
// waits for a slot; when the slots free at once, those that find a slot
// free at once waited as long, and must restart their ack wait too, or the
// server hands them out a second time while their call runs.
func TestTriggerBufferedEventNotRedeliveredWhileRunning(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store, err := New(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	const (
		slots = 4
		wait  = 800 * time.Millisecond // the events wait for a slot
		call  = 800 * time.Millisecond // then each call runs
	)
	var mu sync.Mutex
	runs := map[string]int{}
	done := make(chan struct{}, 4*slots)
	// An ack wait of 1.2 s: an event delivered at 0 that is not handed
	// back a fresh ack wait when it gets its slot (0.8 s) is redelivered
	// at 1.2 s, while its call runs until 1.6 s.
	sub, err := OnChangeFunc(ctx, e, store, Trigger{Scope: "q", FunctionID: "local::slow"},
		func(ctx context.Context, ev Event) error {
			mu.Lock()
			runs[ev.Key]++
			mu.Unlock()
			time.Sleep(call)
			done <- struct{}{}
			return nil
		}, WithConcurrency(slots), WithCallTimeout(time.Second), WithAckWait(1200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Stop)
	// Every slot busy, as with calls that end together.
	for range slots {
		sub.sem <- struct{}{}
	}
	keys := []string{"a", "b", "c", "d"}
	for _, k := range keys {
		if _, _, err := store.Set(ctx, "q", k, 1); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(wait)
	for range slots {
		<-sub.sem
	}
	for range keys {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("events not handled")
		}
	}
	// A redelivery comes at 1.2 s and runs once a slot frees (1.6 s).
	time.Sleep(2 * call)
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		if runs[k] != 1 {
			t.Fatalf("runs = %v, want each event once", runs)
		}
	}
}

// TestTriggerBackoff: the delay doubles from base up to max, and a max
// near the largest Duration (no cap, in effect) never overflows into a
// delay of zero or less, which redelivered at once, for ever.
func TestTriggerBackoff(t *testing.T) {
	t.Parallel()
	const huge = time.Duration(math.MaxInt64)
	tests := []struct {
		base, max time.Duration
		n         uint64
		want      time.Duration
	}{
		{time.Second, time.Minute, 0, time.Second},
		{time.Second, time.Minute, 1, time.Second},
		{time.Second, time.Minute, 2, 2 * time.Second},
		{time.Second, time.Minute, 6, 32 * time.Second},
		{time.Second, time.Minute, 7, time.Minute},
		{time.Second, time.Minute, math.MaxUint64, time.Minute},
		{500 * time.Millisecond, huge, 35, 500 * time.Millisecond << 34},
		{500 * time.Millisecond, huge, 36, huge},
		{500 * time.Millisecond, huge, 1000, huge},
		{1, huge, 63, 1 << 62},
		{1, huge, 64, huge},
	}
	for _, tt := range tests {
		o := defaultTriggerOptions()
		if err := WithBackoff(tt.base, tt.max)(&o); err != nil {
			t.Fatal(err)
		}
		if got := o.backoff(tt.n); got != tt.want {
			t.Errorf("backoff(%v, %v, %d) = %v, want %v", tt.base, tt.max, tt.n, got, tt.want)
		}
	}
}

// TestLedger: a claimed event is running until released; one released as
// finished is reported finished until the floor passes it; the memory is
// bounded, forgetting the oldest first.
func TestLedger(t *testing.T) {
	t.Parallel()
	l := newLedger(10)
	if fin, run := l.claim(11); fin || run != nil {
		t.Fatal("fresh event not claimable")
	}
	fin, run := l.claim(11)
	if fin || run == nil {
		t.Fatal("running event claimable twice")
	}
	l.release(11, true)
	select {
	case <-run:
	default:
		t.Fatal("release did not wake the waiter")
	}
	if fin, _ := l.claim(11); !fin {
		t.Fatal("finished event not reported finished")
	}
	if _, run := l.claim(12); run != nil {
		t.Fatal("event 12 not claimable")
	}
	l.release(12, false) // failed: may run again
	if fin, run := l.claim(12); fin || run != nil {
		t.Fatal("failed event not claimable again")
	}
	l.release(12, false)
	l.raiseFloor(11)
	if len(l.finished) != 0 || l.floorSeq() != 11 {
		t.Fatalf("finished %v floor %d after raising the floor to 11", l.finished, l.floorSeq())
	}
	l.raiseFloor(5) // never lowered
	if l.floorSeq() != 11 {
		t.Fatalf("floor lowered to %d", l.floorSeq())
	}
	for seq := uint64(100); seq < 100+ledgerMax+1; seq++ {
		l.claim(seq)
		l.release(seq, true)
	}
	if n := len(l.finished); n > ledgerMax {
		t.Fatalf("%d finished events remembered, max %d", n, ledgerMax)
	}
	if fin, _ := l.claim(100); fin {
		t.Fatal("oldest event kept over the newest")
	}
	if fin, _ := l.claim(100 + ledgerMax); !fin {
		t.Fatal("newest event forgotten")
	}
}
