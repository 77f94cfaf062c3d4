package heapfloor

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name        string
		live, floor uint64
		base, want  int
	}{
		{"small heap gets the floor", 20 * mib, 128 * mib, 100, 640},
		{"rounded up", 30 * mib, 128 * mib, 100, 427},
		{"tiny heap gets at most MaxPercent", 10 * mib, 128 * mib, 100, MaxPercent},
		{"at the crossing", 128 * mib, 128 * mib, 100, 100},
		{"large heap keeps base", 500 * mib, 128 * mib, 100, 100},
		{"just below the crossing", 127 * mib, 128 * mib, 100, 101},
		{"base 200 crossing", 64 * mib, 128 * mib, 200, 200},
		{"base 200 small heap", 32 * mib, 128 * mib, 200, 400},
		{"no live heap counts as 1 MiB", 0, 8 * mib, 100, 800},
		{"collector off", 10 * mib, 128 * mib, -1, -1},
		{"no floor", 10 * mib, 0, 100, 100},
		{"huge floor is capped", 1 * mib, 1 << 62, 100, MaxPercent},
		{"base above MaxPercent stays", 1 * mib, 1 << 62, 2000, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percent(tc.live, tc.floor, tc.base); got != tc.want {
				t.Errorf("Percent(%d, %d, %d) = %d, want %d", tc.live, tc.floor, tc.base, got, tc.want)
			}
		})
	}
}

// fakeGC records the percents set and serves a live heap the test moves.
type fakeGC struct {
	mu   sync.Mutex
	pct  int
	sets []int
	live atomic.Uint64
}

func (f *fakeGC) set(p int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.pct
	f.pct = p
	f.sets = append(f.sets, p)
	return old
}

func (f *fakeGC) percent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pct
}

func (f *fakeGC) options(env map[string]string) options {
	return options{
		floor:  100 << 20,
		logger: nil,
		env: func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		},
		set:  f.set,
		live: f.live.Load,
	}
}

// The tuner follows the live heap after every collection, and stop puts
// the configured percent back. Not parallel: it holds the process's one
// tuner slot.
func TestStartFollowsCollections(t *testing.T) {
	f := &fakeGC{pct: 100}
	f.live.Store(10 << 20)
	o := f.options(nil)
	o.logger = discard()
	stop := start(o)
	if got := Armed(); got != o.floor {
		t.Errorf("Armed() = %d, want %d", got, o.floor)
	}
	// The first tuning waits for a collection.
	if got := f.percent(); got != 100 {
		t.Fatalf("percent before a collection: %d, want 100", got)
	}
	f.live.Store(25 << 20)
	waitPercent(t, f, 400)
	// A second tuner in the process does nothing, not even read the
	// percent: reading sets it for a moment (to 100 here, undoing the
	// armed tuner's 400 until it was set back).
	g := &fakeGC{pct: 100}
	og := g.options(nil)
	og.logger = discard()
	start(og)()
	if len(g.sets) != 0 {
		t.Errorf("a second tuner set the percent: %v", g.sets)
	}
	f.live.Store(400 << 20)
	waitPercent(t, f, 100)
	f.live.Store(50 << 20)
	waitPercent(t, f, 200)
	stop()
	if got := f.percent(); got != 100 {
		t.Errorf("percent after stop: %d, want 100", got)
	}
	if got := Armed(); got != 0 {
		t.Errorf("Armed() after stop = %d", got)
	}
	n := len(f.sets)
	runtime.GC()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if len(f.sets) != n {
		t.Errorf("the tuner set the percent after stop: %v", f.sets[n:])
	}
	stop() // twice is fine
}

// waitPercent collects until the tuner (run by a finalizer after a
// collection) has set want.
func waitPercent(t *testing.T, f *fakeGC, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.percent() != want {
		if time.Now().After(deadline) {
			t.Fatalf("percent %d, want %d (sets %v)", f.percent(), want, f.sets)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

func TestStartLeavesOthersAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		pct   int
		floor uint64
	}{
		{"GOGC set", map[string]string{"GOGC": "200"}, 100, 100 << 20},
		{"GOGC off", map[string]string{"GOGC": "off"}, -1, 100 << 20},
		{"GOGC 0", map[string]string{"GOGC": "0"}, 0, 100 << 20},
		{"collector off by the program", nil, -1, 100 << 20},
		{"no floor", nil, 100, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeGC{pct: tc.pct}
			f.live.Store(10 << 20)
			o := f.options(tc.env)
			o.logger = discard()
			o.floor = tc.floor
			stop := start(o)
			defer stop()
			if got := f.percent(); got != tc.pct {
				t.Errorf("percent %d, want %d left alone", got, tc.pct)
			}
			if active.Load() {
				t.Error("the tuner slot is taken")
			}
		})
	}
}

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"max\n", 0, false},
		{"134217728\n", 128 << 20, true},
		{"9223372036854771712\n", 0, false}, // cgroup v1: no limit
		{"0", 0, false},
		{"garbage", 0, false},
		{"", 0, false},
	} {
		got, ok := parseLimit(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseLimit(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// A memory limit caps the floor at a quarter of it; no limit leaves it.
func TestFloorUnderALimit(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name  string
		limit uint64
		has   bool
		want  int // percent once 20 MiB are live, floor 64 MiB asked
	}{
		{"no limit", 0, false, 320},
		{"1 GiB", 1024 * mib, true, 320},
		{"128 MiB container", 128 * mib, true, 160},
		{"a limit too small for any floor", 40 * mib, true, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeGC{pct: 100}
			f.live.Store(20 * mib)
			o := f.options(nil)
			o.logger = discard()
			o.floor = 64 * mib
			o.limit = func() (uint64, bool) { return tc.limit, tc.has }
			stop := start(o)
			defer stop()
			waitPercent(t, f, tc.want)
		})
	}
}

// Whatever a cgroup file holds, parseLimit does not panic, and a limit it
// accepts is a plausible one.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"max\n", "134217728\n", "9223372036854771712\n", "0", "-1", " 42 ", "1e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := parseLimit(s)
		if ok && (n == 0 || n >= 1<<62) {
			t.Errorf("parseLimit(%q) accepted %d", s, n)
		}
		if !ok && n != 0 {
			t.Errorf("parseLimit(%q) refused but gave %d", s, n)
		}
	})
}

