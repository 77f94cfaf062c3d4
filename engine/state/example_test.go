package state_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/state"
)

func Example() {
	dir, _ := os.MkdirTemp("", "state-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir,
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 256 << 20, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(5 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	e, _ := engine.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer e.Close(ctx)

	store, err := state.New(ctx, e)
	if err != nil {
		fmt.Println(err)
		return
	}
	// A durable trigger with a Go callback (OnChange calls a function).
	events := make(chan state.Event, 4)
	sub, err := state.OnChangeFunc(ctx, e, store, state.Trigger{Scope: "orders", FunctionID: "example::audit"},
		func(_ context.Context, ev state.Event) error { events <- ev; return nil },
		state.WithMaxAckPending(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Stop()

	old, cur, _ := store.Set(ctx, "orders", "o-1", map[string]any{"status": "new"})
	fmt.Println("set:", old, cur)
	old, cur, _ = store.Update(ctx, "orders", "o-1", []state.Op{
		state.Set("status", "paid"),
		state.Increment("stats.payments", 1),
	})
	fmt.Println("update:", old, cur)
	v, rev, _ := store.Get(ctx, "orders", "o-1")
	fmt.Println("get:", v, rev)

	for range 2 {
		ev := <-events
		fmt.Println("event:", ev.EventType, ev.Key, ev.OldValue, "->", ev.NewValue)
	}
	// Output:
	// set: <nil> map[status:new]
	// update: map[status:new] map[stats:map[payments:1] status:paid]
	// get: map[stats:map[payments:1] status:paid] 2
	// event: state:created o-1 <nil> -> map[status:new]
	// event: state:updated o-1 map[status:new] -> map[stats:map[payments:1] status:paid]
}
