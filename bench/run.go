package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/heapfloor"
)

// Run starts an embedded single node (file storage) — or cfg.Nodes nodes
// of one NATS cluster, each with the same workers — with the scripted
// provider, the tool bench::noop and the orchestrator, and runs the phases
// cfg asks for, in order: the turns phase, the raw KV put phase on the same
// server(s), the storage floors (the same turns with only their stored
// writes), the idle-sessions phase. It returns what it measured; with a
// turn that failed it returns the Result so far and an error wrapping
// [ErrTurnFailed].
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	res := Result{Env: Env{GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU()},
		Nodes: cfg.Nodes, Replicas: cfg.Replicas}
	res.Env.LoadStart, _ = loadAvg()
	if cfg.HeapFloorMiB >= 0 {
		floor := uint64(heapfloor.DefaultFloor)
		if cfg.HeapFloorMiB > 0 {
			floor = uint64(cfg.HeapFloorMiB) << 20
		}
		defer heapfloor.Start(heapfloor.WithFloor(floor))()
	}
	res.Env.HeapFloorMiB = MiB(int64(heapfloor.Armed()))
	s, err := startStack(ctx, cfg)
	if err != nil {
		return res, fmt.Errorf("bench: start the stack: %w", err)
	}
	defer s.close(context.Background())
	// Warm up: the first run::start discovers the catalog, the first call
	// of each function opens its paths; one turn through each node's
	// client.
	for i, c := range s.clients {
		sid := "warmup"
		if i > 0 {
			sid += "-n" + strconv.Itoa(i+1)
		}
		if _, _, err := s.turn(ctx, c, sid, cfg.TurnTimeout); err != nil {
			return res, fmt.Errorf("bench: warm-up turn: %w", err)
		}
		s.watch.forget(sid)
	}
	var failed error
	if cfg.Sessions > 0 {
		t, err := runTurns(ctx, s, cfg)
		res.Turns = &t
		if err != nil {
			if !errors.Is(err, ErrTurnFailed) {
				return res, err
			}
			failed = err
		}
		if !cfg.SkipKV && failed == nil {
			k, err := runKV(ctx, s, cfg)
			if err != nil {
				return res, err
			}
			res.KV = &k
			if t.TurnsPerSec > 0 {
				res.KVPutsPerTurn = k.PutsPerSec / t.TurnsPerSec
			}
		}
		if !cfg.SkipFloor && failed == nil {
			floors, err := runFloors(ctx, s, cfg)
			if err != nil {
				return res, err
			}
			for i := range floors {
				if floors[i].TurnsPerSec > 0 {
					floors[i].TurnsRatio = t.TurnsPerSec / floors[i].TurnsPerSec
				}
			}
			res.Floor = floors
		}
	}
	if cfg.Idle > 0 && failed == nil {
		i, err := runIdle(ctx, s, cfg)
		res.Idle = &i
		if err != nil {
			if !errors.Is(err, ErrTurnFailed) {
				return res, err
			}
			failed = err
		}
	}
	res.Env.LoadEnd, _ = loadAvg()
	return res, failed
}

