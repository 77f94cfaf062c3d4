package bench

import (
	"math"
	"runtime"
	"testing"
)

func TestGCSince(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		before, after gcSample
		want          GC
	}{
		{"nothing", gcSample{ok: true}, gcSample{ok: true}, GC{}},
		{"a tenth of the busy CPU",
			gcSample{cycles: 3, gc: 1, total: 10, idle: 2, ok: true},
			gcSample{cycles: 8, gc: 2, total: 24, idle: 6, ok: true},
			GC{Cycles: 5, CPUPercent: 100.0 / 10}},
		{"unreadable", gcSample{}, gcSample{cycles: 4, ok: true}, GC{}},
		{"counter went back", gcSample{cycles: 4, ok: true}, gcSample{cycles: 3, ok: true}, GC{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := gcSince(tc.before, tc.after)
			if got.Cycles != tc.want.Cycles || math.Abs(got.CPUPercent-tc.want.CPUPercent) > 1e-9 {
				t.Errorf("gcSince = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The runtime's counters move with a collection.
func TestReadGC(t *testing.T) {
	before := readGC()
	runtime.GC()
	after := readGC()
	if !before.ok || !after.ok {
		t.Fatal("the runtime's GC metrics are not readable")
	}
	if g := gcSince(before, after); g.Cycles < 1 {
		t.Errorf("a forced collection counted %d cycles", g.Cycles)
	}
}
