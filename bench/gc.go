package bench

import "runtime/metrics"

// GC is what the garbage collector did during a phase, from the runtime's
// own counters (runtime/metrics), server included.
type GC struct {
	// Cycles is the collections that ended in the phase.
	Cycles uint64 `json:"cycles"`
	// CPUPercent is the collector's share of the process's CPU time in the
	// phase (background marking, assists and pauses; the runtime's
	// estimate, "/cpu/classes/gc/total:cpu-seconds" against
	// "/cpu/classes/total:cpu-seconds" less idle time).
	CPUPercent float64 `json:"cpu_percent"`
}

var gcMetrics = []string{
	"/gc/cycles/total:gc-cycles",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/cpu/classes/idle:cpu-seconds",
}

// gcSample is the runtime's GC counters at one moment.
type gcSample struct {
	cycles          uint64
	gc, total, idle float64
	ok              bool
}

func readGC() gcSample {
	s := make([]metrics.Sample, len(gcMetrics))
	for i, n := range gcMetrics {
		s[i].Name = n
	}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return gcSample{}
	}
	f := func(i int) float64 {
		if s[i].Value.Kind() != metrics.KindFloat64 {
			return 0
		}
		return s[i].Value.Float64()
	}
	return gcSample{cycles: s[0].Value.Uint64(), gc: f(1), total: f(2), idle: f(3), ok: true}
}

// gcSince is what the collector did between before and after.
func gcSince(before, after gcSample) GC {
	if !before.ok || !after.ok || after.cycles < before.cycles {
		return GC{}
	}
	g := GC{Cycles: after.cycles - before.cycles}
	if busy := (after.total - after.idle) - (before.total - before.idle); busy > 0 {
		g.CPUPercent = 100 * (after.gc - before.gc) / busy
	}
	return g
}
