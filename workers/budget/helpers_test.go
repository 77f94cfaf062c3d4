package budget

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// t0 is the tests' start time: Wednesday 2026-01-07 10:00 UTC.
var t0 = time.Date(2026, 1, 7, 10, 0, 0, 0, time.UTC)

// fakeClock is a settable clock shared by every ledger of a test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

type fixture struct {
	ns  *server.Server
	e   *engine.Engine
	w   *Worker
	l   *Ledger
	kv  jetstream.KeyValue
	clk *fakeClock
}

// newFixture starts a server, an engine and a started worker on a fake
// clock at t0.
func newFixture(t testing.TB, opts ...Option) *fixture {
	t.Helper()
	ns := enginetest.RunServer(t)
	clk := newClock(t0)
	f := &fixture{ns: ns, clk: clk}
	f.e, f.w = startWorker(t, ns, append([]Option{WithClock(clk.Now)}, opts...)...)
	f.l = f.w.Ledger()
	kv, err := f.e.JetStream().KeyValue(context.Background(), subjects.BudgetsBucket)
	if err != nil {
		t.Fatal(err)
	}
	f.kv = kv
	return f
}

// startWorker starts another engine (its own connection) with a worker.
func startWorker(t testing.TB, ns *server.Server, opts ...Option) (*engine.Engine, *Worker) {
	t.Helper()
	e := enginetest.NewEngine(t, ns)
	w := NewWorker(opts...)
	if err := w.Start(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return e, w
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (f *fixture) create(t testing.TB, req CreateRequest) Budget {
	t.Helper()
	b, err := engine.Call[Budget](ctxT(t), f.e, CreateFunction, req)
	if err != nil {
		t.Fatalf("create %+v: %v", req, err)
	}
	return b
}

func (f *fixture) reserve(t testing.TB, req ReserveRequest) (ReserveResponse, error) {
	t.Helper()
	return engine.Call[ReserveResponse](ctxT(t), f.e, ReserveFunction, req)
}

func (f *fixture) mustReserve(t testing.TB, req ReserveRequest) ReserveResponse {
	t.Helper()
	r, err := f.reserve(t, req)
	if err != nil {
		t.Fatalf("reserve %+v: %v", req, err)
	}
	return r
}

func (f *fixture) settle(t testing.TB, rid string, actual float64) (SettleResponse, error) {
	t.Helper()
	return engine.Call[SettleResponse](ctxT(t), f.e, SettleFunction, SettleRequest{ReservationID: rid, ActualUSD: actual})
}

func (f *fixture) mustSettle(t testing.TB, rid string, actual float64) SettleResponse {
	t.Helper()
	r, err := f.settle(t, rid, actual)
	if err != nil {
		t.Fatalf("settle %s: %v", rid, err)
	}
	return r
}

// usage returns the status of budget id now.
func (f *fixture) usage(t testing.TB, id string) Status {
	t.Helper()
	r, err := engine.Call[UsageResponse](ctxT(t), f.e, UsageFunction, UsageRequest{BudgetID: id})
	if err != nil {
		t.Fatalf("usage %s: %v", id, err)
	}
	if len(r.Budgets) != 1 {
		t.Fatalf("usage %s: %+v", id, r.Budgets)
	}
	return r.Budgets[0]
}

// state reads the raw period state of budget id in the period at now.
func (f *fixture) state(t testing.TB, b Budget, at time.Time) periodState {
	t.Helper()
	start, _ := b.Period.Bounds(at)
	ent, err := f.kv.Get(context.Background(), spendKey(b.BudgetID, start))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return periodState{}
	}
	if err != nil {
		t.Fatal(err)
	}
	var st periodState
	if err := json.Unmarshal(ent.Value(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// alerts reads every alert in the alert stream, oldest first.
func alerts(t testing.TB, e *engine.Engine) []Alert {
	t.Helper()
	ctx := ctxT(t)
	s, err := e.JetStream().Stream(ctx, subjects.BudgetAlertStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []Alert
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var a Alert
		if err := json.Unmarshal(m.Data, &a); err != nil {
			t.Fatal(err)
		}
		if m.Subject != subjects.BudgetAlertSubjectPrefix+a.BudgetID || m.Header.Get(jetstream.MsgIDHeader) != a.MsgID() {
			t.Fatalf("alert %+v on %s with id %q", a, m.Subject, m.Header.Get(jetstream.MsgIDHeader))
		}
		out = append(out, a)
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
