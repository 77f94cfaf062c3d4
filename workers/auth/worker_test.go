package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

func setToken(ctx context.Context, e *engine.Engine, provider string, c agent.Credential) error {
	_, err := engine.Call[SetTokenResponse](ctx, e, SetTokenFunction, SetTokenRequest{Provider: provider, Credential: c})
	return err
}

func getToken(ctx context.Context, e *engine.Engine, provider string) (*agent.Credential, error) {
	return engine.Call[*agent.Credential](ctx, e, GetTokenFunction, GetTokenRequest{Provider: provider})
}

func status(ctx context.Context, e *engine.Engine, provider string) ([]ProviderStatus, error) {
	r, err := engine.Call[StatusResponse](ctx, e, StatusFunction, StatusRequest{Provider: provider})
	return r.Providers, err
}

func TestSetGetDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, nil)
	ctx := ctxT(t)

	if c, err := getToken(ctx, f.e, "anthropic"); err != nil || c != nil {
		t.Fatalf("get before set = %v, %v; want null", c, err)
	}
	r, err := engine.Call[SetTokenResponse](ctx, f.e, SetTokenFunction, SetTokenRequest{Provider: "anthropic", Credential: testKey})
	if err != nil || !r.OK {
		t.Fatalf("set = %+v, %v", r, err)
	}
	c, err := getToken(ctx, f.e, "anthropic")
	if err != nil || c == nil || *c != testKey {
		t.Fatalf("get = %v, %v", c, err)
	}
	// Replace with OAuth tokens.
	oauth := agent.Credential{Type: agent.CredentialOAuth, AccessToken: "at-1", RefreshToken: "rt-1", ExpiresAt: testNow.UnixMilli() + 1000}
	if err := setToken(ctx, f.e, "anthropic", oauth); err != nil {
		t.Fatal(err)
	}
	if c, err := getToken(ctx, f.e, "anthropic"); err != nil || c == nil || *c != oauth {
		t.Fatalf("get oauth = %v, %v", c, err)
	}
	d, err := engine.Call[DeleteTokenResponse](ctx, f.e, DeleteTokenFunction, DeleteTokenRequest{Provider: "anthropic"})
	if err != nil || !d.Deleted {
		t.Fatalf("delete = %+v, %v", d, err)
	}
	d, err = engine.Call[DeleteTokenResponse](ctx, f.e, DeleteTokenFunction, DeleteTokenRequest{Provider: "anthropic"})
	if err != nil || d.Deleted {
		t.Fatalf("second delete = %+v, %v", d, err)
	}
	if c, err := getToken(ctx, f.e, "anthropic"); err != nil || c != nil {
		t.Fatalf("get after delete = %v, %v", c, err)
	}
}

// An expired OAuth credential is returned as it is; status says expired.
func TestExpiredOAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, nil)
	ctx := ctxT(t)
	expired := agent.Credential{Type: agent.CredentialOAuth, AccessToken: "at-old", ExpiresAt: testNow.UnixMilli() - 1}
	fresh := agent.Credential{Type: agent.CredentialOAuth, AccessToken: "at-new", RefreshToken: "rt", ExpiresAt: testNow.UnixMilli() + 1}
	forever := agent.Credential{Type: agent.CredentialOAuth, AccessToken: "at-forever"}
	for p, c := range map[string]agent.Credential{"old": expired, "new": fresh, "forever": forever} {
		if err := setToken(ctx, f.e, p, c); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := getToken(ctx, f.e, "old"); err != nil || c == nil || *c != expired {
		t.Fatalf("expired token = %v, %v; want it returned", c, err)
	}
	tru, fal := true, false
	want := map[string]ProviderStatus{
		"old":     {Provider: "old", Source: SourceVault, Type: agent.CredentialOAuth, ExpiresAt: expired.ExpiresAt, Expired: &tru, HasRefreshToken: &fal, Fingerprint: Fingerprint(expired)},
		"new":     {Provider: "new", Source: SourceVault, Type: agent.CredentialOAuth, ExpiresAt: fresh.ExpiresAt, Expired: &fal, HasRefreshToken: &tru, Fingerprint: Fingerprint(fresh)},
		"forever": {Provider: "forever", Source: SourceVault, Type: agent.CredentialOAuth, HasRefreshToken: &fal, Fingerprint: Fingerprint(forever)},
	}
	for p, w := range want {
		got, err := status(ctx, f.e, p)
		if err != nil || len(got) != 1 {
			t.Fatalf("status %s = %+v, %v", p, got, err)
		}
		if statusString(got[0]) != statusString(w) {
			t.Errorf("status %s = %s, want %s", p, statusString(got[0]), statusString(w))
		}
	}
}

