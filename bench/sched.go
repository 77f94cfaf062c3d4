package bench

import (
	"math"
	"runtime/metrics"
)

// Sched is how long the process's goroutines waited for a core during a
// phase: the runtime's histogram of scheduling latencies (the time from a
// goroutine becoming runnable to it running), server included. The
// runtime samples one transition in [schedSampling] into it, so counts and
// sums are scaled by that; the distribution is as measured. On a
// chain of round trips each hop wakes a goroutine or two, and when both
// cores are busy each wake-up waits: a share of a turn's latency that no
// one link of the turn shows.
type Sched struct {
	// WakeupsPerTurn is the goroutines scheduled per turn (estimated from
	// the sample).
	WakeupsPerTurn float64 `json:"wakeups_per_turn"`
	// MeanUs, P50Us, P90Us and P99Us describe one wake-up's wait, in µs
	// (percentiles are bucket upper bounds).
	MeanUs float64 `json:"mean_us"`
	P50Us  float64 `json:"p50_us"`
	P90Us  float64 `json:"p90_us"`
	P99Us  float64 `json:"p99_us"`
	// WaitPerTurnUs is the waits of a turn's wake-ups summed, in µs
	// (estimated from the sample). Goroutines wait side by side, and many
	// are off the turn's critical path, so this can exceed the turn's
	// latency: it says how crowded the cores are, not what a turn lost.
	WaitPerTurnUs float64 `json:"wait_per_turn_us"`
}

const schedMetric = "/sched/latencies:seconds"

// schedSampling is the runtime's sampling period of the histogram
// (gTrackingPeriod in runtime/runtime2.go: one goroutine transition in
// eight is timed).
const schedSampling = 8

// schedHist is a copy of the runtime's scheduling-latency histogram.
type schedHist struct {
	counts  []uint64
	buckets []float64
}

func readSched() schedHist {
	s := []metrics.Sample{{Name: schedMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedHist{}
	}
	h := s[0].Value.Float64Histogram()
	return schedHist{counts: append([]uint64(nil), h.Counts...), buckets: h.Buckets}
}

// schedSince is what happened between before and after, per turn.
func schedSince(before, after schedHist, turns int) Sched {
	if len(after.counts) == 0 || len(before.counts) != len(after.counts) || len(after.buckets) != len(after.counts)+1 || turns <= 0 {
		return Sched{}
	}
	d := make([]uint64, len(after.counts))
	var n uint64
	var sum float64
	for i := range d {
		d[i] = after.counts[i] - before.counts[i]
		n += d[i]
		lo, hi := after.buckets[i], after.buckets[i+1]
		switch {
		case math.IsInf(lo, -1):
			lo = 0
		case math.IsInf(hi, 1):
			hi = lo
		}
		sum += float64(d[i]) * (lo + hi) / 2
	}
	if n == 0 {
		return Sched{}
	}
	pct := func(p float64) float64 {
		var acc uint64
		for i, c := range d {
			acc += c
			if float64(acc) >= p*float64(n) {
				hi := after.buckets[i+1]
				if math.IsInf(hi, 1) {
					hi = after.buckets[i]
				}
				return hi * 1e6
			}
		}
		return 0
	}
	return Sched{
		WakeupsPerTurn: schedSampling * float64(n) / float64(turns),
		MeanUs:         sum / float64(n) * 1e6,
		P50Us:          pct(0.50),
		P90Us:          pct(0.90),
		P99Us:          pct(0.99),
		WaitPerTurnUs:  schedSampling * sum / float64(turns) * 1e6,
	}
}
