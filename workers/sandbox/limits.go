package sandbox

import (
	"fmt"
	"time"
)

// Limits are the resource limits of one sandbox, shared by its execs. In a
// request a zero (or absent) field means the node's default; in a record
// and a response every field is the effective value.
type Limits struct {
	// CPUSeconds bounds the CPU time of each process of an exec
	// (RLIMIT_CPU: SIGXCPU at the limit, SIGKILL a second later).
	CPUSeconds int `json:"cpu_seconds,omitempty"`
	// MemoryMB bounds the memory of all processes of the sandbox together
	// (cgroup memory limit; RLIMIT_AS per process when no cgroup is
	// writable). Files in the sandbox's private /tmp count too.
	MemoryMB int `json:"memory_mb,omitempty"`
	// Pids bounds the number of tasks (processes and threads) of the
	// sandbox together, bubblewrap's own two included (cgroup pids.max).
	Pids int `json:"pids,omitempty"`
	// DiskMB bounds each file an exec writes (RLIMIT_FSIZE) and the
	// workdir's total usage: watched while an exec runs (one that passes
	// it is stopped), checked after it (over it, the next exec is
	// cleanup-only: no file may grow) and before each fs::write or
	// fs::edit that grows it.
	DiskMB int `json:"disk_mb,omitempty"`
	// WallMs is the wall-clock timeout of an exec (an exec's timeout_ms
	// may only shorten it).
	WallMs int `json:"wall_ms,omitempty"`
}

// Wall is WallMs as a duration.
func (l Limits) Wall() time.Duration { return time.Duration(l.WallMs) * time.Millisecond }

// DefaultLimits are the node's defaults unless [WithDefaultLimits] or the
// default_* settings change them.
var DefaultLimits = Limits{CPUSeconds: 60, MemoryMB: 1024, Pids: 256, DiskMB: 1024, WallMs: 120_000}

// MaxLimits are the node's maxima unless [WithMaxLimits] or the max_*
// settings change them.
var MaxLimits = Limits{CPUSeconds: 3600, MemoryMB: 16 << 10, Pids: 4096, DiskMB: 100 << 10, WallMs: 600_000}

// MinLimits are the smallest limits a sandbox may have: below them
// bubblewrap itself does not start.
var MinLimits = Limits{CPUSeconds: 1, MemoryMB: 16, Pids: 8, DiskMB: 1, WallMs: 100}

// limitField is one field of [Limits] by name, for validation and
// messages.
type limitField struct {
	name string
	get  func(*Limits) *int
}

var limitFields = []limitField{
	{"cpu_seconds", func(l *Limits) *int { return &l.CPUSeconds }},
	{"memory_mb", func(l *Limits) *int { return &l.MemoryMB }},
	{"pids", func(l *Limits) *int { return &l.Pids }},
	{"disk_mb", func(l *Limits) *int { return &l.DiskMB }},
	{"wall_ms", func(l *Limits) *int { return &l.WallMs }},
}

// resolve fills the zero fields of req from def and checks every field is
// within [MinLimits] and max. The error names the field and the range.
func (req Limits) resolve(def, max Limits) (Limits, error) {
	out := req
	for _, f := range limitFields {
		v := f.get(&out)
		if *v == 0 {
			*v = *f.get(&def)
		}
		lo, hi := *f.get(&MinLimits), *f.get(&max)
		if *v < lo || *v > hi {
			return Limits{}, fmt.Errorf("limits.%s %d is out of range (%d to %d)", f.name, *f.get(&req), lo, hi)
		}
	}
	return out, nil
}

// checkLimitSet checks a set of defaults or maxima given to the worker:
// every field within [MinLimits] and the hard ceiling.
func checkLimitSet(kind string, l Limits) error {
	for _, f := range limitFields {
		v, lo, hi := *f.get(&l), *f.get(&MinLimits), *f.get(&hardMax)
		if v < lo || v > hi {
			return fmt.Errorf("%s %s %d is out of range (%d to %d)", kind, f.name, v, lo, hi)
		}
	}
	return nil
}

// hardMax bounds what settings may configure: memory and disk fit an int
// of bytes everywhere, the wall clock a day.
var hardMax = Limits{CPUSeconds: 86_400, MemoryMB: 1 << 20, Pids: 1 << 22, DiskMB: 1 << 24, WallMs: 86_400_000}