// Percent never sets less than base, nor more than MaxPercent unless base
// is more, and keeps base once the heap's own growth covers the floor.
func FuzzPercent(f *testing.F) {
	f.Add(uint64(20<<20), uint64(64<<20), 100)
	f.Add(uint64(0), uint64(1<<62), 50)
	f.Add(uint64(1<<40), uint64(64<<20), 300)
	f.Fuzz(func(t *testing.T, live, floor uint64, base int) {
		p := Percent(live, floor, base)
		switch {
		case base < 0:
			if p != base {
				t.Errorf("Percent(%d, %d, %d) = %d: the collector off must stay off", live, floor, base, p)
			}
		case p < base:
			t.Errorf("Percent(%d, %d, %d) = %d < base", live, floor, base, p)
		case p > max(base, MaxPercent):
			t.Errorf("Percent(%d, %d, %d) = %d > MaxPercent", live, floor, base, p)
		}
	})
}

func TestCgroupLimit(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  uint64
		ok    bool
	}{
		{"v2 container", map[string]string{
			"/proc/self/cgroup":         "0::/\n",
			"/sys/fs/cgroup/memory.max": "134217728\n",
		}, 128 * mib, true},
		{"v2 systemd unit with MemoryMax", map[string]string{
			"/proc/self/cgroup": "0::/system.slice/iii.service\n",
			"/sys/fs/cgroup/system.slice/iii.service/memory.max": "536870912\n",
			"/sys/fs/cgroup/system.slice/memory.max":             "max\n",
		}, 512 * mib, true},
		{"v2 a parent's limit is lower", map[string]string{
			"/proc/self/cgroup": "0::/system.slice/iii.service\n",
			"/sys/fs/cgroup/system.slice/iii.service/memory.max": "max\n",
			"/sys/fs/cgroup/system.slice/memory.max":             "268435456\n",
		}, 256 * mib, true},
		{"v2 no limit", map[string]string{
			"/proc/self/cgroup": "0::/user.slice/session-1.scope\n",
			"/sys/fs/cgroup/user.slice/session-1.scope/memory.max": "max\n",
		}, 0, false},
		{"v1 memory controller", map[string]string{
			"/proc/self/cgroup": "12:pids:/docker/abc\n9:memory:/docker/abc\n1:name=systemd:/docker/abc\n",
			"/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "268435456\n",
		}, 256 * mib, true},
		{"v1 no limit", map[string]string{
			"/proc/self/cgroup":                           "9:memory,cpu:/\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, 0, false},
		{"hybrid: v2 without a limit, v1 with one", map[string]string{
			"/proc/self/cgroup":                             "9:memory:/a\n0::/a\n",
			"/sys/fs/cgroup/memory/a/memory.limit_in_bytes": "67108864\n",
		}, 64 * mib, true},
		{"no cgroup file", map[string]string{}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := func(name string) ([]byte, error) {
				if s, ok := tc.files[name]; ok {
					return []byte(s), nil
				}
				return nil, os.ErrNotExist
			}
			got, ok := cgroupLimit(read)
			if got != tc.want || ok != tc.ok {
				t.Errorf("cgroupLimit = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// A GOGC the runtime ignores (it collects at the default 100) is no
// operator's setting: the floor applies. Before, an empty GOGC (a compose
// file's unset ${GOGC}) turned the floor off. Not parallel: it holds the
// process's one tuner slot.
func TestStartIgnoredGOGC(t *testing.T) {
	for _, v := range []string{"", "abc", " 200", "1e3", "99999999999"} {
		t.Run(v, func(t *testing.T) {
			f := &fakeGC{pct: 100}
			f.live.Store(10 << 20)
			o := f.options(map[string]string{"GOGC": v})
			o.logger = discard()
			stop := start(o)
			defer stop()
			if got := Armed(); got != o.floor {
				t.Fatalf("GOGC=%q: Armed() = %d, want %d", v, got, o.floor)
			}
			waitPercent(t, f, MaxPercent)
		})
	}
}
