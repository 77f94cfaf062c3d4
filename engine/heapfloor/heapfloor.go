package heapfloor

import (
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
)

// DefaultFloor is the headroom a small heap gets by default.
const DefaultFloor = 64 << 20

// MaxPercent bounds the percent the floor sets: a heap that is nearly
// empty grows at most tenfold before it is collected, whatever the floor.
const MaxPercent = 1000

// The runtime's heap goal is live + (live + stacks + globals) × percent
// / 100, with the live heap the last collection marked, the stack bytes it
// scanned and the scannable globals: the percent applies to their sum.
var goalMetrics = []string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

// Option configures [Start].
type Option func(*options)

type options struct {
	floor  uint64
	logger *slog.Logger
	env    func(string) (string, bool)
	set    func(int) int
	live   func() uint64
	limit  func() (uint64, bool)
}

// WithFloor sets the headroom (default [DefaultFloor]); 0 makes Start do
// nothing.
func WithFloor(bytes uint64) Option { return func(o *options) { o.floor = bytes } }

// WithLogger logs what Start decided (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// active guards against two tuners in one process.
var active atomic.Bool

// floorNow is the floor of the armed tuner, 0 when none is armed.
var floorNow atomic.Uint64

// Armed is the floor of the tuner armed in this process, 0 when none is.
func Armed() uint64 { return floorNow.Load() }

// Start arms the tuner and returns the function that disarms it and puts
// the GC percent back. The floor is at most a quarter of the process's
// memory limit, the lowest of GOMEMLIMIT's and its cgroup's (its own
// group's or a parent's: a container's limit, a systemd unit's
// MemoryMax=). It does nothing (and returns a no-op) when the floor is 0,
// when GOGC is set in the environment to a value the runtime takes ("off"
// or a number), when the collector is off, or when a tuner is armed
// already.
func Start(opts ...Option) (stop func()) {
	o := options{
		floor:  DefaultFloor,
		logger: slog.New(slog.DiscardHandler),
		env:    os.LookupEnv,
		set:    debug.SetGCPercent,
		live:   readLive,
		limit:  memoryLimit,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return start(o)
}

func start(o options) func() {
	if o.limit != nil {
		lim, ok := o.limit()
		if f := capFloor(o.floor, lim, ok); f != o.floor {
			o.logger.Info("heap floor lowered to a quarter of the memory limit", "floor_bytes", f, "limit_bytes", lim)
			o.floor = f
		}
	}
	if o.floor == 0 {
		return func() {}
	}
	if v, ok := o.env("GOGC"); ok && gogcApplies(v) {
		o.logger.Debug("heap floor off: GOGC is set", "GOGC", v)
		return func() {}
	}
	// Claimed before the percent is read: reading sets it for a moment,
	// which would undo an armed floor's tuning (a second Start at once).
	if !active.CompareAndSwap(false, true) {
		o.logger.Debug("heap floor off: one is armed already")
		return func() {}
	}
	// Read the percent without changing it.
	base := o.set(100)
	o.set(base)
	if base < 0 {
		active.Store(false)
		o.logger.Debug("heap floor off: the collector is off")
		return func() {}
	}
	// The first tuning waits for a collection: before one, the runtime
	// grows its goal from a minimum heap, not from anything live.
	t := &tuner{o: o, base: base, cur: base}
	floorNow.Store(o.floor)
	t.arm()
	return sync.OnceFunc(func() {
		t.mu.Lock()
		t.stopped = true
		o.set(t.base)
		t.mu.Unlock()
		floorNow.Store(0)
		active.Store(false)
	})
}

// gogcApplies reports whether the runtime takes GOGC's value v as the
// operator's setting, as runtime.readGOGC reads it: "off" or a number.
// Anything else (an empty value, as a compose file's unset ${GOGC}
// leaves, or a typo) it ignores for the default 100: no setting for the
// floor to leave alone.
func gogcApplies(v string) bool {
	if v == "off" {
		return true
	}
	_, err := strconv.ParseInt(v, 10, 32)
	return err == nil
}

type tuner struct {
	o    options
	base int // the percent configured (GOGC's default, or what the program set before Start)

	mu      sync.Mutex
	cur     int
	stopped bool
}

// sentinel is the object whose finalizer tells the tuner a collection
// ran; it must be heap-allocated and large enough not to be batched with
// other tiny objects (tiny objects' finalizers may never run).
type sentinel struct {
	_ *int
	_ [24]byte
}

func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		if t.tune() {
			t.arm()
		}
	})
}

// tune sets the percent for the live heap now; false once stopped.
func (t *tuner) tune() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	if p := Percent(t.o.live(), t.o.floor, t.base); p != t.cur {
		t.o.set(p)
		t.cur = p
	}
	return true
}

// Percent is the GC percent that puts the next collection at
// max(live × (1 + base/100), live + floor): base when base's own goal is
// the larger, else floor as a percent of live, rounded up and at most
// [MaxPercent]. live is what the runtime applies the percent to: the live
// heap plus the stacks and globals it scans. Under 1 MiB it counts as 1
// MiB; a negative base (the collector off) is returned as it is.
func Percent(live, floor uint64, base int) int {
	if base < 0 {
		return base
	}
	live = max(live, 1<<20)
	if floor <= live/100*uint64(base) {
		return base
	}
	p := math.Ceil(float64(floor) * 100 / float64(live))
	return max(int(min(p, MaxPercent)), base)
}

// readLive reads what the GC percent applies to (goalMetrics), 0 when
// the runtime does not say.
func readLive() uint64 {
	s := make([]metrics.Sample, len(goalMetrics))
	for i, name := range goalMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	var sum uint64
	for _, v := range s {
		if v.Value.Kind() != metrics.KindUint64 {
			return 0
		}
		sum += v.Value.Uint64()
	}
	return sum
}
