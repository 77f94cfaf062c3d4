package enginetest

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster/freeport"
	"github.com/iii-on-nats/iii/engine"
)

// ServerOption adjusts the server options before start.
type ServerOption func(*server.Options)

// WithMaxPayload sets the server's max payload.
func WithMaxPayload(n int32) ServerOption {
	return func(o *server.Options) { o.MaxPayload = n }
}

// WithStoreDir sets the JetStream store dir (to restart on the same data).
func WithStoreDir(dir string) ServerOption {
	return func(o *server.Options) { o.StoreDir = dir }
}

// WithPort fixes the client port (to restart on the same address).
func WithPort(port int) ServerOption {
	return func(o *server.Options) { o.Port = port }
}

// RunServer starts an embedded nats-server with JetStream: random port,
// store in t.TempDir(), no logging, limits small enough for tests.
func RunServer(t testing.TB, opts ...ServerOption) *server.Server {
	t.Helper()
	o := &server.Options{
		ServerName:         "test",
		Host:               "127.0.0.1",
		Port:               server.RANDOM_PORT,
		JetStream:          true,
		StoreDir:           t.TempDir(),
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  1 << 30,
		NoLog:              true,
		NoSigs:             true,
	}
	for _, opt := range opts {
		opt(o)
	}
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("enginetest: new server: %v", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("enginetest: server not ready in 10s")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// StopServer shuts ns down, as a server restart or crash does to the
// clients connected to it, and returns what starts its successor: a new
// server on the same port and JetStream store, with opts, so those clients
// reconnect to it and find their streams, buckets and durable consumers.
func StopServer(t testing.TB, ns *server.Server, opts ...ServerOption) (start func() *server.Server) {
	t.Helper()
	port := ns.Addr().(*net.TCPAddr).Port
	dir := filepath.Dir(ns.StoreDir()) // the server keeps its store in <dir>/jetstream
	ns.Shutdown()
	ns.WaitForShutdown()
	return func() *server.Server {
		t.Helper()
		return RunServer(t, append([]ServerOption{WithPort(port), WithStoreDir(dir)}, opts...)...)
	}
}

// RestartServer is [StopServer] followed at once by the start of the
// successor, which it returns.
func RestartServer(t testing.TB, ns *server.Server, opts ...ServerOption) *server.Server {
	t.Helper()
	return StopServer(t, ns, opts...)()
}

// Connect opens a client connection to ns, closed by t.Cleanup.
func Connect(t testing.TB, ns *server.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), append([]nats.Option{nats.MaxReconnects(-1)}, opts...)...)
	if err != nil {
		t.Fatalf("enginetest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// NewEngine returns an engine over a new connection to ns, closed by
// t.Cleanup.
func NewEngine(t testing.TB, ns *server.Server, opts ...engine.Option) *engine.Engine {
	t.Helper()
	e, err := engine.New(Connect(t, ns), opts...)
	if err != nil {
		t.Fatalf("enginetest: engine: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	return e
}

// Engine starts a server and returns an engine connected to it.
func Engine(t testing.TB, opts ...engine.Option) *engine.Engine {
	t.Helper()
	return NewEngine(t, RunServer(t), opts...)
}

// Eventually retries check until it returns nil or the timeout passes, then
// fails the test with the last error (nats-server's checkFor).
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = check(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("enginetest: condition not met in %v: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreePorts picks n distinct free loopback TCP ports and releases them,
// for servers that must know a port before they start (a cluster's
// routes, a gateway behind a proxy): [freeport.Loopback], below the
// kernel's ephemeral range.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := freeport.Loopback(n)
	if err != nil {
		t.Fatalf("enginetest: %v", err)
	}
	return ports
}

// BusAndLocal runs test twice in parallel subtests, "bus" and "local":
// local says whether the engines the test makes should have local calls
// on (engine.WithLocalCalls), as the workers of one `iii up` node do.
func BusAndLocal(t *testing.T, test func(t *testing.T, local bool)) {
	t.Helper()
	for _, local := range []bool{false, true} {
		name := "bus"
		if local {
			name = "local"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, local)
		})
	}
}

// RecreateKV deletes bucket cfg.Bucket, when it exists, and creates it
// again, as an operator's `nats kv rm` and `nats kv add` do. The create is
// retried for 10 s: nats-server 2.15 sometimes fails to create a stream
// right after deleting one of the same name ("error creating store for
// stream", JetStream error 10049), about once in 30 tries here.
func RecreateKV(t testing.TB, js jetstream.JetStream, cfg jetstream.KeyValueConfig) jetstream.KeyValue {
	t.Helper()
	ctx := context.Background()
	if err := js.DeleteKeyValue(ctx, cfg.Bucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("enginetest: delete bucket %s: %v", cfg.Bucket, err)
	}
	return CreateKV(t, js, cfg)
}

// CreateKV creates bucket cfg, retrying for 10 s as [RecreateKV] does.
func CreateKV(t testing.TB, js jetstream.JetStream, cfg jetstream.KeyValueConfig) jetstream.KeyValue {
	t.Helper()
	var kv jetstream.KeyValue
	Eventually(t, 10*time.Second, func() (err error) {
		kv, err = js.CreateKeyValue(context.Background(), cfg)
		return err
	})
	return kv
}
