package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Result is what one [Run] measured. Memory and CPU figures are of the
// whole process: the embedded nats-server(s), the orchestrators' grains,
// the providers, the tools and the bench's clients share it.
type Result struct {
	Env Env `json:"env"`
	// Nodes is the number of embedded servers (one NATS cluster when more
	// than one); Replicas the replica count of every stream and bucket.
	Nodes    int          `json:"nodes"`
	Replicas int          `json:"replicas"`
	Turns    *TurnsResult `json:"turns,omitempty"`
	KV       *KVResult    `json:"kv,omitempty"`
	Idle     *IdleResult  `json:"idle,omitempty"`
	// Floor is the storage floors, one per plan of [FloorPlans]: the same
	// sessions × turns making only a turn's stored writes.
	Floor []FloorResult `json:"floor,omitempty"`
	// KVPutsPerTurn is kv puts/s ÷ turns/s: what one turn costs in raw
	// JetStream KV puts on the same server(s), same replicas (0 without
	// both phases).
	KVPutsPerTurn float64 `json:"kv_puts_per_turn,omitempty"`
}

// Env describes the machine during the run.
type Env struct {
	GoVersion  string `json:"go_version"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
	// HeapFloorMiB is the collector's floor of headroom armed for the run
	// (engine/heapfloor; 0: none).
	HeapFloorMiB float64 `json:"heap_floor_mib"`
	LoadStart    LoadAvg `json:"load_start"`
	LoadEnd      LoadAvg `json:"load_end"`
}

// TurnsResult is the turns phase: Sessions × TurnsPerSession turns, each
// "/call bench::noop {}" (model call, function call, model call).
type TurnsResult struct {
	Sessions        int     `json:"sessions"`
	TurnsPerSession int     `json:"turns_per_session"`
	Turns           int     `json:"turns"`
	Failed          int     `json:"failed"`
	ElapsedS        float64 `json:"elapsed_s"`
	TurnsPerSec     float64 `json:"turns_per_s"`
	// CPUPercent is the process's CPU use during the phase (100 = one core
	// busy); CPUPerTurnUs is CPU time per turn in µs. Both cover the whole
	// process: server, stack and the bench's client.
	CPUPercent   float64 `json:"cpu_percent"`
	CPUPerTurnUs float64 `json:"cpu_per_turn_us"`
	// Sched is how long goroutines waited for a core, per turn.
	Sched Sched `json:"sched"`
	// GC is what the garbage collector did in the phase.
	GC GC `json:"gc"`
	// Turn latency: run::start call to agent_end received, in ms.
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
	// FirstTurnP50Ms and FirstTurnP99Ms are the latency of each session's
	// first turn (its session created, its grain activated, its event
	// numbering read), LaterTurnsP50Ms and LaterTurnsP99Ms that of the
	// others; with Turns > 1 only.
	FirstTurnP50Ms  float64 `json:"first_turn_p50_ms,omitempty"`
	FirstTurnP99Ms  float64 `json:"first_turn_p99_ms,omitempty"`
	LaterTurnsP50Ms float64 `json:"later_turns_p50_ms,omitempty"`
	LaterTurnsP99Ms float64 `json:"later_turns_p99_ms,omitempty"`
	// FirstHalfTurnsPerSec and SecondHalfTurnsPerSec are the rates of the
	// turns whose index within their session is in the first and second
	// half: with growing histories a quadratic cost shows as a drop.
	FirstHalfTurnsPerSec  float64 `json:"first_half_turns_per_s"`
	SecondHalfTurnsPerSec float64 `json:"second_half_turns_per_s"`
	// PeakRSS is the process's peak RSS (VmHWM) during the phase, in
	// bytes; PeakRSSSinceStart says the peak could not be reset, so it is
	// the peak since the process started.
	PeakRSS           int64 `json:"peak_rss_bytes"`
	PeakRSSSinceStart bool  `json:"peak_rss_since_start,omitempty"`
	// PerTurn is what one turn cost the server, from its counters.
	PerTurn Cost `json:"per_turn"`
	// BusyRetries counts run::start calls answered session_busy and
	// retried: the previous run's agent_end was out before its grain's
	// last checkpoint. Over1s counts turns that took a second or more.
	BusyRetries int `json:"busy_retries"`
	Over1s      int `json:"over_1s"`
	// Warnings counts the stack's warnings by message ("session grain
	// halted" …).
	Warnings map[string]int `json:"warnings,omitempty"`
}

// Cost is the server's work per turn, from its counters before and after
// the turns phase (the warm-up turn excluded). On several nodes, stream
// writes and acks are the highest count any node reports for a stream or
// consumer (each replica counts the same writes), JSAPI and MsgsIn are
// summed over the nodes.
type Cost struct {
	// StreamWrites are the messages stored per turn in each stream (KV
	// buckets are streams "KV_<bucket>"); Writes is their sum.
	StreamWrites map[string]float64 `json:"stream_writes"`
	Writes       float64            `json:"writes"`
	// Acks are the deliveries acknowledged on the consumers that ack (the
	// turn-step consumer; redeliveries count again); each ack is a
	// consumer-state write.
	Acks float64 `json:"acks"`
	// JSAPI are JetStream API requests (stream info, consumer create, msg
	// get …; direct gets, as KV reads are, are not counted there).
	JSAPI float64 `json:"js_api"`
	// MsgsIn are all messages the server received (publishes, requests,
	// replies, acks, channel frames, direct gets); on several nodes, summed
	// over them: a message routed to another node counts on each, and the
	// replication traffic of R3 streams counts too.
	MsgsIn float64 `json:"msgs_in"`
	// Events are session events seen by the bench's watcher.
	Events float64 `json:"events"`
}

// KVResult is the raw KV put phase.
type KVResult struct {
	Writers    int     `json:"writers"`
	Puts       int     `json:"puts"`
	ValueSize  int     `json:"value_size"`
	ElapsedS   float64 `json:"elapsed_s"`
	PutsPerSec float64 `json:"puts_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
}

