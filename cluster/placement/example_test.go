package placement_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/placement"
)

func ExampleKey() {
	fmt.Println(placement.Key("session", "s_01J8Z-abc")) // KV-safe: kept
	fmt.Println(placement.Key("session", "a.b"))         // escaped
	kind, id, _ := placement.ParseKey("session.=YS5i")
	fmt.Println(kind, id)

	long := placement.Key("session", strings.Repeat("x", 300)) // hashed
	_, _, err := placement.ParseKey(long)
	fmt.Println(len(long), errors.Is(err, placement.ErrKeyNotReversible))
	// Output:
	// session.s_01J8Z-abc
	// session.=YS5i
	// session a.b
	// 53 true
}

// Owner tells a CLI which member hosts a grain, straight from the bucket.
func ExampleOwner() {
	dir, _ := os.MkdirTemp("", "placement-example-")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(5 * time.Second)
	nc, _ := nats.Connect("", nats.InProcessServer(ns))
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()

	if _, err := placement.New(js); err != nil { // creates the bucket
		fmt.Println(err)
		return
	}
	_, err := placement.Owner(ctx, js, "session", "s-1")
	fmt.Println(errors.Is(err, placement.ErrNoOwner))

	// What a member's placement actor writes when it claims the grain.
	kv, _ := js.KeyValue(ctx, "iii-grains")
	_, _ = kv.Create(ctx, placement.Key("session", "s-1"), []byte(`{"member":"m-7","address":"10.0.0.7:8090"}`))
	member, _ := placement.Owner(ctx, js, "session", "s-1")
	fmt.Println(member)
	// Output:
	// true
	// m-7
}
