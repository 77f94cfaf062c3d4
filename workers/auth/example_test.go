package auth_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
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
	x := enginetest.StartExample()
	defer x.Close()
	e := x.Engine
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