// IdleResult is the idle-sessions phase: Sessions sessions each ran one
// turn and sat idle. RSS figures are VmRSS after a forced GC that returns
// freed memory to the OS; heap figures are the Go heap's live objects.
type IdleResult struct {
	Sessions    int     `json:"sessions"`
	ActivationS float64 `json:"activation_s"`
	// ActiveGrains were active after the activation, of which
	// GrainsBefore already were before it (the turns phase's sessions).
	ActiveGrains int `json:"active_grains"`
	GrainsBefore int `json:"grains_before"`
	// PassivationS is how long after activation the grains took to
	// passivate (IdleTimeoutS after their last message); StillActive the
	// grains left when the bench gave up waiting.
	IdleTimeoutS float64 `json:"idle_timeout_s"`
	PassivationS float64 `json:"passivation_s"`
	StillActive  int     `json:"still_active"`

	// IdleSettleS is how long after the activation the idle figures
	// were taken (0: not taken), with IdleGrains grains active then.
	IdleSettleS float64 `json:"idle_settle_s,omitempty"`
	IdleGrains  int     `json:"idle_grains,omitempty"`

	// Per 10,000 sessions in MiB, extrapolated linearly from Sessions:
	// active right after the activation, idle IdleSettleS later (grains
	// still active), passivated.
	RSSPer10kActiveMiB   float64 `json:"rss_per_10k_active_mib"`
	RSSPer10kIdleMiB     float64 `json:"rss_per_10k_idle_mib,omitempty"`
	RSSPer10kPassiveMiB  float64 `json:"rss_per_10k_passive_mib"`
	HeapPer10kActiveMiB  float64 `json:"heap_per_10k_active_mib"`
	HeapPer10kIdleMiB    float64 `json:"heap_per_10k_idle_mib,omitempty"`
	HeapPer10kPassiveMiB float64 `json:"heap_per_10k_passive_mib"`
	// GrainsHeapPer10kMiB is the heap the active grains themselves held
	// (idle minus passivated when the idle figures were taken, else
	// active minus passivated), per 10,000 grains active at the
	// measurement (grains that passivated during a long activation do not
	// count). Right after the activation the rest of the growth is mostly
	// the server's state for what the sessions just wrote (per-subject
	// indexes, Nats-Msg-Id duplicate windows of 30 s–10 min, block
	// caches), which the idle figures no longer count but for the
	// 10-minute windows; the rest is the stack's per-session maps.
	GrainsHeapPer10kMiB float64 `json:"grains_heap_per_10k_mib"`
	// Warnings counts the stack's warnings during the phase by message.
	Warnings map[string]int `json:"warnings,omitempty"`
	// BusyRetries counts run::start calls answered session_busy.
	BusyRetries int `json:"busy_retries"`
	// Bytes: the raw figures.
	Bytes IdleBytes `json:"bytes"`
}

