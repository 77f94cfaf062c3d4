package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// TestRunSmall runs the whole suite small: 3 sessions × 2 turns, a short KV
// phase and a short idle phase, and checks the figures are sane.
func TestRunSmall(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var heap bytes.Buffer
	res, err := Run(ctx, Config{
		Sessions: 3, Turns: 2,
		KVWriters: 4, KVPuts: 200,
		Idle: 5, IdleTimeout: time.Second, IdleSettle: 300 * time.Millisecond, IdleWorkers: 5,
		Dir:         t.TempDir(),
		HeapProfile: &heap,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	tr := res.Turns
	if tr == nil || tr.Turns != 6 || tr.Failed != 0 {
		t.Fatalf("turns = %+v", tr)
	}
	if tr.TurnsPerSec <= 0 || tr.P50Ms <= 0 || tr.P99Ms < tr.P50Ms || tr.MaxMs < tr.P99Ms {
		t.Errorf("turn figures: %+v", tr)
	}
	c := tr.PerTurn
	// One turn: the record written several times, a step published, the
	// transcript (user, assistant, function result, assistant) appended
	// and at least a dozen events.
	if c.StreamWrites["KV_iii-turn-state"] < 2 || c.StreamWrites["III_TURN_STEPS"] < 1 ||
		c.StreamWrites["III_SESSION_ENTRIES"] < 4 || c.StreamWrites["III_EVENTS"] < 5 || c.Events < 5 || c.Acks < 1 || c.MsgsIn < c.Writes {
		t.Errorf("per-turn cost: %+v", c)
	}
	if res.KV == nil || res.KV.PutsPerSec <= 0 || res.KVPutsPerTurn <= 0 {
		t.Errorf("kv: %+v, kv puts/turn %v", res.KV, res.KVPutsPerTurn)
	}
	if i := res.Idle; i == nil || i.Sessions != 5 || i.StillActive != 0 || i.ActiveGrains < 5 ||
		i.IdleSettleS != 0.3 || i.Bytes.RSSIdle <= 0 || i.Bytes.HeapIdle <= 0 {
		t.Errorf("idle: %+v", res.Idle)
	}
	// A pprof profile is gzipped protobuf.
	if b := heap.Bytes(); len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("heap profile: %d bytes, not gzipped", len(b))
	}
	if len(res.Floor) != len(FloorPlans) {
		t.Fatalf("storage floors: %+v", res.Floor)
	}
	for i, f := range res.Floor {
		if p := FloorPlans[i]; f.Plan != p.Name || f.WritesPerTurn != p.Writes() || f.Turns != 6 ||
			f.TurnsPerSec <= 0 || f.CPUPerTurnUs <= 0 || f.P99Ms < f.P50Ms || f.TurnsRatio <= 0 {
			t.Errorf("storage floor %d: %+v", i, f)
		}
	}
	// The floor of the turn makes the writes the turn made, stream by
	// stream (update FloorTurn when the turn's writes change), within one
	// write a turn. The session metas it leaves out: a session's
	// creation, its first message and one deferred write per burst of
	// appends, ≈ 1.5 a turn in a run of two turns a session.
	want := floorWrites(FloorTurn)
	for stream, n := range want {
		if got := c.StreamWrites[stream]; math.Abs(got-float64(n)) > 1 {
			t.Errorf("%s: the turns wrote %.2f a turn, FloorTurn %d", stream, got, n)
		}
	}
	// The metas are deferred while a session's appends come less than the
	// meta delay (200 ms) apart: on a machine so loaded that a turn takes
	// longer, its appends are written one meta each, as they should be.
	if got := c.StreamWrites["KV_iii-sessions"]; tr.P99Ms < 150 && got > 2 {
		t.Errorf("KV_iii-sessions: the turns wrote %.2f session metas a turn; want ≤ 2 (deferred)", got)
	} else if tr.P99Ms >= 150 {
		t.Logf("turns took p99 %.0f ms, longer than the session meta delay: the deferred metas (%.2f a turn) are not checked in this run", tr.P99Ms, got)
	}
	var table strings.Builder
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"turns/s", "kv puts/s", "kv-put equivalents", "storage floor", "per 10k sessions", "idle 0.3 s later"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	body, err := json.Marshal(res)
	if err != nil || !strings.Contains(string(body), `"turns_per_s"`) {
		t.Errorf("json: %s, %v", body, err)
	}
	t.Logf("\n%s", table.String())
}

// floorWrites is what one turn of p writes, by the harness's stream it
// stands for.
func floorWrites(p FloorPlan) map[string]int {
	w := map[string]int{}
	for _, st := range p.Stages {
		w["III_EVENTS"] += st.Events
		w["III_SESSION_ENTRIES"] += st.Entries
		w["KV_iii-turn-state"] += st.Records
		if st.Step {
			w["III_TURN_STEPS"]++
		}
	}
	return w
}

func TestFloorPlans(t *testing.T) {
	for _, c := range []struct {
		p      FloorPlan
		writes int
	}{
		{FloorTurn, 26},
		{FloorContract, 24},
		{FloorLean, 14},
	} {
		if got := c.p.Writes(); got != c.writes {
			t.Errorf("%s: %d writes, want %d", c.p.Name, got, c.writes)
		}
		sum := 0
		for _, n := range floorWrites(c.p) {
			sum += n
		}
		if sum != c.writes {
			t.Errorf("%s: %d writes by stream, want %d", c.p.Name, sum, c.writes)
		}
	}
}

// A traced run (Config.Traces) completes like an untraced one.
func TestRunTraced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{Sessions: 3, Turns: 2, SkipKV: true, SkipFloor: true, Traces: true, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if tr := res.Turns; tr == nil || tr.Turns != 6 || tr.Failed != 0 {
		t.Fatalf("turns = %+v", tr)
	}
}

// BenchmarkTurns is the turn-loop suite: Sessions × Turns turns of
// "/call bench::noop {}" on an embedded single node with file storage, and
// raw KV puts on the same server. One iteration is one whole [Run]; the
// figures are the last iteration's. Run with -benchtime=1x for one run of
// each:
//
//	go test -run '^$' -bench 'Turns$' -benchtime 1x ./bench/
//
// The ",bus-calls" runs send every call between the stack's workers over
// the bus (Config.BusCalls, `iii up --local-calls=false`); by default they
// skip it, as in `iii up`.
func BenchmarkTurns(b *testing.B) {
	for _, c := range []struct {
		sessions, turns int
		bus             bool // every call between the stack's workers over the bus (--local-calls=false)
	}{
		{10, 5, false},   // quick
		{100, 10, false}, // target: ≥ 2,000 turns/s, p99 < 100 ms
		{1, 500, false},  // target: ≥ 400 turns/s, no quadratic re-reads
		{100, 10, true},
		{1, 500, true},
	} {
		name := fmt.Sprintf("sessions=%d,turns=%d", c.sessions, c.turns)
		if c.bus {
			name += ",bus-calls"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var res Result
			for b.Loop() {
				var err error
				res, err = Run(b.Context(), Config{Sessions: c.sessions, Turns: c.turns, Dir: b.TempDir(), BusCalls: c.bus})
				if err != nil {
					b.Fatal(err)
				}
			}
			t := res.Turns
			b.ReportMetric(t.TurnsPerSec, "turns/s")
			b.ReportMetric(t.P50Ms, "p50-ms")
			b.ReportMetric(t.P99Ms, "p99-ms")
			b.ReportMetric(MiB(t.PeakRSS), "peak-rss-MiB")
			b.ReportMetric(res.KV.PutsPerSec, "kv-puts/s")
			b.ReportMetric(res.KVPutsPerTurn, "kv-puts/turn")
			b.ReportMetric(t.PerTurn.Writes, "writes/turn")
			b.ReportMetric(t.PerTurn.MsgsIn, "msgs/turn")
			b.ReportMetric(t.CPUPerTurnUs, "cpu-µs/turn")
			b.ReportMetric(t.Sched.WaitPerTurnUs, "sched-wait-µs/turn")
			b.ReportMetric(float64(t.GC.Cycles), "gc-cycles")
			b.ReportMetric(t.GC.CPUPercent, "gc-cpu-%")
			b.ReportMetric(float64(t.BusyRetries), "busy-retries")
			for _, f := range res.Floor {
				b.ReportMetric(f.TurnsPerSec, "floor-"+f.Plan+"-turns/s")
				b.ReportMetric(f.TurnsRatio, "floor-"+f.Plan+"-ratio")
			}
			b.ReportMetric(float64(t.Warnings["session grain halted"]), "grain-halts")
			b.Logf("load average %s → %s", res.Env.LoadStart, res.Env.LoadEnd)
		})
	}
}

