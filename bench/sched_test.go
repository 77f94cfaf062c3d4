package bench

import (
	"math"
	"testing"
	"time"
)

func TestSchedSince(t *testing.T) {
	t.Parallel()
	buckets := []float64{math.Inf(-1), 0, 1e-6, 1e-5, 1e-4, math.Inf(1)}
	zero := schedHist{counts: make([]uint64, 5), buckets: buckets}
	for _, c := range []struct {
		name   string
		before schedHist
		after  schedHist
		turns  int
		want   Sched
	}{
		{
			name:   "one bucket",
			before: zero,
			after:  schedHist{counts: []uint64{0, 0, 10, 0, 0}, buckets: buckets},
			turns:  5,
			// ten wake-ups of 1–10 µs, midpoint 5.5 µs
			want: Sched{WakeupsPerTurn: 2 * schedSampling, MeanUs: 5.5, P50Us: 10, P90Us: 10, P99Us: 10, WaitPerTurnUs: 11 * schedSampling},
		},
		{
			name:   "a difference, a tail and the open bucket",
			before: schedHist{counts: []uint64{0, 5, 5, 0, 0}, buckets: buckets},
			after:  schedHist{counts: []uint64{0, 95, 5, 4, 1}, buckets: buckets},
			turns:  10,
			// 90 × 0.5 µs + 4 × 55 µs + 1 × 100 µs (the open bucket's lower bound)
			want: Sched{WakeupsPerTurn: 9.5 * schedSampling, MeanUs: (45 + 220 + 100) / 95.0, P50Us: 1, P90Us: 1, P99Us: 100, WaitPerTurnUs: 36.5 * schedSampling},
		},
		{name: "nothing happened", before: zero, after: zero, turns: 3},
		{name: "no turns", before: zero, after: schedHist{counts: []uint64{0, 1, 0, 0, 0}, buckets: buckets}},
		{name: "no histogram", turns: 1},
		{name: "mismatched", before: schedHist{counts: []uint64{1}}, after: zero, turns: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := schedSince(c.before, c.after, c.turns)
			near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
			if !near(got.WakeupsPerTurn, c.want.WakeupsPerTurn) || !near(got.MeanUs, c.want.MeanUs) ||
				!near(got.P50Us, c.want.P50Us) || !near(got.P90Us, c.want.P90Us) || !near(got.P99Us, c.want.P99Us) ||
				!near(got.WaitPerTurnUs, c.want.WaitPerTurnUs) {
				t.Fatalf("schedSince = %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestReadSched: the runtime keeps the histogram, and it counts goroutines
// that were scheduled. 100 goroutines started and 200 blocking receives
// are ~300 transitions, of which the runtime samples one in eight (about
// 37); fewer than 100 estimated would mean a sample of under 13.
func TestReadSched(t *testing.T) {
	t.Parallel()
	before := readSched()
	if len(before.counts) == 0 {
		t.Fatalf("the runtime has no %s histogram", schedMetric)
	}
	done := make(chan struct{})
	for range 100 {
		go func() { done <- struct{}{} }()
		<-done
	}
	time.Sleep(time.Millisecond)
	if s := schedSince(before, readSched(), 1); s.WakeupsPerTurn < 100 {
		t.Fatalf("100 goroutines scheduled, the histogram counted %.0f", s.WakeupsPerTurn)
	}
}