func statusString(s ProviderStatus) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Vault beats the environment; III_<P>_API_KEY beats the well-known
// variable; the environment is read at every call.
func TestEnvPrecedence(t *testing.T) {
	t.Parallel()
	env := newEnv()
	f := newFixture(t, env, nil)
	ctx := ctxT(t)

	check := func(provider, wantKey, wantSource, wantVar string) {
		t.Helper()
		c, err := getToken(ctx, f.e, provider)
		if err != nil {
			t.Fatal(err)
		}
		if wantKey == "" {
			if c != nil {
				t.Fatalf("%s: got a credential, want null", provider)
			}
			if st, err := status(ctx, f.e, provider); err != nil || len(st) != 0 {
				t.Fatalf("%s: status = %+v, %v; want none", provider, st, err)
			}
			return
		}
		if c == nil || c.Type != agent.CredentialAPIKey || c.Key != wantKey {
			t.Fatalf("%s: got %v (key match %v), want key %s", provider, c, c != nil && c.Key == wantKey, wantKey)
		}
		st, err := status(ctx, f.e, provider)
		if err != nil || len(st) != 1 || st[0].Source != wantSource || st[0].EnvVar != wantVar || st[0].Fingerprint != Fingerprint(*c) {
			t.Fatalf("%s: status = %+v, %v; want source %s env_var %q", provider, st, err, wantSource, wantVar)
		}
	}

	check("anthropic", "", "", "")
	env.Set("ANTHROPIC_API_KEY", "sk-well-known")
	check("anthropic", "sk-well-known", SourceEnv, "ANTHROPIC_API_KEY")
	env.Set("III_ANTHROPIC_API_KEY", "  sk-iii-own\n") // trimmed
	check("anthropic", "sk-iii-own", SourceEnv, "III_ANTHROPIC_API_KEY")
	if err := setToken(ctx, f.e, "anthropic", testKey); err != nil {
		t.Fatal(err)
	}
	check("anthropic", testKey.Key, SourceVault, "")
	if _, err := engine.Call[DeleteTokenResponse](ctx, f.e, DeleteTokenFunction, DeleteTokenRequest{Provider: "anthropic"}); err != nil {
		t.Fatal(err)
	}
	check("anthropic", "sk-iii-own", SourceEnv, "III_ANTHROPIC_API_KEY")

	// A malformed value is skipped, not served.
	env.Set("III_ANTHROPIC_API_KEY", "sk bad")
	check("anthropic", "sk-well-known", SourceEnv, "ANTHROPIC_API_KEY")
	env.Set("ANTHROPIC_API_KEY", "   ")
	check("anthropic", "", "", "")

	// The well-known variable of one provider is not another's.
	env.Set("OPENAI_API_KEY", "sk-openai")
	check("openai", "sk-openai", SourceEnv, "OPENAI_API_KEY")
	check("ollama", "", "", "")
	env.Set("III_OLLAMA_API_KEY", "ollama-key")
	check("ollama", "ollama-key", SourceEnv, "III_OLLAMA_API_KEY")
	env.Set("III_MY_LLM_API_KEY", "my-key")
	check("my-llm", "my-key", SourceEnv, "III_MY_LLM_API_KEY")
}

