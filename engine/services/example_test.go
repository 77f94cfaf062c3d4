package services_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/services"
)

func Example() {
	dir, _ := os.MkdirTemp("", "services-example")
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

	svc, err := services.Start(ctx, e, services.WithGateway())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer svc.Close(ctx)
	// Any NATS client now has the engine's functions:
	// nats req iii.fn.state.set '{"scope":"orders","key":"o1","value":{"total":42}}'
	if err := e.Trigger(ctx, "state::set", map[string]any{"scope": "orders", "key": "o1", "value": map[string]any{"total": 42}}, nil); err != nil {
		fmt.Println(err)
		return
	}
	var got struct {
		Value struct {
			Total int `json:"total"`
		} `json:"value"`
	}
	if err := e.Trigger(ctx, "state::get", map[string]any{"scope": "orders", "key": "o1"}, &got); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("total:", got.Value.Total, "gateway:", svc.Gateway() != nil)
	// Output: total: 42 gateway: true
}
