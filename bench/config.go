package bench

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/iii-on-nats/iii/workers/scripted"
)

// Defaults of a [Config].
const (
	DefaultKVWriters   = 100
	DefaultKVPuts      = 20_000
	DefaultKVValueSize = 256
	DefaultIdleTimeout = 10 * time.Second
	// DefaultIdleSettle is `iii bench turns --idle-settle`: past the event
	// stream's 30-second duplicate window, so the message ids the idle
	// sessions' turns left in the server have expired.
	DefaultIdleSettle  = 35 * time.Second
	DefaultIdleWorkers = 100
	DefaultTurnTimeout = 30 * time.Second
	DefaultAckWait     = 2 * time.Second
	// Prompt is the user message of every turn: the scripted model "echo"
	// calls bench::noop, then answers quoting its result — 2 model calls
	// and 1 function call per turn.
	Prompt = "/call " + NoopFunction + " {}"
	// NoopFunction is the tool every turn calls.
	NoopFunction = "bench::noop"
	// BenchPolicy is the bench's iii-permissions.yaml: the bench's tools
	// are allowed, everything else needs approval (as in a deployment).
	BenchPolicy = "version: 1\nrules:\n  - \"bench::*\"\n"
	// MaxSessions bounds Sessions, Turns and Idle.
	MaxSessions = 1_000_000
	// MaxTotalTurns bounds Sessions × Turns.
	MaxTotalTurns = 10_000_000
	// MaxNodes bounds Nodes.
	MaxNodes = 9
	// MaxReplicas is JetStream's largest replica count.
	MaxReplicas = 5
	// MaxTimeout bounds every duration of a Config (TurnTimeout, AckWait,
	// IdleTimeout, IdleSettle).
	MaxTimeout = 24 * time.Hour
)

// Config is one bench run. The zero value runs nothing; set Sessions and
// Turns for the turns phase, Idle for the idle-sessions phase.
type Config struct {
	// Sessions × Turns: each session runs its turns one after the other
	// (run::start, wait for agent_end), the sessions concurrently. Zero
	// Sessions skips the turns phase (and the KV phase with it).
	Sessions, Turns int
	// KVWriters concurrent writers put KVPuts values of KVValueSize bytes in
	// all into a scratch bucket (file storage) on the same server, after
	// the turns phase; zero means the defaults. SkipKV skips the phase.
	KVWriters, KVPuts, KVValueSize int
	SkipKV                         bool
	// SkipFloor skips the storage floors: after the turns phase, the same
	// Sessions × Turns make only a turn's stored writes, for each plan of
	// [FloorPlans], on the same server(s) and replicas.
	SkipFloor bool
	// Idle > 0 runs the idle phase: Idle more sessions each run one turn
	// and then sit idle; RSS and Go heap are measured before, with the
	// grains active, and after they passivate. IdleTimeout is the grains'
	// passivation timeout; it must outlast the activation of all Idle
	// sessions, so the default is 10 s plus 5 ms per idle session.
	// IdleWorkers bounds the sessions activated at once (default 100).
	// IdleSettle > 0 also measures the grains still active IdleSettle
	// after the activation ended, once what their turns left behind in
	// the server (duplicate windows, block caches) has expired: sessions
	// idle, not just run. The default IdleTimeout then grows by
	// IdleSettle, so the grains outlast it.
	Idle        int
	IdleTimeout time.Duration
	IdleSettle  time.Duration
	IdleWorkers int
	// TurnTimeout bounds one turn (default 30 s).
	TurnTimeout time.Duration
	// AckWait is the orchestrator's turn-step ack wait (default 2 s, not
	// the production 60 s): a grain that halts (fenced by a concurrent
	// record write) leaves its wakes un-acked until then, and the bench
	// would rather see such a stall than time out.
	AckWait time.Duration
	// DeltaSize is the scripted provider's largest delta in bytes (0: its
	// default, 8).
	DeltaSize int
	// TCP connects the stack and the client over loopback TCP instead of
	// in-process connections (net.Pipe), as `iii up` does.
	TCP bool
	// Traces turns tracing on as `iii up` has it: every engine exports its
	// spans to the trace store's stream, which a traces worker follows.
	Traces bool
	// NoContinuation makes every model call send the whole transcript
	// (orchestrator.WithTranscriptContinuation(false)).
	NoContinuation bool
	// SharedConn runs the orchestrator, the provider, the tool, the policy
	// and the session tree on one connection, as `iii up --shared-conn`
	// does; by default each has its own, as in `iii up`.
	SharedConn bool
	// BusCalls sends every call between the stack's workers over the bus,
	// as `iii up --local-calls=false` does; by default they skip it
	// (engine.WithLocalCalls), as in `iii up`. The bench's client is on the
	// bus either way, as a client in another process would be.
	BusCalls bool
	// HeapFloorMiB is the garbage collector's floor of headroom for the
	// run (engine/heapfloor), as `iii up --heap-floor-mib` sets it for a
	// node: 0 is the node's default (heapfloor.DefaultFloor), < 0 turns
	// it off. GOGC in the environment turns it off too. The floor is the
	// process's: a run in a process that armed one already keeps that.
	HeapFloorMiB int
	// CPUProfile, when set, receives a CPU profile (pprof) of the turns
	// phase alone.
	CPUProfile io.Writer
	// HeapProfile, when set, receives a heap profile (pprof) of the idle
	// phase while its sessions are active, taken after the collection
	// that measures them: what an idle session holds.
	HeapProfile io.Writer
	// Nodes is the number of embedded servers: 0 or 1 runs today's single
	// node; more start that many servers in one NATS cluster on loopback,
	// each with the whole worker set (the orchestrators form one grain
	// cluster), the sessions' run::start calls spread over the nodes in
	// turn and the event watcher on node 1. At most [MaxNodes].
	Nodes int
	// Replicas is the replica count of every stream and KV bucket (the KV
	// phase's too): 0 means 1 on fewer than 3 nodes and 3 on 3 or more;
	// else an odd number, at most Nodes and [MaxReplicas].
	Replicas int
	// Dir is the JetStream store directory (with several nodes, each node
	// stores under Dir/n1, Dir/n2 …); empty means a fresh temporary
	// directory, removed at the end.
	Dir string
	// Logger receives the stack's and the server's warnings; nil discards.
	Logger *slog.Logger
}

