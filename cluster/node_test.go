package cluster_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster"
)

func TestStartConnectRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	node, err := cluster.Start(ctx, cluster.Config{StoreDir: dir, Port: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := node.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// A TCP client too.
	tcp, err := nats.Connect(node.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	tcp.Close()
	nc.Close()
	if err := node.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Same store dir: the data survives a restart.
	node2, err := cluster.Start(ctx, cluster.Config{StoreDir: dir, Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer node2.Close(ctx)
	nc2, _ := node2.Connect()
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	kv2, err := js2.KeyValue(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv2.Get(ctx, "k")
	if err != nil || string(e.Value()) != "v" {
		t.Fatalf("after restart: %v %v", e, err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, cfg := range []cluster.Config{
		{},
		{StoreDir: t.TempDir(), Port: 70000},
	} {
		if _, err := cluster.Start(ctx, cfg); !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("Start(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	// A port in use: the second server cannot listen.
	n1, err := cluster.Start(ctx, cluster.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer n1.Close(ctx)
	port := n1.Server().Addr().(*net.TCPAddr).Port
	short, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	if n2, err := cluster.Start(short, cluster.Config{StoreDir: t.TempDir(), Port: port, Logger: slog.New(slog.DiscardHandler)}); !errors.Is(err, cluster.ErrNotReady) {
		if n2 != nil {
			_ = n2.Close(ctx)
		}
		t.Fatalf("second server on port %d: %v, want ErrNotReady", port, err)
	}
}
