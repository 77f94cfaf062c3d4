// Package region keeps iii's JetStream state readable in other regions and
// lets a region take over when the home region is lost.
//
// # Topology
//
// A deployment spans regions: NATS clusters (one per region, named after
// it) joined by gateways into a supercluster. The supercluster has one
// JetStream meta group made of every JetStream server, so with two data
// regions a third small "witness" cluster (JetStream on, holding no
// streams) is needed: without it, losing one region loses the meta quorum
// and no stream can be created, promoted or deleted ([ErrNoQuorum]). A
// deployment's state is homed in one region: its streams (KV buckets
// "iii-*", streams "III_*") are placed in that region's cluster.
//
// # Lifecycle
//
//  1. [Mirror] (periodically, or after new buckets appear) creates in
//     another region a mirror of every selected origin: same sequence
//     numbers, KV mirrors with direct get, so kv.Get on the origin bucket
//     name from a client in that region is served by the local mirror.
//     Work-queue and counter streams cannot be mirrored; they get an empty
//     placeholder that records their config. [Lag] says how far behind
//     each mirror is.
//  2. [Home] tells where a stream lives; it returns [ErrOffline] or
//     [ErrUnreachable] once the home region is gone.
//  3. [Takeover] re-homes every stream of the lost region in the mirror
//     region under the original names: workers keep their bucket and
//     stream names, KV revisions (CAS tokens) stay valid. Writes the lost
//     region acknowledged but had not yet shipped to the mirror are lost
//     (the RPO); a region that is cut off but still running keeps
//     acknowledging writes that are lost too, so fence it first. An origin
//     deleted on purpose after the last [Mirror] run is not brought back:
//     its copy is reported skipped and left in place.
//  4. When the lost region comes back it drops its stale copies (the meta
//     group no longer assigns them to it) and its clients reach the new
//     home through the gateways; [Mirror] into it prepares a fail-back.
//
// Consumers are not mirrored: after a takeover, workers re-create their
// durable consumers (positions restart by their deliver policy), and work
// queues start empty (the orchestrator re-derives steps from turn records).
//
// # Example
//
//	js, _ := jetstream.New(ncInB)                 // a client in region B
//	rep, err := region.Mirror(ctx, js, "B")       // mirrors of A's state in B
//	lag, err := region.Lag(ctx, js, "B")          // per mirror, sequences behind
//	_, err = region.Home(ctx, js, "KV_iii-turn-state")
//	if errors.Is(err, region.ErrOffline) || errors.Is(err, region.ErrUnreachable) {
//		rep, err = region.Takeover(ctx, js, "A", "B") // B is home now
//	}
package region