func TestStatusAndListProviders(t *testing.T) {
	t.Parallel()
	env := newEnv("OPENAI_API_KEY", "sk-openai", "III_OLLAMA_API_KEY", "ollama-key")
	f := newFixture(t, env, nil, WithProviders("ollama", "vllm"))
	ctx := ctxT(t)
	if err := setToken(ctx, f.e, "kimi", testKey); err != nil {
		t.Fatal(err)
	}

	st, err := status(ctx, f.e, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range st {
		got = append(got, s.Provider+":"+s.Source+":"+s.EnvVar)
	}
	if want := "kimi:vault:,ollama:env:III_OLLAMA_API_KEY,openai:env:OPENAI_API_KEY"; strings.Join(got, ",") != want {
		t.Fatalf("status = %v, want %s", got, want)
	}

	lp, err := engine.Call[ListProvidersResponse](ctx, f.e, ListProvidersFunction, ListProvidersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := []ProviderInfo{
		{"anthropic", "ANTHROPIC_API_KEY", false},
		{"kimi", "III_KIMI_API_KEY", true},
		{"ollama", "III_OLLAMA_API_KEY", true},
		{"openai", "OPENAI_API_KEY", true},
		{"vllm", "III_VLLM_API_KEY", false},
	}
	if fmt.Sprint(lp.Providers) != fmt.Sprint(want) {
		t.Fatalf("list_providers = %v, want %v", lp.Providers, want)
	}
	env.Set("III_OPENAI_API_KEY", "sk-iii")
	lp, err = engine.Call[ListProvidersResponse](ctx, f.e, ListProvidersFunction, ListProvidersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if lp.Providers[3].EnvVar != "III_OPENAI_API_KEY" {
		t.Fatalf("openai env_var = %q, want the one in effect", lp.Providers[3].EnvVar)
	}

	// Never null.
	empty := newFixture(t, nil, nil)
	raw, _, err := empty.e.TriggerRaw(ctx, StatusFunction, []byte(`{}`), wire.JSON)
	if err != nil || string(raw) != `{"providers":[]}` {
		t.Fatalf("empty status = %s, %v", raw, err)
	}
}

// Every function answers invalid_payload to bad input, in both codecs, and
// nothing is written.
func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, nil)
	ctx := ctxT(t)
	cases := []struct {
		fn, body string
	}{
		{GetTokenFunction, `{}`},
		{GetTokenFunction, `{"provider":"a.b"}`},
		{GetTokenFunction, `{"provider":5}`},
		{GetTokenFunction, `[]`},
		{GetTokenFunction, `{"provider":"x"`},
		{GetTokenFunction, `{"provider":"x"} trailing`},
		{SetTokenFunction, `{"provider":"p"}`},
		{SetTokenFunction, `{"provider":"p","credential":null}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"bearer","key":"k"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key","key":"a b"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"api_key","key":"` + strings.Repeat("k", MaxKeyBytes+1) + `"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"oauth"}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"oauth","access_token":"a","expires_at":-5}}`},
		{SetTokenFunction, `{"provider":"p","credential":{"type":"oauth","access_token":"a","expires_at":"soon"}}`},
		{SetTokenFunction, `{"provider":"","credential":{"type":"api_key","key":"k"}}`},
		{SetTokenFunction, `{"provider":"p","credential":"k"}`},
		{DeleteTokenFunction, `{"provider":"a b"}`},
		{DeleteTokenFunction, `{}`},
		{StatusFunction, `{"provider":"a*"}`},
		{StatusFunction, `{"provider":true}`},
		{StatusFunction, `{"after":"a b"}`},
		{StatusFunction, `{"after":7}`},
		{StatusFunction, `{"provider":"p","after":"q"}`},
		{ListProvidersFunction, `[1]`},
		{ListProvidersFunction, `{"after":"a.b"}`},
		{ListProvidersFunction, `{"after":"` + strings.Repeat("a", agent.MaxIDLen+1) + `"}`},
		{ListProvidersFunction, `{"after":["a"]}`},
	}
	for _, tc := range cases {
		for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
			body := []byte(tc.body)
			if codec == wire.Msgpack {
				var v any
				if json.Unmarshal(body, &v) != nil {
					continue // not JSON: the msgpack case is covered by the fuzzer
				}
				var err error
				if body, err = wire.Msgpack.Marshal(v); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := f.e.TriggerRaw(ctx, tc.fn, body, codec)
			if !errors.Is(err, wire.ErrInvalidPayload) {
				t.Errorf("%s %s (%s) = %v, want invalid_payload", tc.fn, tc.body, codec.ContentType(), err)
			}
		}
	}
	// Garbage msgpack.
	if _, _, err := f.e.TriggerRaw(ctx, SetTokenFunction, []byte{0xc1, 0x00}, wire.Msgpack); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Errorf("garbage msgpack = %v", err)
	}
	if _, err := os.Stat(f.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused request wrote the vault: %v", err)
	}
}

