package heapfloor

import (
	"math"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// limitShare is how much of a memory limit the floor may take: a node in
// a container of 128 MiB gets a floor of 32 MiB, not 64.
const limitShare = 4

// memoryLimit is the lowest of the runtime's memory limit (GOMEMLIMIT,
// debug.SetMemoryLimit) and the cgroup's, false when there is none.
func memoryLimit() (uint64, bool) {
	lim, ok := cgroupLimit(os.ReadFile)
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 && (!ok || uint64(l) < lim) {
		lim, ok = uint64(l), true
	}
	return lim, ok
}

// cgroupLimit is the memory limit of the cgroup the process runs in, the
// lowest on the way from its own group up to the root (a systemd unit's
// MemoryMax= is on the unit's group, a container's on its root as the
// container sees it), false when there is none. cgroup v2 first ("0::"
// in /proc/self/cgroup, memory.max), then v1 (the memory controller,
// memory.limit_in_bytes).
func cgroupLimit(read func(string) ([]byte, error)) (uint64, bool) {
	data, err := read("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	var v2, v1 string
	found2, found1 := false, false
	for _, line := range strings.Split(string(data), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		switch {
		case id == "0" && ctrls == "":
			v2, found2 = path, true
		case slices.Contains(strings.Split(ctrls, ","), "memory"):
			v1, found1 = path, true
		}
	}
	if found2 {
		if l, ok := lowestOnPath(read, "/sys/fs/cgroup", v2, "memory.max"); ok {
			return l, true
		}
	}
	if found1 {
		return lowestOnPath(read, "/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes")
	}
	return 0, false
}

// lowestOnPath reads file in root/path and in every parent of it up to
// root, and returns the lowest limit found.
func lowestOnPath(read func(string) ([]byte, error), root, path, file string) (uint64, bool) {
	lim, ok := uint64(0), false
	p := "/" + strings.Trim(path, "/")
	for {
		if data, err := read(strings.TrimSuffix(root+p, "/") + "/" + file); err == nil {
			if l, found := parseLimit(string(data)); found && (!ok || l < lim) {
				lim, ok = l, true
			}
		}
		if p == "/" {
			return lim, ok
		}
		p = p[:strings.LastIndex(p, "/")]
		if p == "" {
			p = "/"
		}
	}
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
