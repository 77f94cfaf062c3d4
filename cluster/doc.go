// Package cluster runs the NATS side of an iii node: an embedded nats-server
// with JetStream, configured from one [Config] struct, started with [Start]
// and stopped with [Node.Close].
//
// A single node is the default of `iii up`: one process, one embedded
// server, data under one store directory. The same Config later grows
// routes (a cluster in one region), gateways (regions joined into a
// supercluster) and leaf nodes (edge workers).
//
//	node, err := cluster.Start(ctx, cluster.Config{StoreDir: dir, Port: -1})
//	if err != nil { ... }
//	defer node.Close(ctx)
//	nc, _ := node.Connect()           // in-process connection, no TCP
//	fmt.Println(node.ClientURL())     // what other processes dial
package cluster