// A vault loosened or corrupted while the worker runs makes every
// function answer internal; the file is left alone.
func TestVaultErrorsOnTheWire(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, nil)
	ctx := ctxT(t)
	if err := setToken(ctx, f.e, "p", testKey); err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		fn  string
		req any
	}{
		{GetTokenFunction, GetTokenRequest{Provider: "p"}},
		{SetTokenFunction, SetTokenRequest{Provider: "q", Credential: testKey}},
		{DeleteTokenFunction, DeleteTokenRequest{Provider: "p"}},
		{StatusFunction, StatusRequest{}},
		{StatusFunction, StatusRequest{Provider: "p"}},
		{ListProvidersFunction, ListProvidersRequest{}},
	}
	run := func(what string, sentinel error) {
		t.Helper()
		for _, c := range calls {
			err := f.e.Trigger(ctx, c.fn, c.req, nil)
			if !errors.Is(err, wire.ErrInternal) {
				t.Errorf("%s: %s = %v, want internal", what, c.fn, err)
			}
			// The Go side keeps the cause.
			local := callLocal(f.store, c.fn, c.req)
			if !errors.Is(local, sentinel) || !errors.Is(local, wire.ErrInternal) {
				t.Errorf("%s: local %s = %v, want %v", what, c.fn, local, sentinel)
			}
		}
	}
	if err := os.Chmod(f.path, 0o644); err != nil {
		t.Fatal(err)
	}
	run("0644", ErrInsecureVault)
	if err := os.Chmod(f.path, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := []byte(`{"version":1,"credentials":{"p":`)
	if err := os.WriteFile(f.path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	run("corrupt", ErrCorruptVault)
	if got, _ := os.ReadFile(f.path); string(got) != string(bad) {
		t.Fatalf("corrupt vault replaced: %q", got)
	}
}

// callLocal calls the store method behind fn.
func callLocal(s *Store, fn string, req any) error {
	var err error
	switch r := req.(type) {
	case GetTokenRequest:
		_, err = s.Token(r.Provider)
	case SetTokenRequest:
		err = s.SetToken(r.Provider, r.Credential)
	case DeleteTokenRequest:
		_, err = s.DeleteToken(r.Provider)
	case StatusRequest:
		_, err = s.Status(r.Provider)
	case ListProvidersRequest:
		_, err = s.ListProviders()
	default:
		err = fmt.Errorf("no local call for %s", fn)
	}
	return err
}

// 16 goroutines set tokens at once, some on the same provider: the vault
// ends valid, private, with every provider, and no temp file.
func TestConcurrentSetToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, nil)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := fmt.Sprintf("p%02d", i%12)
			c := agent.Credential{Type: agent.CredentialAPIKey, Key: fmt.Sprintf("key-%02d", i)}
			if err := setToken(ctx, f.e, p, c); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	data, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeVault(data)
	if err != nil {
		t.Fatalf("vault after concurrent sets: %v", err)
	}
	if len(m) != 12 {
		t.Fatalf("vault has %d providers, want 12", len(m))
	}
	for p, c := range m {
		var i int
		if _, err := fmt.Sscanf(c.Key, "key-%02d", &i); err != nil || fmt.Sprintf("p%02d", i%12) != p {
			t.Errorf("%s holds %s", p, c.Key)
		}
	}
	if got := mode(t, f.path); got != 0o600 {
		t.Fatalf("vault mode %04o", got)
	}
	if names, _ := filepath.Glob(filepath.Join(filepath.Dir(f.path), "*"+tmpInfix+"*")); len(names) != 0 {
		t.Fatalf("temp files left: %v", names)
	}
}

