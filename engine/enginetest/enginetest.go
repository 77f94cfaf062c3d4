package enginetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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
// routes, a gateway behind a proxy).
//
// The ports come from below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), which the kernel never hands
// out by itself: a port picked with ":0" and released goes back to that
// range, where any connection's local end or another server on a random
// port can take it before the server that was meant to listen on it
// starts — and a nats-server whose route or gateway port is taken never
// becomes ready. Where the range cannot be read, the kernel picks (":0").
// Every listener stays open until all are picked, so the n are distinct.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	lo := ephemeralLow()
	for attempts := 0; len(ports) < n; attempts++ {
		addr := "127.0.0.1:0"
		if lo > freePortFloor && attempts < 100*n {
			addr = fmt.Sprintf("127.0.0.1:%d", freePortFloor+rand.IntN(lo-freePortFloor))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // taken: pick another
			}
			t.Fatalf("enginetest: free port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// freePortFloor is the lowest port FreePorts picks: above the registered
// ports services commonly listen on.
const freePortFloor = 20000

// ephemeralLow is the first port of the kernel's ephemeral range, 0 when
// unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}
