package auth_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers/auth"
)

// Example stores a key with auth::set_token and shows what auth::status
// tells a human about it: where it comes from and its fingerprint, never
// the key itself.
func Example() {
	dir, err := os.MkdirTemp("", "auth-example") // mode 0700
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: filepath.Join(dir, "js"),
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 256 << 20, NoLog: true, NoSigs: true,
	})
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

	w := auth.NewWorker(
		auth.WithVaultPath(auth.DefaultVaultPath(dir)),
		auth.WithGetenv(func(string) string { return "" }), // ignore this machine's keys
	)
	if err := w.Start(ctx, e); err != nil {
		panic(err)
	}
	defer w.Close(ctx)

	_, err = engine.Call[auth.SetTokenResponse](ctx, e, auth.SetTokenFunction, auth.SetTokenRequest{
		Provider:   "anthropic",
		Credential: agent.Credential{Type: agent.CredentialAPIKey, Key: "sk-ant-example-key"},
	})
	fmt.Println("set:", err)

	st, err := engine.Call[auth.StatusResponse](ctx, e, auth.StatusFunction, auth.StatusRequest{})
	if err != nil {
		panic(err)
	}
	for _, p := range st.Providers {
		fmt.Printf("%s: source=%s type=%s fingerprint=%s\n", p.Provider, p.Source, p.Type, p.Fingerprint)
	}

	cred, err := engine.Call[*agent.Credential](ctx, e, auth.GetTokenFunction, auth.GetTokenRequest{Provider: "openai"})
	fmt.Println("openai:", cred, err)
	// Output:
	// set: <nil>
	// anthropic: source=vault type=api_key fingerprint=67574b9b
	// openai: <nil> <nil>
}
