package cluster_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster"
)

// A static three-node cluster: every node gets the same route list, itself
// included, and a unique name.
func ExampleConfig_Replicas() {
	routes := []string{"nats-route://10.0.0.1:6222", "nats-route://10.0.0.2:6222", "nats-route://10.0.0.3:6222"}
	cfg := cluster.Config{
		Name: "eu-1", StoreDir: "/var/lib/iii/jetstream", Region: "eu",
		Cluster: cluster.ClusterConfig{Listen: "10.0.0.1:6222", Routes: routes},
	}
	fmt.Println(cfg.Validate(), cfg.Peers(), cfg.Replicas())

	cfg.Name = "" // two nodes called "iii" would refuse each other's routes
	fmt.Println(cfg.Validate())
	// Output:
	// <nil> 3 3
	// cluster: invalid config: name is required for a clustered, gateway or leaf node: every server that meets another needs a unique name
}

// A hub that accepts edge servers, and an edge (leaf) that uses the hub's
// JetStream without running its own.
func ExampleStart_leaf() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir, _ := os.MkdirTemp("", "iii-example")
	defer os.RemoveAll(dir)

	hub, err := cluster.Start(ctx, cluster.Config{
		Name: "hub", Port: -1, StoreDir: dir,
		LeafNodes: cluster.LeafNodeConfig{Listen: "127.0.0.1:0", Users: []cluster.LeafUser{{User: "edge", Password: "secret"}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hub.Close(ctx)

	edge, err := cluster.Start(ctx, cluster.Config{
		Name: "edge-1", Port: -1,
		Leaf: cluster.LeafConfig{URLs: []string{"nats-leaf://" + hub.LeafAddr()}, User: "edge", Password: "secret"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer edge.Close(ctx)
	if err := edge.WaitJetStream(ctx); err != nil { // the hub answers through the leaf
		fmt.Println(err)
		return
	}

	nc, _ := nats.Connect(edge.ClientURL()) // a worker on the edge machine
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "settings"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, _ = kv.Put(ctx, "mode", []byte("edge"))
	e, _ := kv.Get(ctx, "mode")
	fmt.Println("JetStream on edge:", edge.Server().JetStreamEnabled(), "value:", string(e.Value()))
	// Output: JetStream on edge: false value: edge
}
