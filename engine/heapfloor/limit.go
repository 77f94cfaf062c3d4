package heapfloor

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// limitShare is how much of a memory limit the floor may take: a node in
// a container of 128 MiB gets a floor of 32 MiB, not 64.
const limitShare = 4

// cgroupLimitFiles hold the memory limit of the cgroup the process runs
// in, as a container sees it: cgroup v2, then v1. "max" (v2) or a number
// near 2^63 (v1) means none.
var cgroupLimitFiles = []string{
	"/sys/fs/cgroup/memory.max",
	"/sys/fs/cgroup/memory/memory.limit_in_bytes",
}

// memoryLimit is the lowest of the runtime's memory limit (GOMEMLIMIT,
// debug.SetMemoryLimit) and the cgroup's, false when there is none.
func memoryLimit() (uint64, bool) {
	lim, ok := uint64(0), false
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		lim, ok = uint64(l), true
	}
	for _, f := range cgroupLimitFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if l, found := parseLimit(string(data)); found && (!ok || l < lim) {
			lim, ok = l, true
		}
		break
	}
	return lim, ok
}

// parseLimit reads a cgroup memory limit file: false for "max", for a
// value that does not parse and for v1's "no limit" (anything at or above
// 2^62).
func parseLimit(s string) (uint64, bool) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}

// capFloor bounds floor by a share of the memory limit, when there is one.
func capFloor(floor, limit uint64, hasLimit bool) uint64 {
	if !hasLimit {
		return floor
	}
	return min(floor, limit/limitShare)
}
