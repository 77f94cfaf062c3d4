// Package cluster runs the NATS side of an iii node: an embedded nats-server
// with JetStream, configured from one [Config] struct (yaml-tagged, so it can
// come from a file), started with [Start] and stopped with [Node.Close].
//
// # Lifecycle
//
//  1. [Config.Validate] reports every mistake at once, each wrapping
//     [ErrInvalidConfig]; [Start] calls it too.
//  2. [Start] starts the server and returns once all its listeners accept
//     connections. A fatal server error (a port in use) ends it at once with
//     [ErrNotReady] and the server's reason.
//  3. [Node.WaitJetStream] waits until JetStream is usable from this node:
//     at once when standalone, until the meta group has a leader when
//     clustered, until the hub answers through the leaf connection on a leaf.
//     After 2 s it logs "waiting for JetStream" (a warning, every 10 s)
//     with what is missing: the servers the meta group expects, the routes
//     and gateways up; its error at the bound says the same.
//  4. [Node.Connect] opens in-process client connections (no TCP);
//     [Node.ClientURL] is what other processes dial.
//  5. [Node.Close] shuts the server down.
//
// # Topologies
//
// Standalone (the default of `iii up`): one process, one server, data under
// one store directory.
//
// Cluster (one region): [ClusterConfig] with a Listen address and Routes.
// Give every member the same route list, itself included, and a unique
// [Config.Name]. nats-server refuses a JetStream cluster without configured
// routes, so a member cannot start on a random route port with an empty list:
// fix the ports. A cluster of one is refused ([Config.Validate]: routes that
// name only this node): nats-server sizes a new meta group at two servers
// at least and starts its RAFT only once another server is connected, so
// it would wait for ever; run one node standalone. A brand-new cluster
// elects its meta leader once every member its routes name is up (later, a
// majority is enough). [Start] refuses a clustered start on the store of a
// standalone node: the clustered server would not see its streams; and a
// standalone start on a member's store: it would serve the cluster's
// streams alone, and diverge.
// [Config.Replicas] is 3 when the routes name at least three members: use
// it as the R of streams and KV buckets.
//
// Supercluster (regions): [Config.Region] names the cluster and is its
// gateway name; [GatewayConfig] dials the other regions (one side of each
// pair is enough). A one-node region needs no [ClusterConfig]: Start gives
// it a loopback-only route to itself, which the server requires for
// JetStream. One JetStream meta group spans all regions: a stream lives in
// the region it was created from and is used from any region, but meta
// operations (create a stream or bucket, create a consumer or a KV watch)
// need a quorum of all servers of all regions. With two regions, losing one
// stops them in the other (existing buckets still Put and Get); run three
// regions, or a tie-breaker node, if a region must survive another's loss.
//
// Authentication: routes and gateways accept anyone who reaches their port
// unless [ClusterConfig] and [GatewayConfig] set an [Auth], one user and
// password shared by every member (nats-server checks it on the connections
// it accepts and presents it on those it dials; Start adds it to every
// route URL). The password may be in a file, read by Start. Credentials in
// route or gateway URLs are refused, and errors never repeat a URL's
// password. Start logs a warning for each route, gateway or leaf node
// listener bound to a non-loopback address without authentication.
//
// Leaf nodes (edge machines): a hub accepts edges on [LeafNodeConfig]
// (with Users; empty Users means any host that reaches the port joins with
// full rights), an edge sets [LeafConfig] and runs without JetStream. Every
// node with JetStream is in domain [JetStreamDomain], and an edge maps its
// clients' $JS.API, $KV and $OBJ subjects into it, because nats-server
// denies the plain subjects on leaf connections: edge clients use the hub's
// streams and KV with the default jetstream API, as if local. An edge needs a
// unique Name too: a hub drops an older leaf connection when another with the
// same server name binds to the same account.
//
// # Example
//
//	node, err := cluster.Start(ctx, cluster.Config{
//		Name: "eu-1", StoreDir: dir, Region: "eu",
//		Cluster: cluster.ClusterConfig{Listen: "0.0.0.0:6222", Routes: []string{
//			"nats-route://eu-1:6222", "nats-route://eu-2:6222", "nats-route://eu-3:6222"}},
//		Gateway: cluster.GatewayConfig{Listen: "0.0.0.0:7222", Gateways: []cluster.RemoteGateway{
//			{Name: "us", URLs: []string{"nats://us-1:7222"}}}},
//	})
//	if err != nil { ... }
//	defer node.Close(ctx)
//	if err := node.WaitJetStream(ctx); err != nil { ... }
//	nc, _ := node.Connect()           // in-process connection, no TCP
//	js, _ := jetstream.New(nc)
//	kv, _ := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b", Replicas: node.Config().Replicas()})
package cluster
