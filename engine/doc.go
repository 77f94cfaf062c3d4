// Package engine is the bus for Go workers: it registers functions, triggers
// them, and carries codecs, errors and trace context across NATS, so that a
// worker is just a NATS client and any other NATS client (the nats CLI, a
// Python script) can take part.
//
// # Lifecycle
//
//  1. [New] wraps a *nats.Conn; one Engine per process and connection.
//  2. [Engine.Worker] starts a worker: one service of the NATS services
//     framework (nats.go/micro), visible to `nats micro ls`.
//  3. [Worker.Register] adds a [Function]: an endpoint on the subject its id
//     maps to (subjects.FunctionSubject), in queue group "iii", so replicas
//     share the load. Handlers run on their own goroutines, bounded by
//     [WithConcurrency].
//  4. Callers use [Engine.Trigger] / [Call] (request-reply), [Engine.Void]
//     (fire-and-forget) or [Engine.Enqueue] (durable queue, consumed by
//     package engine/queue).
//  5. [Engine.Close] stops the workers, waiting for handlers in flight.
//
// Every handler runs in a span named after its function id with attribute
// iii.function.id, and iii.session.id / iii.message.id taken from baggage or
// from the payload's session_id / message_id fields. Every trigger injects
// traceparent and baggage into the NATS headers ([HeaderCarrier]).
//
// The primitives built on the engine live in sub-packages: engine/state
// (JetStream KV state, state::* functions, durable state triggers),
// engine/queue and engine/topic (durable queues with dead letters, durable
// and plain topics), engine/channel (ordered streams between functions),
// engine/cron and engine/httpgw (cron and HTTP triggers). engine/wire holds
// the codecs and the error catalog.
//
// # Local calls
//
// With [WithLocalCalls] on, a call ([Engine.Trigger], [Call],
// [Engine.TriggerRaw]) to a function that a worker of this process serves,
// on an engine that also has it on and is connected to the same server,
// skips the bus: the handler runs in the caller's goroutine. The request
// and reply are encoded as on the bus, and a [Raw] body is copied (neither
// side sees the other change it); the handler sees the same headers (trace
// context, timeout), and its worker's concurrency bound, drain on Close
// and panic recovery apply. The caller gets what it would over the bus
// (engine/localparity_test.go), the handler unrun: invalid_payload for a
// request over the server's max payload (headers counted), canceled or
// timeout for a context already ended; internal for a reply over it.
// What differs: the call is no
// NATS message (`nats sub 'iii.fn.>'` does not see it, $SRV.STATS do not
// count it); a function also served by a replica elsewhere always runs
// here; a caller that gives up cancels the handler (over the bus the
// handler runs on to its own timeout), and a handler that ignores its
// context holds its caller until it returns (a hand-off to another
// goroutine that would free the caller costs 7 % of a turn's throughput:
// docs/PERFORMANCE.md, stop 34). Void calls and queues stay on the bus. Off by
// default in this package; `iii up` turns it on for a node's own workers
// (`--local-calls=false` turns it off).
// docs/PERFORMANCE.md, "Calls to a function served in the same process",
// has what it saves.
//
// # Connection trouble
//
// The engine does not pick the connection's reconnect options; a
// long-running worker wants nats.MaxReconnects(-1) (never give up) and
// keeps nats.go's bounded reconnect buffer (8 MiB by default: a publish
// past it fails unavailable). While the connection is away, nats.go keeps
// every subscription and sends it again on reconnect, so functions (queue
// group "iii") and their $SRV catalog entries come back by themselves,
// once each. The engine logs the loss once and the return once
// ([WithLogger]). A call in flight gets its reply if it comes back in time,
// else timeout at its deadline; on a closed connection, unavailable. When
// the connection closes for good, the contexts of running handlers end
// (their replies can no longer be sent) and a reply that cannot be sent
// is logged as "reply not sent", with code unavailable. A subscription
// that overflows (slow consumer) is logged once per overflow with code
// unavailable; its dropped requests time out at their callers.
//
// KV watches are nats.go ordered consumers, and a server that restarts
// loses their (ephemeral) consumers: nats.go alone notices by missed
// heartbeats, ≈ 20 s later, the watcher's view staying that of before the
// restart meanwhile. A [WatchKV] watch (behind [MirrorKV] and the routes,
// cron jobs, catalogs, inbox and meta caches, budgets and approval
// decisions) is opened again as soon as the connection is back and resumes
// after the last revision it handed on: nothing missed, nothing twice,
// caught up within milliseconds of the reconnect
// (TestWatchKVAcrossServerRestart holds it to 3 s). One whose bucket is
// gone after the restart (memory storage on a single server) or was
// created again ends instead, with [ErrWatchClosed]. A stream leader lost
// while the connection stays up is still noticed by heartbeats only.
// [FollowBucket] (behind the routes and cron jobs) goes on across those
// ends: it opens the watch again with backoff, and checks every
// [DefaultBucketCheck] that the bucket was not deleted or created again
// under a watch that stays open; each new watch's snapshot replaces what
// the old one built.
//
// # Example
//
//	e, _ := engine.New(nc)
//	w, _ := e.Worker("greeter")
//	_ = w.Register(engine.Function{
//		ID: "greet::hello",
//		Handler: engine.Typed(func(ctx context.Context, r HelloReq) (HelloResp, error) {
//			return HelloResp{Text: "hello " + r.Name}, nil
//		}),
//	})
//	resp, err := engine.Call[HelloResp](ctx, e, "greet::hello", HelloReq{Name: "ada"})
package engine
