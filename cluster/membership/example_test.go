package membership_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/membership"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// One proto.actor member on an embedded NATS server: it joins, drains and
// leaves, and List shows its entry each time.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	js, err := jetstream.New(x.Conn)
	if err != nil {
		panic(err)
	}
	p, err := membership.New(js, membership.WithMeta(map[string]string{"node": "n1"}))
	if err != nil {
		panic(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	kind := cluster.NewKind("session", actor.PropsFromFunc(func(actor.Context) {}))
	c := cluster.New(sys, cluster.Configure("iii", p, disthash.New(), remote.Configure("127.0.0.1", 0),
		cluster.WithKinds(kind)))
	c.StartMember() // calls p.StartMember

	ctx := context.Background()
	show := func() {
		members, err := membership.List(ctx, js, "iii")
		if err != nil {
			panic(err)
		}
		if len(members) == 0 {
			fmt.Println("no members")
		}
		for _, m := range members {
			node, known := p.MetaOf(m.ID, "node")
			fmt.Println(m.ID == sys.ID, m.Kinds, m.Status, node, known, "accepting:", p.Accepting(m.ID, "session"))
		}
	}
	show()
	if err := p.Drain(ctx); err != nil {
		panic(err)
	}
	show()
	c.Shutdown(true) // calls p.Shutdown(true): the entry is deleted
	show()
	// Output:
	// true [prototopic session] up n1 true accepting: true
	// true [prototopic session] draining n1 true accepting: false
	// no members
}

func ExampleKey() {
	key, err := membership.Key("iii", "4hzZqkA7uNPmCmMWDPoVzC")
	fmt.Println(key, err)
	_, err = membership.Key("eu.west", "4hzZqkA7uNPmCmMWDPoVzC")
	fmt.Println(err != nil)
	// Output:
	// iii.4hzZqkA7uNPmCmMWDPoVzC <nil>
	// true
}
