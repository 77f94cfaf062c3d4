package auth

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// testNow is the fixed clock of the tests.
var testNow = time.UnixMilli(1_700_000_000_000)

// fakeEnv is an environment tests change while the worker runs.
type fakeEnv struct {
	mu sync.Mutex
	m  map[string]string
}

func newEnv(kv ...string) *fakeEnv {
	e := &fakeEnv{m: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		e.m[kv[i]] = kv[i+1]
	}
	return e
}

func (e *fakeEnv) Get(k string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[k]
}

func (e *fakeEnv) Set(k, v string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if v == "" {
		delete(e.m, k)
		return
	}
	e.m[k] = v
}

type fixture struct {
	ns    *server.Server
	e     *engine.Engine
	w     *Worker
	env   *fakeEnv
	path  string
	store *Store
}

// vaultPath is a fresh vault path in a private temp dir; the vault's own
// directory does not exist yet.
func vaultPath(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), VaultDir, VaultFile)
}

// newFixture starts a server, an engine (with engineOpts) and a started
// worker over a fresh vault, the fake env and the fixed clock.
func newFixture(t testing.TB, env *fakeEnv, engineOpts []engine.Option, opts ...Option) *fixture {
	t.Helper()
	return newFixtureOn(t, enginetest.RunServer(t), env, engineOpts, opts...)
}

// newFixtureOn is [newFixture] on the server ns.
func newFixtureOn(t testing.TB, ns *server.Server, env *fakeEnv, engineOpts []engine.Option, opts ...Option) *fixture {
	t.Helper()
	if env == nil {
		env = newEnv()
	}
	e := enginetest.NewEngine(t, ns, engineOpts...)
	path := vaultPath(t)
	all := append([]Option{WithVaultPath(path), WithGetenv(env.Get), WithClock(func() time.Time { return testNow })}, opts...)
	w := NewWorker(all...)
	if err := w.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return &fixture{ns: ns, e: e, w: w, env: env, path: path, store: w.Store()}
}

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// debugLogger logs everything at debug level into buf.
func debugLogger(buf *enginetest.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// mode is the permission bits of path.
func mode(t testing.TB, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}
