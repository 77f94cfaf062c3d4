// Package bench is the turn-loop benchmark suite: it runs sessions × turns
// through the whole harness on an embedded single node — or on several
// nodes of one NATS cluster — with durable (file) storage and reports turns/s, turn latency, peak RSS and — on the
// same server, in the same run — raw JetStream KV puts/s, so that a turn
// reads as so many "KV-put equivalents". It also measures what idle
// sessions cost in memory.
//
// The suite is one function, [Run], used by the Go benchmarks of this
// package (go test -bench) and by `iii bench turns`; [CompareReplicas]
// runs it twice on a cluster, R1 then R3.
//
// # What a turn is
//
// One user message "/call bench::noop {}" to the scripted provider's model
// "echo": model call 1 answers with a call of bench::noop, the function
// runs, model call 2 answers quoting its result, the run ends. Each
// session runs its turns one after the other — run::start with a fresh
// RunStart on the same session id, then wait for that run's agent_end —
// and the sessions run concurrently. Latency is from the run::start call to
// the agent_end event arriving; events are watched with one core NATS
// subscription on iii.events.> demultiplexed by session id. run::start
// answers "session_busy" when it races the previous run's last checkpoint;
// the bench retries (and counts it) within the turn's latency.
//
// # Phases of a Run
//
//  1. Start: a temporary store directory, the server (cluster.Start), the
//     orchestrator, the scripted provider (no delta pacing), the tool
//     bench::noop, the policy and the session tree, each on an engine and
//     connection of its own as in `iii up` (Config.SharedConn: all on the
//     orchestrator's); a client engine and the event watcher on further
//     connections; one warm-up turn (one per node).
//  2. Turns (Sessions × Turns): throughput, latency percentiles, CPU per
//     turn, how long goroutines waited for a core ([Sched]), what the
//     garbage collector did ([GC]: collections, its share of the CPU),
//     peak RSS
//     (VmHWM, reset at the phase start), and the server's
//     work per turn from its counters: messages stored per stream, acks,
//     JetStream API calls, messages received.
//  3. KV: KVWriters writers put KVPuts values into a scratch bucket (file
//     storage, History 1) on the same server.
//  4. Storage floors (unless SkipFloor): the same Sessions × Turns, each
//     turn only the stored writes of one [FloorPlan], in its stages, on
//     scratch streams and buckets of node 1 (same replicas, file storage,
//     the same duplicate windows and message ids): no actors, providers,
//     bus calls or codecs. [FloorTurn] writes what the harness's turn
//     writes today (26), [FloorContract] the fewest today's contracts
//     allow (24), [FloorLean] a lean turn (14). Each reports turns/s, CPU
//     per turn and the turns phase's share of it ([FloorResult]): what
//     is left for everything a turn does besides storing.
//  5. Idle (Idle > 0): Idle more sessions run one turn each, then sit idle;
//     RSS and the live Go heap are read before, with the grains active
//     right after their turns, with the grains still active IdleSettle
//     later (when set: what the turns left in the server has expired),
//     and once they have passivated (IdleTimeout), per 10,000 sessions.
//
// Memory figures cover the whole process: the embedded server, the
// grains, the provider, the tool and the bench's client share it.
//
// # Several nodes
//
// With Config.Nodes > 1 the stack is Nodes embedded servers in one NATS
// cluster (routes on loopback, ports picked first, every node listing
// every route; stores under the stack's directory, one per node), and on
// every node the same worker set, each worker on its own in-process
// connection to its node (one shared with Config.SharedConn): the
// scripted provider, bench::noop, the policy and session
// tree workers and an orchestrator that is a member of one grain cluster
// (proto.actor over JetStream KV), so a session has one grain wherever its
// steps are consumed. Every engine creates its streams and buckets with
// Config.Replicas replicas (default 3 on 3 or more nodes), and so does the
// KV phase. There is one client engine per node; session i calls
// run::start through node (i mod Nodes)'s, the event watcher is on node
// 1. A grain placed on another member than the one that consumed its step
// costs a gRPC hop (proto.actor remote) on top of the NATS routes. The
// server counters merge the nodes' (see [Cost]). All nodes, the grain
// members and the bench share one process (and its CPUs): the figures
// compare R1 with R3 and one node with several, not a real deployment.
// Each grain member's start takes 1 s and its shutdown 2 s (proto.actor),
// one after the other; several members in one process are not safe under
// the race detector (docs/UPSTREAM.md).
//
// # Example
//
//	res, err := bench.Run(ctx, bench.Config{Sessions: 100, Turns: 10})
//	if err != nil { ... }
//	res.WriteTable(os.Stdout)
//
// and from the command line:
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/ | tee new.txt
//	benchstat old.txt new.txt
//	iii bench turns --sessions 100 --turns 10 --idle 2000
//	iii bench turns --sessions 50 --turns 5 --nodes 3   # R1, R3 and their ratio
package bench
