package enginetest

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
)

// Example is what a runnable Example function needs (it has no
// testing.TB): an embedded nats-server with JetStream in a temporary
// directory, a connection and an engine on it. Close stops all of it and
// removes the directory.
type Example struct {
	Server *server.Server
	Conn   *nats.Conn
	Engine *engine.Engine
	dir    string
}

// StartExample starts an [Example] with opts for the engine; it panics on
// failure, as an Example may.
func StartExample(opts ...engine.Option) *Example {
	dir, err := os.MkdirTemp("", "iii-example-")
	if err != nil {
		panic(err)
	}
	x := &Example{dir: dir}
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir,
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 256 << 20, NoLog: true, NoSigs: true,
	})
	if err != nil {
		x.Close()
		panic(err)
	}
	ns.Start()
	x.Server = ns
	if !ns.ReadyForConnections(10 * time.Second) {
		x.Close()
		panic("enginetest: example server not ready in 10s")
	}
	if x.Conn, err = nats.Connect(ns.ClientURL()); err != nil {
		x.Close()
		panic(err)
	}
	if x.Engine, err = engine.New(x.Conn, opts...); err != nil {
		x.Close()
		panic(fmt.Sprintf("enginetest: engine: %v", err))
	}
	return x
}

// Close stops the engine, the connection and the server, and removes the
// store.
func (x *Example) Close() {
	if x.Engine != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = x.Engine.Close(ctx)
		cancel()
	}
	if x.Conn != nil {
		x.Conn.Close()
	}
	if x.Server != nil {
		x.Server.Shutdown()
		x.Server.WaitForShutdown()
	}
	_ = os.RemoveAll(x.dir)
}
