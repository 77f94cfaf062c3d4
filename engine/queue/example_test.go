package queue_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/queue"
)

type email struct {
	To string `json:"to"`
}

func Example() {
	dir, _ := os.MkdirTemp("", "queue-example")
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

	// The function the queue calls.
	sent := make(chan string, 1)
	w, _ := e.Worker("mailer")
	_ = w.Register(engine.Function{ID: "mail::send", Handler: engine.Typed(func(_ context.Context, m email) (struct{}, error) {
		sent <- m.To
		return struct{}{}, nil
	})})

	// The consumer, anywhere on the bus; replicas share the queue.
	c, err := queue.Consume(ctx, e, "emails", queue.WithMaxDeliver(5))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close(ctx)

	// The producer.
	if err := e.Enqueue(ctx, "emails", "mail::send", email{To: "ada@example.com"}, engine.WithDedupID("welcome-ada")); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("sent to", <-sent)
	// Output: sent to ada@example.com
}