// Validate checks c.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"sessions", c.Sessions}, {"turns", c.Turns}, {"kv writers", c.KVWriters}, {"kv puts", c.KVPuts},
		{"kv value size", c.KVValueSize}, {"idle", c.Idle}, {"idle workers", c.IdleWorkers}, {"delta size", c.DeltaSize},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s %d is negative", ErrInvalidConfig, f.name, f.v)
		}
	}
	if c.Sessions > 0 && c.Turns == 0 {
		return fmt.Errorf("%w: %d sessions with 0 turns", ErrInvalidConfig, c.Sessions)
	}
	if c.Sessions > MaxSessions || c.Idle > MaxSessions || c.Turns > MaxSessions || c.KVWriters > MaxSessions || c.IdleWorkers > MaxSessions {
		return fmt.Errorf("%w: sessions, turns, idle, kv writers and idle workers are bounded by %d", ErrInvalidConfig, MaxSessions)
	}
	// The turns and the KV phase keep a latency per turn, per put.
	if c.Sessions*c.Turns > MaxTotalTurns {
		return fmt.Errorf("%w: %d × %d turns exceed %d", ErrInvalidConfig, c.Sessions, c.Turns, MaxTotalTurns)
	}
	if c.KVPuts > MaxTotalTurns {
		return fmt.Errorf("%w: %d kv puts exceed %d", ErrInvalidConfig, c.KVPuts, MaxTotalTurns)
	}
	if c.KVValueSize > 1<<20 {
		return fmt.Errorf("%w: kv value size %d exceeds 1 MiB", ErrInvalidConfig, c.KVValueSize)
	}
	if c.DeltaSize > scripted.MaxDeltaSize {
		return fmt.Errorf("%w: delta size %d exceeds %d", ErrInvalidConfig, c.DeltaSize, scripted.MaxDeltaSize)
	}
	if c.IdleTimeout < 0 || c.TurnTimeout < 0 || c.AckWait < 0 || c.IdleSettle < 0 {
		return fmt.Errorf("%w: negative timeout", ErrInvalidConfig)
	}
	// Bounded, so the default idle timeout (which adds the idle settle)
	// cannot wrap around to a negative one.
	if c.IdleTimeout > MaxTimeout || c.TurnTimeout > MaxTimeout || c.AckWait > MaxTimeout || c.IdleSettle > MaxTimeout {
		return fmt.Errorf("%w: a timeout exceeds %v", ErrInvalidConfig, MaxTimeout)
	}
	if c.IdleSettle > 0 && c.IdleTimeout > 0 && c.IdleSettle >= c.IdleTimeout {
		return fmt.Errorf("%w: idle settle %s must be shorter than the idle timeout %s (the grains must still be active)", ErrInvalidConfig, c.IdleSettle, c.IdleTimeout)
	}
	if c.Nodes < 0 || c.Nodes > MaxNodes {
		return fmt.Errorf("%w: nodes %d is out of range (0 or 1: one node, at most %d)", ErrInvalidConfig, c.Nodes, MaxNodes)
	}
	if r, n := c.Replicas, max(c.Nodes, 1); r < 0 || r > min(n, MaxReplicas) || (r > 0 && r%2 == 0) {
		return fmt.Errorf("%w: replicas %d on %d nodes: want 0 (default) or an odd count of at most %d", ErrInvalidConfig, r, n, min(n, MaxReplicas))
	}
	if c.Sessions == 0 && c.Idle == 0 {
		return fmt.Errorf("%w: nothing to run (sessions and idle are 0)", ErrInvalidConfig)
	}
	return nil
}

// replicas is the effective replica count: Replicas, else 3 on 3 or more
// nodes and 1 below.
func (c Config) replicas() int {
	switch {
	case c.Replicas > 0:
		return c.Replicas
	case c.Nodes >= 3:
		return 3
	}
	return 1
}

// withDefaults fills in the zero values.
func (c Config) withDefaults() Config {
	if c.KVWriters == 0 {
		c.KVWriters = DefaultKVWriters
	}
	if c.KVPuts == 0 {
		c.KVPuts = DefaultKVPuts
	}
	if c.KVValueSize == 0 {
		c.KVValueSize = DefaultKVValueSize
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout + time.Duration(c.Idle)*5*time.Millisecond + c.IdleSettle
	}
	if c.IdleWorkers == 0 {
		c.IdleWorkers = DefaultIdleWorkers
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.TurnTimeout == 0 {
		c.TurnTimeout = DefaultTurnTimeout
	}
	c.KVWriters = min(c.KVWriters, max(c.KVPuts, 1))
	c.Nodes = max(c.Nodes, 1)
	c.Replicas = c.replicas()
	return c
}
