package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

type HelloReq struct {
	Name string `json:"name"`
}

func (r HelloReq) Validate() error {
	if r.Name == "" {
		return errors.New("name is required")
	}
	return nil
}

type HelloResp struct {
	Text string `json:"text"`
}

func Example() {
	dir, _ := os.MkdirTemp("", "iii-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(5e9)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()

	ctx := context.Background()
	e, _ := engine.New(nc)
	defer e.Close(ctx)
	w, _ := e.Worker("greeter")
	_ = w.Register(engine.Function{
		ID:          "greet::hello",
		Description: "Say hello.",
		Handler: engine.Typed(func(ctx context.Context, r HelloReq) (HelloResp, error) {
			return HelloResp{Text: "hello " + r.Name}, nil
		}),
	})

	resp, err := engine.Call[HelloResp](ctx, e, "greet::hello", HelloReq{Name: "ada"})
	fmt.Println(resp.Text, err)

	_, err = engine.Call[HelloResp](ctx, e, "greet::hello", HelloReq{})
	fmt.Println(errors.Is(err, wire.ErrInvalidPayload))

	err = e.Trigger(ctx, "greet::nobody", nil, nil)
	fmt.Println(err)
	// Output:
	// hello ada <nil>
	// true
	// function_not_found: no worker is registered for this function
}
