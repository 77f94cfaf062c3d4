package models

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// acmeFile is the test catalog: acme (a dated id with an alias, a small
// and an old model) and zeta (an id with '/' and '.').
const acmeFile = "testdata/acme.json"

// acmeOpts replaces the embedded catalog with the test catalog.
func acmeOpts() []Option {
	return []Option{WithCatalog([]agent.Model{}), WithCatalogFile(acmeFile)}
}

type fixture struct {
	ns *server.Server
	e  *engine.Engine
	w  *Worker
	s  *Store
	kv jetstream.KeyValue
}

// newFixture starts a server, an engine and a started worker with opts.
func newFixture(t testing.TB, opts ...Option) *fixture {
	t.Helper()
	return newFixtureOn(t, enginetest.RunServer(t), opts...)
}

// newFixtureOn is newFixture on server ns (one with a smaller max
// payload, say).
func newFixtureOn(t testing.TB, ns *server.Server, opts ...Option) *fixture {
	t.Helper()
	e := enginetest.NewEngine(t, ns)
	w := NewWorker(opts...)
	ctx := context.Background()
	if err := w.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	kv, err := e.EnsureKV(ctx, BucketConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ns: ns, e: e, w: w, s: w.Store(), kv: kv}
}

// fakeProvider serves provider::<name>::models with whatever set last
// gave it (an answer or an error), on its own engine worker.
type fakeProvider struct {
	mu    sync.Mutex
	resp  ProviderModelsResponse
	err   error
	block bool
	calls int
}

func (p *fakeProvider) set(ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resp = ProviderModelsResponse{Models: make([]ProviderModel, len(ids))}
	for i, id := range ids {
		p.resp.Models[i] = ProviderModel{ID: id}
	}
	p.err = nil
}

func (p *fakeProvider) setModels(models ...ProviderModel) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resp = ProviderModelsResponse{Models: models}
	p.err = nil
}

func serveProvider(t testing.TB, e *engine.Engine, provider string) *fakeProvider {
	t.Helper()
	p := &fakeProvider{}
	ew, err := e.Worker("fake-provider-" + provider)
	if err != nil {
		t.Fatal(err)
	}
	err = ew.Register(engine.Function{
		ID: ProviderModelsFunction(provider),
		Handler: engine.Typed(func(ctx context.Context, _ struct{}) (ProviderModelsResponse, error) {
			p.mu.Lock()
			p.calls++
			resp, perr, block := p.resp, p.err, p.block
			p.mu.Unlock()
			if block {
				<-ctx.Done()
				return ProviderModelsResponse{}, ctx.Err()
			}
			return resp, perr
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ew.Close(ctx)
	})
	return p
}

// lastSeq is the last sequence of the models bucket's stream: it moves
// on every write.
func lastSeq(t testing.TB, e *engine.Engine) uint64 {
	t.Helper()
	st, err := e.JetStream().Stream(context.Background(), "KV_"+subjects.ModelsBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// ids lists the ids of models.
func ids(models []Model) []string {
	out := make([]string, len(models))
	for i, m := range models {
		out[i] = m.ID
	}
	return out
}

// mustGet is Store.Get that fails the test on error.
func mustGet(t testing.TB, s *Store, provider, id string) *Model {
	t.Helper()
	m, err := s.Get(provider, id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
