// Package membership is a proto.actor cluster provider
// (cluster.ClusterProvider) that keeps the cluster's members in a JetStream
// KV bucket, so that iii nodes form a proto.actor cluster with nothing but
// NATS: no Consul, etcd or Kubernetes.
//
// # How it works
//
// Every member writes its [Entry] (id, gRPC host and port, grain kinds,
// status, meta) as JSON under "<cluster name>.<member id>" in the bucket
// subjects.MembersBucket ("iii-members") and rewrites it every heartbeat.
// The bucket is created on first use with History 1, memory storage, a TTL
// and LimitMarkerTTL of the same length: an entry that is not rewritten
// ages out, and the server then writes a limit marker that every watcher
// sees as a purge. Every member (and client) watches "<cluster name>.*" and
// hands the full live set to proto.actor's MemberList after the initial
// values and whenever a member joins or leaves. So:
//
//   - join: a new entry appears; all members see it at once;
//   - graceful leave ([Provider.Shutdown](true)): the entry is deleted; all
//     members see it at once;
//   - crash: nobody deletes anything; a member that sees the entry
//     unwritten for the TTL (5 s by default) while its own heartbeats land
//     drops it and deletes its key (the stale sweep, below).
//
// An existing bucket is used as it is: the first creator's TTL wins. The
// creator stores its member TTL in the bucket's metadata ([MetaMemberTTL])
// and every member and client sweeps with that one, whatever its own
// [WithTTL] (a member whose heartbeat is too slow for it heartbeats
// faster): members that expected different lifetimes would sweep, and
// expel, those that heartbeat slower than they expect. A bucket without
// it (made by hand or by an older build) leaves each with its own.
//
// # Failures
//
//   - A failed heartbeat is logged and retried at the next tick. If the
//     bucket is gone (memory storage does not survive the restart of a
//     single NATS server), the member creates it again and rewrites its
//     entry at once.
//   - The watch is opened again as soon as the connection reconnects
//     (engine.WatchKV), resuming after the last update seen: joins, leaves
//     and draining marks made while the node's NATS server restarted are
//     seen at once, not after nats.go misses its heartbeats (≈ 20 s). A
//     watch that ends (the bucket was lost or created again) or delivers
//     nothing for a TTL (a member's own heartbeats alone arrive every
//     heartbeat) is replaced by a new one; members missing from the new
//     watch's initial values are not dropped for that.
//   - The stale sweep, in server time, drops a member whose last write is
//     a TTL older than this member's own last write (a client: than the
//     newest message), and a member deletes the keys it swept. A member
//     never sweeps itself. Staleness across an outage is no evidence: when
//     nothing landed in the bucket for half a TTL (an election after the
//     node holding the stream leader died), everyone gets a fresh
//     lifetime, in the watch's initial values too (a member joining as the
//     bucket comes back must not sweep the survivors).
//   - The bucket's own expiry (its TTL is 12 TTLs, at least a minute; a
//     limit marker, seen as a purge) is no evidence either: the stream
//     leader's clock ran on while the bucket was out. The member stays;
//     one whose own entry expired writes it again at once.
//   - A member whose own entry is deleted while it runs has been dropped
//     by the others: it stops heartbeating and closes [Provider.Expelled].
//     A departed member's entry that is written again (a put it sent while
//     cut off, landing late) is deleted again, so that it learns it is
//     out.
//   - An entry that does not decode, or whose id differs from its key, is
//     logged and ignored.
//   - A nats.go KV watch may end its initial values before a key that is
//     being rewritten at that instant (a heartbeat). Before the first
//     topology is published, the keys of the bucket's stream are read
//     and every live entry the watch missed is added, so the first
//     topology lacks no live member (placement would take over the
//     grains of a member missing from it). If that read fails it is
//     logged, and such a member joins with its next heartbeat.
//
// # Draining
//
// [Provider.Drain] marks the own entry "draining". The member stays in the
// proto.actor topology and keeps its grains; [Provider.Accepting], which
// the placement (package cluster/placement) asks before it activates a
// grain, says no for it.
//
// # Rejoining
//
// proto.actor puts a member id that left the topology on its block list
// for good, and this package likewise never takes a departed id back. A
// node that crashed, was expelled ([Provider.Expelled]) or left rejoins as
// a new member: a new ActorSystem (new id), a new cluster.Cluster and a new
// Provider. A Provider is started once.
//
// # Lifecycle
//
//  1. [New] with a jetstream.JetStream and options; no I/O.
//  2. cluster.Configure(name, provider, lookup, remoteConfig, kinds...) and
//     cluster.New; Cluster.StartMember calls [Provider.StartMember], which
//     writes the entry, starts heartbeats and the watch, and returns once
//     the first topology is published (Cluster.StartClient calls
//     [Provider.StartClient]: watch only).
//  3. [Provider.Drain] before a planned stop, if grains should move first.
//  4. Cluster.Shutdown(true) calls [Provider.Shutdown](true): heartbeats and
//     the watch stop and the entry is deleted. Cluster.Shutdown(false) does
//     not call the provider: call Provider.Shutdown(false) yourself.
//
// [List] reads the entries of a cluster without joining it.
//
// Nothing here reads proto.actor's MemberList.Members or Length, which
// race with topology updates upstream; [Provider.Members] is the
// provider's own view.
//
// # Example
//
//	p, err := membership.New(js, membership.WithMeta(map[string]string{"node": "n1"}))
//	if err != nil { ... }
//	cfg := cluster.Configure("iii", p, lookup, remote.Configure("0.0.0.0", 0), cluster.WithKinds(kind))
//	c := cluster.New(actor.NewActorSystem(), cfg)
//	c.StartMember()          // panics if the provider fails, as proto.actor does
//	defer c.Shutdown(true)
//	...
//	members, err := membership.List(ctx, js, "iii")
package membership
