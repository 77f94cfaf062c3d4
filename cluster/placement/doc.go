// Package placement is the proto.actor identity lookup of iii: it decides
// which cluster member hosts each grain (a session is a grain of kind
// "session" whose identity is the session id) and keeps that decision in
// JetStream, so that a grain has one activation cluster-wide.
//
// Ownership is a key "<kind>.<identity>" ([Key]) in the KV bucket
// subjects.GrainsBucket, whose value names the owning member. A member
// becomes the owner by creating the key, or, when the recorded owner has
// left the topology (crashed, membership expired), by a compare-and-set on
// the revision it read; it spawns the grain only after winning. The grain
// stays on its member while it works: there is no rebalancing when members
// join. When the grain stops, its key is removed, again only at the
// revision of its own claim, so a late release never removes a newer
// owner. The revision of the claim is thus a fencing token.
//
// # Lifecycle
//
//  1. [New] binds (or creates) the bucket. Pass the [Lookup] to
//     cluster.Configure; cluster.StartMember calls Setup, which starts the
//     placement actor ([ActorName]) on members (clients have none) and
//     follows *cluster.ClusterTopology events.
//  2. cluster.Request calls Get on a PID cache miss. Get reads the key: a
//     live owner is asked for its PID; otherwise the member that rendezvous
//     hashing picks among the members accepting the kind ([WithAccepting])
//     is asked, and claims. A refusal or a lost claim makes Get look again,
//     within the activation timeout.
//  3. A grain that stops itself (passivation) releases its key; the next
//     call activates it again, wherever the rules above say.
//  4. [Lookup.Drain] refuses new activations on this member, sends every
//     local grain the drain message ([WithDrainMessage]) and waits for them
//     to stop; call it before leaving the cluster. [Lookup.Shutdown] (called
//     by cluster.Shutdown(true)) poisons what is left and releases it.
//  5. A member that dies releases nothing: once the membership drops it
//     from the topology, the next call for each of its grains is placed
//     again and the key taken over.
//
// A member cut off from the membership store but still running keeps its
// grains while survivors activate them again: placement alone cannot
// prevent that overlap, which is why grains write their state with
// compare-and-set (actors/session) and treat a lost write as the end of
// their activation.
//
// # Example
//
//	lookup, err := placement.New(js, placement.WithAccepting(provider.Accepting))
//	if err != nil { ... }
//	cfg := cluster.Configure("iii", provider, lookup, remote.Configure(host, 0),
//		cluster.WithKinds(cluster.NewKind(session.Kind, props)))
//	c := cluster.New(actor.NewActorSystem(), cfg)
//	c.StartMember()
//	res, err := c.Request(sessionID, session.Kind, msg)
//	...
//	_ = lookup.Drain(ctx) // before leaving: grains finish and move
//	c.Shutdown(true)
//
// proto.actor's own disthash lookup is not used: it swaps its hash table
// without a lock, compares PIDs by pointer and moves (poisons) grains
// mid-work on every topology change.
package placement
