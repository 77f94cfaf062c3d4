package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/iii-on-nats/iii/engine/heapfloor"
)

// addHeapFloorFlag declares --heap-floor-mib (engine/heapfloor) on f.
func addHeapFloorFlag(f *pflag.FlagSet, dst *int) {
	f.IntVar(dst, "heap-floor-mib", heapfloor.DefaultFloor>>20,
		"the garbage collector's floor of headroom in MiB: a small heap is collected only once it grew by this much (0: off; GOGC set: off)")
}

// startHeapFloor arms the floor of mib MiB (none for 0) and returns what
// disarms it.
func startHeapFloor(mib int, logger *slog.Logger) (func(), error) {
	if err := checkHeapFloor(mib); err != nil {
		return nil, err
	}
	if mib == 0 {
		return func() {}, nil
	}
	return heapfloor.Start(heapfloor.WithFloor(uint64(mib)<<20), heapfloor.WithLogger(logger)), nil
}

// maxHeapFloorMiB bounds --heap-floor-mib at a TiB: far past any heap
// this floor helps, and far from wrapping around once shifted into bytes.
const maxHeapFloorMiB = 1 << 20

// checkHeapFloor refuses a negative --heap-floor-mib, or one past a TiB.
func checkHeapFloor(mib int) error {
	if mib < 0 || mib > maxHeapFloorMiB {
		return fmt.Errorf("--heap-floor-mib %d: want 0 (off) to %d", mib, maxHeapFloorMiB)
	}
	return nil
}