// The nats CLI's view: raw JSON on iii.fn.auth.status with no headers.
func TestRawJSONStatus(t *testing.T) {
	t.Parallel()
	f := newFixture(t, newEnv("ANTHROPIC_API_KEY", "sk-env-raw"), nil)
	ctx := ctxT(t)
	if err := setToken(ctx, f.e, "openai", testKey); err != nil {
		t.Fatal(err)
	}
	nc := enginetest.Connect(t, f.ns)
	msg, err := nc.Request("iii.fn.auth.status", []byte(`{}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if werr := wire.Decode(msg); werr != nil {
		t.Fatal(werr)
	}
	var got map[string][]map[string]any
	if err := json.Unmarshal(msg.Data, &got); err != nil {
		t.Fatalf("reply %s is not JSON: %v", msg.Data, err)
	}
	ps := got["providers"]
	if len(ps) != 2 || ps[0]["provider"] != "anthropic" || ps[0]["source"] != "env" || ps[0]["env_var"] != "ANTHROPIC_API_KEY" ||
		ps[1]["provider"] != "openai" || ps[1]["source"] != "vault" || ps[1]["type"] != "api_key" || ps[1]["fingerprint"] != Fingerprint(testKey) {
		t.Fatalf("status reply %s", msg.Data)
	}
	if _, ok := ps[1]["env_var"]; ok {
		t.Fatalf("vault entry has env_var: %s", msg.Data)
	}
	if strings.Contains(string(msg.Data), "sk-env-raw") || strings.Contains(string(msg.Data), testKey.Key) {
		t.Fatalf("status leaks a secret: %s", msg.Data)
	}

	// Empty body = {}; a bad one is a coded error in JSON.
	msg, err = nc.Request("iii.fn.auth.status", nil, 5*time.Second)
	if err != nil || wire.Decode(msg) != nil {
		t.Fatalf("empty body: %v %v", err, wire.Decode(msg))
	}
	msg, err = nc.Request("iii.fn.auth.status", []byte(`{"provider":"no way"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	werr := wire.Decode(msg)
	if !errors.Is(werr, wire.ErrInvalidPayload) || msg.Header.Get("Nats-Service-Error-Code") != "400" {
		t.Fatalf("bad provider: %v, headers %v", werr, msg.Header)
	}
	var env wire.Envelope
	if err := json.Unmarshal(msg.Data, &env); err != nil || env.Error == nil || env.Error.Code != wire.CodeInvalidPayload {
		t.Fatalf("error body %s", msg.Data)
	}
	// And get_token answers null in JSON.
	msg, err = nc.Request("iii.fn.auth.get_token", []byte(`{"provider":"nobody"}`), 5*time.Second)
	if err != nil || string(msg.Data) != "null" {
		t.Fatalf("get_token nobody = %s, %v", msg.Data, err)
	}
}

func TestFunctionsCatalog(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, nil)
	idem := map[string]bool{}
	for _, fn := range f.store.functions(f.e.Conn().MaxPayload) {
		idem[fn.ID] = fn.Idempotent
		for _, schema := range []string{fn.RequestSchema, fn.ResponseSchema} {
			if !json.Valid([]byte(schema)) {
				t.Errorf("%s: schema is not JSON: %s", fn.ID, schema)
			}
		}
	}
	want := map[string]bool{GetTokenFunction: true, SetTokenFunction: false, DeleteTokenFunction: false, StatusFunction: true, ListProvidersFunction: true}
	if fmt.Sprint(idem) != fmt.Sprint(want) {
		t.Fatalf("idempotent = %v, want %v", idem, want)
	}
	for _, id := range []string{GetTokenFunction, SetTokenFunction, DeleteTokenFunction} {
		if !agent.IsHumanOnly(id) {
			t.Errorf("%s is not on agent.HumanOnly", id)
		}
	}
	for _, id := range []string{StatusFunction, ListProvidersFunction} {
		if agent.IsHumanOnly(id) {
			t.Errorf("%s is on agent.HumanOnly; a model may read status", id)
		}
	}
}

func TestWorkerLifecycle(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := ctxT(t)

	t.Run("no vault path", func(t *testing.T) {
		if err := NewWorker().Start(ctx, e); !errors.Is(err, ErrNoVault) {
			t.Fatalf("Start = %v", err)
		}
		if err := NewWorker().Provision(ctx, workers.Env{}); !errors.Is(err, ErrNoVault) {
			t.Fatalf("Provision = %v", err)
		}
	})
	t.Run("twice and after close", func(t *testing.T) {
		e := enginetest.NewEngine(t, ns)
		w := NewWorker(WithVaultPath(vaultPath(t)))
		if err := w.Start(ctx, e); err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx, e); !errors.Is(err, ErrStarted) {
			t.Fatalf("second Start = %v", err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatalf("second Close = %v", err)
		}
		if err := w.Start(ctx, e); !errors.Is(err, engine.ErrClosed) {
			t.Fatalf("Start after Close = %v", err)
		}
	})
	t.Run("settings", func(t *testing.T) {
		for name, tc := range map[string]struct {
			settings map[string]string
			home     string
			want     error
		}{
			"unknown":       {map[string]string{"vualt": "x"}, t.TempDir(), engine.ErrInvalidOption},
			"empty vault":   {map[string]string{SettingVault: ""}, t.TempDir(), engine.ErrInvalidOption},
			"bad providers": {map[string]string{SettingProviders: "ok, not ok"}, t.TempDir(), engine.ErrInvalidOption},
			"no home":       {map[string]string{SettingProviders: "ollama"}, "", ErrNoVault},
		} {
			w := NewWorker()
			err := w.Provision(ctx, workers.Env{Home: tc.home, Settings: map[string]map[string]string{WorkerName: tc.settings}})
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: Provision = %v, want %v", name, err, tc.want)
			}
		}
	})
}

// The module through a registry: default path under the home, a relative
// "vault" setting resolved against the home, and a refused vault that
// stops the node before anything is registered.
func TestModule(t *testing.T) {
	t.Parallel()
	m, err := workers.Global().Module(WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)

	// A server per case: a case's functions must not answer (or, while the
	// server drops a closed connection's interest, swallow) another's calls.
	start := func(t *testing.T, env workers.Env) (*engine.Engine, *workers.Running, error) {
		t.Helper()
		r := workers.NewRegistry()
		if err := r.Register(m); err != nil {
			t.Fatal(err)
		}
		e := enginetest.NewEngine(t, enginetest.RunServer(t))
		run, err := r.Start(ctx, e, env, WorkerName)
		if run != nil {
			t.Cleanup(func() { _ = run.Close(context.Background()) })
		}
		return e, run, err
	}

	t.Run("default path", func(t *testing.T) {
		home := t.TempDir()
		e, _, err := start(t, workers.Env{Home: home, Settings: map[string]map[string]string{WorkerName: {SettingProviders: "ollama, vllm"}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := setToken(ctx, e, "anthropic", testKey); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(home, "auth", "credentials.json")
		if got := mode(t, path); got != 0o600 {
			t.Fatalf("vault %s mode %04o", path, got)
		}
		if got := mode(t, filepath.Dir(path)); got != 0o700 {
			t.Fatalf("vault dir mode %04o", got)
		}
		lp, err := engine.Call[ListProvidersResponse](ctx, e, ListProvidersFunction, ListProvidersRequest{})
		if err != nil || len(lp.Providers) != 4 {
			t.Fatalf("list_providers = %+v, %v", lp, err)
		}
		if err := e.Trigger(ctx, StatusFunction, StatusRequest{}, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("relative vault setting", func(t *testing.T) {
		home := t.TempDir()
		e, _, err := start(t, workers.Env{Home: home, Settings: map[string]map[string]string{WorkerName: {SettingVault: "secrets/keys.json"}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := setToken(ctx, e, "openai", testKey); err != nil {
			t.Fatal(err)
		}
		if got := mode(t, filepath.Join(home, "secrets", "keys.json")); got != 0o600 {
			t.Fatalf("vault mode %04o", got)
		}
	})
	t.Run("refuses an open vault", func(t *testing.T) {
		home := t.TempDir()
		if err := os.Mkdir(filepath.Join(home, "auth"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(home, "auth"), 0o755); err != nil {
			t.Fatal(err)
		}
		e, _, err := start(t, workers.Env{Home: home})
		if !errors.Is(err, ErrInsecureVault) {
			t.Fatalf("Start = %v, want ErrInsecureVault", err)
		}
		if err := e.Trigger(ctx, StatusFunction, StatusRequest{}, nil); !errors.Is(err, wire.ErrFunctionNotFound) {
			t.Fatalf("status on a refused node = %v, want function_not_found", err)
		}
	})
	t.Run("refuses a corrupt vault", func(t *testing.T) {
		home := t.TempDir()
		if err := os.Mkdir(filepath.Join(home, "auth"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(DefaultVaultPath(home), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := start(t, workers.Env{Home: home}); !errors.Is(err, ErrCorruptVault) {
			t.Fatalf("Start = %v, want ErrCorruptVault", err)
		}
	})
}
