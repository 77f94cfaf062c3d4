package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/state"
)

type env struct {
	ns    *server.Server
	e     *engine.Engine
	store *state.Store
}

func newEnv(t testing.TB, sopts []enginetest.ServerOption, opts ...state.Option) *env {
	t.Helper()
	ns := enginetest.RunServer(t, sopts...)
	e := enginetest.NewEngine(t, ns)
	return &env{ns: ns, e: e, store: newStore(t, e, opts...)}
}

func newStore(t testing.TB, e *engine.Engine, opts ...state.Option) *state.Store {
	t.Helper()
	s, err := state.New(context.Background(), e, opts...)
	if err != nil {
		t.Fatalf("state.New: %v", err)
	}
	return s
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// msgs is the number of messages in the bucket's stream: every write,
// delete marker included, adds one.
func (v *env) msgs(t testing.TB) uint64 {
	t.Helper()
	st, err := v.e.JetStream().Stream(context.Background(), "KV_"+v.store.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func (v *env) consumerInfo(t testing.TB, name string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := v.e.JetStream().Consumer(context.Background(), "KV_"+v.store.Bucket(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}