// BenchmarkTracingOverhead runs 100 sessions × 10 turns with tracing off
// and on (every engine exporting to the trace store, as `iii up` does),
// alternated in one run, and reports the ratio (issue target: ≤ 15 % cost,
// i.e. a ratio ≥ 0.85).
func BenchmarkTracingOverhead(b *testing.B) {
	var off, on []float64
	for b.Loop() {
		for _, traced := range []bool{false, true} {
			res, err := Run(b.Context(), Config{Sessions: 100, Turns: 10, SkipKV: true, SkipFloor: true, Traces: traced, Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			if traced {
				on = append(on, res.Turns.TurnsPerSec)
			} else {
				off = append(off, res.Turns.TurnsPerSec)
			}
		}
	}
	mean := func(xs []float64) float64 {
		t := 0.0
		for _, x := range xs {
			t += x
		}
		return t / float64(len(xs))
	}
	b.ReportMetric(mean(off), "turns/s-off")
	b.ReportMetric(mean(on), "turns/s-traced")
	b.ReportMetric(mean(on)/mean(off), "traced/off")
}

// BenchmarkTurnsCluster runs the turn loop on three nodes of one NATS
// cluster (one grain cluster, run::start spread over the nodes) twice per
// iteration, every stream and bucket R1 then R3 on fresh servers, and
// reports both turns/s and their ratio (the last iteration's):
//
//	go test -run '^$' -bench TurnsCluster -benchtime 1x ./bench/
//
// It runs three proto.actor members in one process: not under -race
// (docs/UPSTREAM.md).
func BenchmarkTurnsCluster(b *testing.B) {
	const nodes, sessions, turns = 3, 20, 5
	b.Run(fmt.Sprintf("nodes=%d,sessions=%d,turns=%d", nodes, sessions, turns), func(b *testing.B) {
		var c ReplicaComparison
		for b.Loop() {
			var err error
			if c, err = CompareReplicas(b.Context(), Config{Sessions: sessions, Turns: turns, Nodes: nodes, SkipKV: true, Dir: b.TempDir()}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(c.R1.Turns.TurnsPerSec, "turns/s-R1")
		b.ReportMetric(c.R3.Turns.TurnsPerSec, "turns/s-R3")
		b.ReportMetric(c.TurnsRatio, "R1/R3")
		b.ReportMetric(c.R1.Turns.P99Ms, "p99-ms-R1")
		b.ReportMetric(c.R3.Turns.P99Ms, "p99-ms-R3")
		b.ReportMetric(c.R1.Turns.CPUPerTurnUs, "cpu-µs/turn-R1")
		b.ReportMetric(c.R3.Turns.CPUPerTurnUs, "cpu-µs/turn-R3")
		b.Logf("load average %s → %s", c.R3.Env.LoadStart, c.R3.Env.LoadEnd)
	})
}

// BenchmarkIdleSessions activates sessions that each run one turn and then
// sit idle, and reports the memory they hold (RSS and Go heap, per 10,000
// sessions, extrapolated) right after their turns, idle DefaultIdleSettle
// later (grains still active) and after they passivate.
func BenchmarkIdleSessions(b *testing.B) {
	for _, n := range []int{2000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var res Result
			for b.Loop() {
				var err error
				res, err = Run(b.Context(), Config{Idle: n, IdleSettle: DefaultIdleSettle, Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
			}
			i := res.Idle
			b.ReportMetric(i.RSSPer10kActiveMiB, "rss-active-MiB/10k")
			b.ReportMetric(i.RSSPer10kIdleMiB, "rss-idle-MiB/10k")
			b.ReportMetric(i.RSSPer10kPassiveMiB, "rss-passive-MiB/10k")
			b.ReportMetric(i.HeapPer10kActiveMiB, "heap-active-MiB/10k")
			b.ReportMetric(i.HeapPer10kPassiveMiB, "heap-passive-MiB/10k")
			b.ReportMetric(i.GrainsHeapPer10kMiB, "grains-heap-MiB/10k")
			b.ReportMetric(float64(i.Sessions)/i.ActivationS, "activations/s")
			b.Logf("load average %s → %s", res.Env.LoadStart, res.Env.LoadEnd)
		})
	}
}

// TestChokepointSmall runs the chokepoint comparison small and checks the
// figures are sane.
func TestChokepointSmall(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Chokepoint(ctx, 50, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if res.Bare.P50 <= 0 || res.Gated.P50 <= 0 || res.Hooked.P50 <= 0 || res.GatedRatioP50 <= 0 {
		t.Fatalf("figures: %+v", res)
	}
	t.Logf("%+v", res)
}

// BenchmarkChokepoint compares a bare call with the same call through the
// chokepoint (policy + empty hooks; and with one hook subscriber),
// interleaved in one run. Target: the gated p99 is < 1 ms over the bare
// p99.
//
//	go test -run '^$' -bench Chokepoint -benchtime 1x ./bench/
func BenchmarkChokepoint(b *testing.B) {
	var res ChokepointResult
	for b.Loop() {
		var err error
		if res, err = Chokepoint(b.Context(), 3000, b.TempDir()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(res.Bare.P50, "bare-p50-ms")
	b.ReportMetric(res.Bare.P99, "bare-p99-ms")
	b.ReportMetric(res.Gated.P50, "gated-p50-ms")
	b.ReportMetric(res.Gated.P99, "gated-p99-ms")
	b.ReportMetric(res.GatedOverheadP99Ms, "gated-overhead-p99-ms")
	b.ReportMetric(res.GatedRatioP50, "gated/bare-p50")
	b.ReportMetric(res.Hooked.P50, "hooked-p50-ms")
	b.ReportMetric(res.HookedRatioP50, "hooked/bare-p50")
}
