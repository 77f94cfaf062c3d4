package compaction

import (
	"testing"
	"time"
)

// TestBusyDelay: a turn_end that finds every slot busy comes again after
// waits doubling from a second to a minute, so that its deliveries cover
// minutes of busy slots; at a second apiece they covered 20 seconds, and
// the server then dropped the event without a word.
func TestBusyDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    uint64
		want time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{6, 32 * time.Second}, {7, time.Minute}, {19, time.Minute}, {1 << 40, time.Minute},
	} {
		if got := busyDelay(tc.n); got != tc.want {
			t.Errorf("busyDelay(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	var total time.Duration
	for n := uint64(1); n < triggerMaxDeliver; n++ {
		total += busyDelay(n)
	}
	if total < 10*time.Minute {
		t.Fatalf("the deliveries cover %v of busy slots, want 10 minutes at least", total)
	}
}
