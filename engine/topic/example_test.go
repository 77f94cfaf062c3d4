package topic_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/topic"
)

type order struct {
	ID string `json:"id"`
}

func Example() {
	dir, _ := os.MkdirTemp("", "topic-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 256 << 20})
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(5 * time.Second) {
		return
	}
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()
	e, _ := engine.New(nc)
	ctx := context.Background()
	defer e.Close(ctx)

	// Two functions subscribe to "orders"; each gets every order.
	got := make(chan string, 2)
	w, _ := e.Worker("shop")
	for _, id := range []string{"billing::on_order", "mail::on_order"} {
		_ = w.Register(engine.Function{ID: id, Handler: engine.Typed(func(_ context.Context, o order) (struct{}, error) {
			got <- id + " " + o.ID
			return struct{}{}, nil
		})})
		sub, err := topic.Subscribe(ctx, e, "orders", id)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer sub.Close(ctx)
	}

	if err := topic.Publish(ctx, e, "orders", order{ID: "o-1"}); err != nil {
		fmt.Println(err)
		return
	}
	lines := []string{<-got, <-got}
	sort.Strings(lines)
	fmt.Println(lines[0])
	fmt.Println(lines[1])
	// Output:
	// billing::on_order o-1
	// mail::on_order o-1
}
