// Package orchestrator is the worker that runs turns: it registers
// run::start, run::abort, turn::get_state, harness::trigger, agent::trigger
// and the session inbox (session::inbox_push, session::inbox_drain), hosts
// the session grains (package actors/session) and consumes the durable
// turn-step stream that wakes them.
//
// # Names
//
//   - KV iii-turn-state: the TurnStateRecord of each session (JSON), key =
//     session id; every write is a compare-and-set on the revision.
//   - stream III_TURN_STEPS (work queue), subjects iii.turn.step.<sid>:
//     {session_id, step, state}; one durable consumer "orchestrator" shared
//     by every orchestrator replica.
//   - stream III_EVENTS, subjects iii.events.<sid>: the session's events
//     (SPEC §6), Nats-Msg-Id = the turn effect id, so a redelivered effect
//     is deduplicated within the stream's duplicate window (30 s); past
//     it the publisher tells the replaying grain which events are
//     stored, read from the stream since the record's write
//     (session.StoredEvents), and looks up a publish that failed that
//     long ago before it publishes it again.
//   - the transcript is the session tree's (the session worker,
//     session::*): run::start ensures the session, the grain reads the
//     active path with session::messages (compactions applied) when it
//     activates or a run starts (unless the meta watch, pathwatch.go,
//     says the path it holds is still current), and appends with
//     session::append_batch (dedup id from the effect id), in order,
//     awaited before each record write.
//   - KV iii-inbox: "<sid>.steering" and "<sid>.followup", JSON arrays.
//   - KV iii-runs: run::start idempotency keys (24 h).
//
// # Session homes
//
// Each of those buckets and streams (and the approvals buckets) is per
// session: a primary copy for plain session ids and, for a session
// "<region>.<name>", its region's copy ("iii-turn-state-at-eu",
// "III_EVENTS_AT_eu"), which Start creates on a node of that region
// (engine.WithRegion) and places there. Every access goes to the session's
// copy (engine.SessionKV, engine.SessionStream); a session of a region
// without copies is refused with not_found before anything is written. The
// step and approvals consumers run one per copy; the periodic sweep starts
// those of copies that appeared since (docs/REGIONS.md).
//
// # Lifecycle
//
// Start ensures the buckets and streams, starts the grain host, registers
// the functions, re-wakes sessions whose record is mid-run (a crash between
// a record write and its step publish), then consumes steps. Close drains
// the step consumer and stops the grains (un-acked steps are redelivered to
// the next orchestrator).
package orchestrator
