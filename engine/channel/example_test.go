package channel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
)

func Example() {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		panic("server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	e, err := engine.New(nc)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The orchestrator opens the channel and hands its id to the provider.
	r, err := channel.Open(ctx, e)
	if err != nil {
		panic(err)
	}
	defer r.Close()

	// The provider (usually another process) writes events and ends.
	go func() {
		w, err := channel.NewWriter(e, r.ID())
		if err != nil {
			panic(err)
		}
		for _, delta := range []string{"Hel", "lo", "!"} {
			if err := w.Write(ctx, map[string]string{"type": "text_delta", "delta": delta}); err != nil {
				_ = w.Fail(ctx, err)
				return
			}
		}
		_ = w.Close(ctx)
	}()

	for {
		f, err := r.Next(ctx)
		if errors.Is(err, channel.ErrEnd) {
			fmt.Println("end")
			return
		}
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		var ev struct {
			Type  string `json:"type"`
			Delta string `json:"delta"`
		}
		if err := f.Decode(&ev); err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Println(f.Seq, ev.Type, ev.Delta)
	}
	// Output:
	// 1 text_delta Hel
	// 2 text_delta lo
	// 3 text_delta !
	// end
}