// runTurns runs cfg.Sessions sessions of cfg.Turns turns each.
func runTurns(ctx context.Context, s *stack, cfg Config) (TurnsResult, error) {
	t := TurnsResult{Sessions: cfg.Sessions, TurnsPerSession: cfg.Turns, Turns: cfg.Sessions * cfg.Turns}
	before, err := snapshot(s.servers())
	if err != nil {
		return t, err
	}
	events0 := s.watch.events.Load()
	warns0 := s.warns.snapshot()
	t.PeakRSSSinceStart = !resetPeakRSS()

	lat := make([]time.Duration, t.Turns)
	ends := make([]time.Time, t.Turns) // when each turn ended
	var (
		wg       sync.WaitGroup
		failed   atomic.Int64
		retries  atomic.Int64
		firstErr error
		errOnce  sync.Once
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.CPUProfile != nil {
		if err := pprof.StartCPUProfile(cfg.CPUProfile); err != nil {
			return t, fmt.Errorf("bench: cpu profile: %w", err)
		}
	}
	cpu0 := cpuTime()
	sched0 := readSched()
	gc0 := readGC()
	start := time.Now()
	for i := range cfg.Sessions {
		wg.Go(func() {
			sid := "s" + strconv.Itoa(i)
			c := s.clientFor(i)
			defer s.watch.forget(sid)
			for j := range cfg.Turns {
				k := i*cfg.Turns + j
				d, n, err := s.turn(ctx, c, sid, cfg.TurnTimeout)
				lat[k], ends[k] = d, time.Now()
				retries.Add(int64(n))
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
					if d == 0 { // refused or timed out: the session is stuck
						failed.Add(int64(cfg.Turns - j - 1))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	sched1 := readSched()
	gc1 := readGC()
	if cfg.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	events := s.watch.events.Load() - events0
	t.Warnings = since(warns0, s.warns.snapshot())
	t.BusyRetries = int(retries.Load())

	// First and second half of each session's turns: the rate of each half
	// is its turns over the time from the phase start to its last end (first
	// half) and from the first half's last end to the last end (second).
	var firstEnd, lastEnd time.Time
	half := cfg.Turns / 2
	for i := range cfg.Sessions {
		for j := range cfg.Turns {
			e := ends[i*cfg.Turns+j]
			if j < half && e.After(firstEnd) {
				firstEnd = e
			}
			if e.After(lastEnd) {
				lastEnd = e
			}
		}
	}
	if half > 0 && firstEnd.After(start) && lastEnd.After(firstEnd) {
		t.FirstHalfTurnsPerSec = float64(half*cfg.Sessions) / firstEnd.Sub(start).Seconds()
		t.SecondHalfTurnsPerSec = float64((cfg.Turns-half)*cfg.Sessions) / lastEnd.Sub(firstEnd).Seconds()
	}

	if p, err := peakRSS(); err == nil {
		t.PeakRSS = p
	}
	after, err := settledSnapshot(ctx, s.servers(), 2*time.Second)
	if err != nil {
		return t, err
	}
	t.Failed = int(failed.Load())
	t.ElapsedS = elapsed.Seconds()
	t.TurnsPerSec = float64(t.Turns-t.Failed) / elapsed.Seconds()
	t.CPUPercent = 100 * cpu.Seconds() / elapsed.Seconds()
	t.CPUPerTurnUs = float64(cpu.Microseconds()) / float64(max(t.Turns, 1))
	t.Sched = schedSince(sched0, sched1, t.Turns)
	t.GC = gcSince(gc0, gc1)
	if cfg.Turns > 1 {
		first, later := splitFirstTurns(lat, cfg.Sessions, cfg.Turns)
		f, l := summarize(first), summarize(later)
		t.FirstTurnP50Ms, t.FirstTurnP99Ms = ms(f.p50), ms(f.p99)
		t.LaterTurnsP50Ms, t.LaterTurnsP99Ms = ms(l.p50), ms(l.p99)
	}
	ok := lat[:0]
	for _, d := range lat {
		if d > 0 {
			ok = append(ok, d)
		}
		if d >= time.Second {
			t.Over1s++
		}
	}
	l := summarize(ok)
	t.P50Ms, t.P90Ms, t.P99Ms, t.MaxMs, t.MeanMs = ms(l.p50), ms(l.p90), ms(l.p99), ms(l.max), ms(l.mean)
	t.PerTurn = perTurn(before, after, t.Turns, events)
	return t, firstErr
}

// kvBucket is the scratch bucket of the KV phase.
const kvBucket = "iii-bench-scratch"

// runKV measures raw KV puts/s on the same server(s): cfg.KVWriters
// writers, each putting its own key over and over (History 1, file storage,
// cfg.Replicas replicas), like turn records are rewritten. The writers use
// node 1's client.
func runKV(ctx context.Context, s *stack, cfg Config) (KVResult, error) {
	k := KVResult{Writers: cfg.KVWriters, Puts: cfg.KVPuts, ValueSize: cfg.KVValueSize}
	js := s.client.JetStream()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: kvBucket, History: 1, Storage: jetstream.FileStorage, Replicas: cfg.Replicas})
	if err != nil {
		return k, fmt.Errorf("bench: scratch bucket: %w", err)
	}
	defer func() { _ = js.DeleteKeyValue(context.Background(), kvBucket) }()
	val := make([]byte, cfg.KVValueSize)
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	lat := make([]time.Duration, cfg.KVPuts)
	var (
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	start := time.Now()
	for w := range cfg.KVWriters {
		wg.Go(func() {
			key := "w" + strconv.Itoa(w)
			for i := w; i < cfg.KVPuts; i += cfg.KVWriters {
				t0 := time.Now()
				if _, err := kv.Put(ctx, key, val); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("bench: kv put: %w", err) })
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return k, firstErr
	}
	k.ElapsedS = elapsed.Seconds()
	k.PutsPerSec = float64(cfg.KVPuts) / elapsed.Seconds()
	l := summarize(lat)
	k.P50Ms, k.P99Ms = ms(l.p50), ms(l.p99)
	return k, nil
}

// runIdle activates cfg.Idle sessions with one turn each and measures the
// memory they hold while idle and after they passivate.
func runIdle(ctx context.Context, s *stack, cfg Config) (r IdleResult, err error) {
	r = IdleResult{Sessions: cfg.Idle, IdleTimeoutS: cfg.IdleTimeout.Seconds()}
	r.GrainsBefore = s.activeGrains()
	if r.Bytes.RSSBase, r.Bytes.HeapBase, err = settledMemory(); err != nil {
		return r, err
	}
	warns0 := s.warns.snapshot()
	var retries atomic.Int64
	defer func() { r.Warnings = since(warns0, s.warns.snapshot()); r.BusyRetries = int(retries.Load()) }()
	ids := make(chan int)
	var (
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for range min(cfg.IdleWorkers, cfg.Idle) {
		wg.Go(func() {
			for i := range ids {
				sid := "idle" + strconv.Itoa(i)
				_, n, err := s.turn(ctx, s.clientFor(i), sid, cfg.TurnTimeout)
				s.watch.forget(sid)
				retries.Add(int64(n))
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
				}
			}
		})
	}
feed:
	for i := range cfg.Idle {
		select {
		case ids <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(ids)
	wg.Wait()
	if firstErr != nil {
		return r, firstErr
	}
	activated := time.Now()
	r.ActivationS = activated.Sub(start).Seconds()
	r.ActiveGrains = s.activeGrains()
	if r.Bytes.RSSActive, r.Bytes.HeapActive, err = settledMemory(); err != nil {
		return r, err
	}
	if cfg.HeapProfile != nil {
		if err := pprof.Lookup("heap").WriteTo(cfg.HeapProfile, 0); err != nil {
			return r, fmt.Errorf("heap profile: %w", err)
		}
	}
	if cfg.IdleSettle > 0 {
		// Idle: what the turns left in the server has expired; the
		// grains are still active.
		t := time.NewTimer(time.Until(activated.Add(cfg.IdleSettle)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return r, ctx.Err()
		}
		r.IdleSettleS = cfg.IdleSettle.Seconds()
		r.IdleGrains = s.activeGrains()
		if r.Bytes.RSSIdle, r.Bytes.HeapIdle, err = settledMemory(); err != nil {
			return r, err
		}
	}
	// Wait for the grains to passivate: idle timeout after their last
	// message, plus slack for a loaded machine.
	deadline := time.Now().Add(cfg.IdleTimeout + 30*time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for s.activeGrains() > 0 && time.Now().Before(deadline) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	r.PassivationS = time.Since(activated).Seconds()
	r.StillActive = s.activeGrains()
	if r.Bytes.RSSPassive, r.Bytes.HeapPassive, err = settledMemory(); err != nil {
		return r, err
	}
	per10k := func(b, base int64) float64 { return MiB(b-base) * 10_000 / float64(cfg.Idle) }
	r.RSSPer10kActiveMiB = per10k(r.Bytes.RSSActive, r.Bytes.RSSBase)
	r.RSSPer10kPassiveMiB = per10k(r.Bytes.RSSPassive, r.Bytes.RSSBase)
	r.HeapPer10kActiveMiB = per10k(r.Bytes.HeapActive, r.Bytes.HeapBase)
	r.HeapPer10kPassiveMiB = per10k(r.Bytes.HeapPassive, r.Bytes.HeapBase)
	grainsHeap := r.Bytes.HeapActive
	if r.IdleSettleS > 0 {
		r.RSSPer10kIdleMiB = per10k(r.Bytes.RSSIdle, r.Bytes.RSSBase)
		r.HeapPer10kIdleMiB = per10k(r.Bytes.HeapIdle, r.Bytes.HeapBase)
		grainsHeap = r.Bytes.HeapIdle
	}
	if n := r.ActiveGrains - r.GrainsBefore; n > 0 {
		r.GrainsHeapPer10kMiB = MiB(grainsHeap-r.Bytes.HeapPassive) * 10_000 / float64(n)
	}
	return r, nil
}

// settledMemory collects garbage, returns freed memory to the OS and reads
// RSS and the live heap. It collects twice: what sits in a sync.Pool
// (nats-server's message block buffers) survives one collection and is
// dropped at the next, as it would be on any busy process.
func settledMemory() (rssBytes, heapBytes int64, err error) {
	runtime.GC()
	debug.FreeOSMemory()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		heapBytes = int64(sample[0].Value.Uint64())
	}
	rssBytes, err = rss()
	return rssBytes, heapBytes, err
}