// IdleBytes are the idle phase's raw memory figures in bytes.
type IdleBytes struct {
	RSSBase     int64 `json:"rss_base"`
	RSSActive   int64 `json:"rss_active"`
	RSSIdle     int64 `json:"rss_idle,omitempty"`
	RSSPassive  int64 `json:"rss_passive"`
	HeapBase    int64 `json:"heap_base"`
	HeapActive  int64 `json:"heap_active"`
	HeapIdle    int64 `json:"heap_idle,omitempty"`
	HeapPassive int64 `json:"heap_passive"`
}

// MiB is bytes in MiB.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }

// WriteTable writes r as an aligned, human-readable table.
func (r Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...))
	}
	floor := "off"
	if r.Env.HeapFloorMiB > 0 {
		floor = fmt.Sprintf("%.0f MiB", r.Env.HeapFloorMiB)
	}
	row("machine", "%s, GOMAXPROCS %d, %d CPUs, heap floor %s, load %s → %s", r.Env.GoVersion, r.Env.GOMAXPROCS, r.Env.NumCPU, floor, r.Env.LoadStart, r.Env.LoadEnd)
	if r.Nodes > 1 {
		row("nodes", "%d in one NATS cluster and one grain cluster, streams and buckets R%d (run::start spread over the nodes, events watched on node 1; server counters of all nodes)", r.Nodes, r.Replicas)
	} else {
		row("nodes", "1, streams and buckets R%d", max(r.Replicas, 1))
	}
	if t := r.Turns; t != nil {
		row("turns", "%d sessions × %d turns = %d turns in %.2f s (%d failed)", t.Sessions, t.TurnsPerSession, t.Turns, t.ElapsedS, t.Failed)
		row("turns/s", "%.0f (first half %.0f, second half %.0f)", t.TurnsPerSec, t.FirstHalfTurnsPerSec, t.SecondHalfTurnsPerSec)
		row("cpu", "%.0f%% of one core (GOMAXPROCS %d), %.0f µs per turn", t.CPUPercent, r.Env.GOMAXPROCS, t.CPUPerTurnUs)
		if sc := t.Sched; sc.WakeupsPerTurn > 0 {
			row("scheduling", "%.0f goroutine wake-ups per turn, each waiting for a core %.1f µs on average (p50 %.1f, p90 %.0f, p99 %.0f µs): %.0f µs per turn in all", sc.WakeupsPerTurn, sc.MeanUs, sc.P50Us, sc.P90Us, sc.P99Us, sc.WaitPerTurnUs)
		}
		if t.GC.Cycles > 0 || t.GC.CPUPercent > 0 {
			row("gc", "%d collections, %.1f%% of the CPU", t.GC.Cycles, t.GC.CPUPercent)
		}
		row("turn latency", "p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms, mean %.2f ms", t.P50Ms, t.P90Ms, t.P99Ms, t.MaxMs, t.MeanMs)
		if t.LaterTurnsP50Ms > 0 {
			row("by turn", "sessions' first turns p50 %.2f / p99 %.2f ms; later turns p50 %.2f / p99 %.2f ms", t.FirstTurnP50Ms, t.FirstTurnP99Ms, t.LaterTurnsP50Ms, t.LaterTurnsP99Ms)
		}
		since := ""
		if t.PeakRSSSinceStart {
			since = " (since process start)"
		}
		row("anomalies", "%d run::start session_busy retries, %d turns ≥ 1 s, warnings %s", t.BusyRetries, t.Over1s, formatCounts(t.Warnings))
		row("peak RSS", "%.1f MiB%s", MiB(t.PeakRSS), since)
		c := t.PerTurn
		row("per turn", "%.1f stored writes, %.1f acks, %.1f JS API calls, %.1f server msgs in, %.1f events", c.Writes, c.Acks, c.JSAPI, c.MsgsIn, c.Events)
		names := slices.Sorted(maps.Keys(c.StreamWrites))
		parts := make([]string, 0, len(names))
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s %.1f", n, c.StreamWrites[n]))
		}
		row("writes by stream", "%s", strings.Join(parts, ", "))
	}
	if k := r.KV; k != nil {
		row("kv puts/s", "%.0f (%d writers, %d puts of %d B, p50 %.2f ms, p99 %.2f ms)", k.PutsPerSec, k.Writers, k.Puts, k.ValueSize, k.P50Ms, k.P99Ms)
	}
	if r.KVPutsPerTurn > 0 {
		row("turn cost", "%.1f kv-put equivalents (kv puts/s ÷ turns/s)", r.KVPutsPerTurn)
	}
	for _, f := range r.Floor {
		row("storage floor", "%s: %d stored writes a turn and nothing else: %.0f turns/s, %.0f µs CPU a turn, p99 %.2f ms; the turns reach %.2f of it",
			f.Plan, f.WritesPerTurn, f.TurnsPerSec, f.CPUPerTurnUs, f.P99Ms, f.TurnsRatio)
	}
	if i := r.Idle; i != nil {
		if len(i.Warnings) > 0 {
			row("idle warnings", "%s", formatCounts(i.Warnings))
		}
		if i.ActiveGrains-i.GrainsBefore < i.Sessions {
			row("note", "%d idle sessions passivated before the activation ended: raise the idle timeout", i.Sessions-(i.ActiveGrains-i.GrainsBefore))
		}
		row("idle sessions", "%d activated in %.2f s, %d grains active; passivated %.1f s later (idle timeout %.1f s, %d still active)",
			i.Sessions, i.ActivationS, i.ActiveGrains, i.PassivationS, i.IdleTimeoutS, i.StillActive)
		if i.IdleSettleS > 0 && i.IdleGrains < i.ActiveGrains {
			row("note", "%d grains passivated before the idle figures were taken: raise the idle timeout", i.ActiveGrains-i.IdleGrains)
		}
		idle := func(b int64) string { return "" }
		if i.IdleSettleS > 0 {
			idle = func(b int64) string { return fmt.Sprintf(", idle %.3g s later %.1f MiB", i.IdleSettleS, MiB(b)) }
		}
		row("idle RSS", "base %.1f MiB, active %.1f MiB%s, passivated %.1f MiB", MiB(i.Bytes.RSSBase), MiB(i.Bytes.RSSActive), idle(i.Bytes.RSSIdle), MiB(i.Bytes.RSSPassive))
		row("idle heap", "base %.1f MiB, active %.1f MiB%s, passivated %.1f MiB", MiB(i.Bytes.HeapBase), MiB(i.Bytes.HeapActive), idle(i.Bytes.HeapIdle), MiB(i.Bytes.HeapPassive))
		per := func(active, idle, passive float64) string {
			if i.IdleSettleS > 0 {
				return fmt.Sprintf("%.1f MiB active, %.1f idle, %.1f passivated", active, idle, passive)
			}
			return fmt.Sprintf("%.1f MiB active, %.1f passivated", active, passive)
		}
		row("per 10k sessions", "RSS %s; heap %s, grains alone %.1f MiB (extrapolated from %d)",
			per(i.RSSPer10kActiveMiB, i.RSSPer10kIdleMiB, i.RSSPer10kPassiveMiB), per(i.HeapPer10kActiveMiB, i.HeapPer10kIdleMiB, i.HeapPer10kPassiveMiB), i.GrainsHeapPer10kMiB, i.Sessions)
	}
	return tw.Flush()
}

// formatCounts is "none" or "msg ×n, …" in message order.
func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%q ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
