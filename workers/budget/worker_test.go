package budget

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
)

// Raw JSON requests, as `nats req iii.fn.budget.reserve '{...}'` sends.
func TestRawJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	nc := enginetest.Connect(t, f.ns)
	req := func(fn, body string) (string, *wire.Error) {
		t.Helper()
		subj, err := subjects.FunctionSubject(fn)
		if err != nil {
			t.Fatal(err)
		}
		m, err := nc.Request(subj, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if we := wire.Decode(m); we != nil {
			return "", we
		}
		if ct := m.Header.Get(wire.HeaderContentType); ct != wire.ContentJSON {
			t.Fatalf("%s replied in %s", fn, ct)
		}
		return string(m.Data), nil
	}
	out, we := req(CreateFunction, `{"budget_id":"b1","ceiling_usd":2,"period":"day","workspace_id":"ws1"}`)
	if we != nil {
		t.Fatal(we)
	}
	wantBudget := `{"budget_id":"b1","ceiling_usd":2,"period":"day","workspace_id":"ws1","alert_thresholds":[0.5,0.8,1],"created_at":1767780000000}`
	if out != wantBudget {
		t.Fatalf("create: %s\nwant    %s", out, wantBudget)
	}
	out, we = req(ReserveFunction, `{"workspace_id":"ws1","agent_id":"coder","estimated_usd":0.5,"reservation_id":"call-1"}`)
	if we != nil {
		t.Fatal(we)
	}
	want := `{"reservation_id":"call-1","budgets":[{"budget_id":"b1","ceiling_usd":2,"period":"day","workspace_id":"ws1","period_start":1767744000000,"period_end":1767830400000,"spent_usd":0,"reserved_usd":0.5,"remaining_usd":1.5}]}`
	if out != want {
		t.Fatalf("reserve: %s\nwant     %s", out, want)
	}
	out, we = req(SettleFunction, `{"reservation_id":"call-1","actual_usd":0.25}`)
	if we != nil || !strings.Contains(out, `"spent_usd":0.25,"reserved_usd":0,"remaining_usd":1.75`) {
		t.Fatalf("settle: %s %v", out, we)
	}
	out, we = req(UsageFunction, `{}`)
	if we != nil || !strings.HasPrefix(out, `{"budgets":[{"budget_id":"b1"`) {
		t.Fatalf("usage: %s %v", out, we)
	}
	out, we = req(UsageFunction, ``) // no body at all
	if we != nil || !strings.HasPrefix(out, `{"budgets":[`) {
		t.Fatalf("usage with no body: %s %v", out, we)
	}
	out, we = req(CheckFunction, `{"workspace_id":"ws1","estimated_usd":1.8}`)
	if we != nil || !strings.HasPrefix(out, `{"allowed":false,`) {
		t.Fatalf("check: %s %v", out, we)
	}
	out, we = req(ListFunction, `{}`)
	if we != nil || out != `{"budgets":[`+wantBudget+`]}` {
		t.Fatalf("list: %s %v", out, we)
	}
	out, we = req(DeleteFunction, `{"budget_id":"zzz"}`)
	if we != nil || out != `{"deleted":false}` {
		t.Fatalf("delete: %s %v", out, we)
	}

	for _, tc := range []struct {
		fn, body string
		want     *wire.Error
	}{
		{ReserveFunction, `{"workspace_id":"ws1","estimated_usd":5,"reservation_id":"call-2"}`, wire.ErrBudgetExceeded},
		{ReserveFunction, `{"workspace_id":"ws1","estimated_usd":"5","reservation_id":"call-2"}`, wire.ErrInvalidPayload},
		{ReserveFunction, `{"workspace_id":"ws1","estimated_usd":-1,"reservation_id":"call-2"}`, wire.ErrInvalidPayload},
		{ReserveFunction, `{"workspace_id":"ws1","estimated_usd":1e400,"reservation_id":"call-2"}`, wire.ErrInvalidPayload},
		{ReserveFunction, `{"estimated_usd":1,"reservation_id":"call-2"}`, wire.ErrInvalidPayload},
		{ReserveFunction, `{"budget_id":"nope","estimated_usd":1,"reservation_id":"call-2"}`, wire.ErrNotFound},
		{SettleFunction, `{"reservation_id":"nope","actual_usd":1}`, wire.ErrNotFound},
		{SettleFunction, `{"reservation_id":"a.b","actual_usd":1}`, wire.ErrInvalidPayload},
		{CreateFunction, `{"ceiling_usd":1,"period":"day"}`, wire.ErrInvalidPayload},
		{CreateFunction, `{"ceiling_usd":1,"period":"fortnight","agent_id":"a"}`, wire.ErrInvalidPayload},
		{CreateFunction, `{"budget_id":"b1","ceiling_usd":1,"period":"day","agent_id":"a"}`, wire.ErrConflict},
		{CreateFunction, `{"ceiling_usd":1,"period":"day","agent_id":"a","alert_thresholds":[2]}`, wire.ErrInvalidPayload},
		{UsageFunction, `{"budget_id":"b1","agent_id":"a"}`, wire.ErrInvalidPayload},
		{CheckFunction, `{}`, wire.ErrInvalidPayload},
		{DeleteFunction, `{}`, wire.ErrInvalidPayload},
		{UsageFunction, `{"budget_id":`, wire.ErrInvalidPayload},
		{ListFunction, `[]`, wire.ErrInvalidPayload},
	} {
		if out, we := req(tc.fn, tc.body); !errors.Is(we, tc.want) {
			t.Errorf("%s %s: %s %v, want %s", tc.fn, tc.body, out, we, tc.want.Code)
		}
	}
}

func TestModuleLifecycle(t *testing.T) {
	t.Parallel()
	m, err := workers.Global().Module(WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	reg := workers.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	e := enginetest.Engine(t)
	ctx := context.Background()
	for _, settings := range []map[string]string{
		{"nope": "1"},
		{SettingRetention: "soon"},
		{SettingReservationTTL: "1ms"},
		{SettingRetention: "9999h"},
	} {
		env := workers.Env{Settings: map[string]map[string]string{WorkerName: settings}}
		if _, err := reg.Start(ctx, e, env, WorkerName); !errors.Is(err, engine.ErrInvalidOption) {
			t.Fatalf("settings %v: %v", settings, err)
		}
	}
	env := workers.Env{Settings: map[string]map[string]string{WorkerName: {SettingReservationTTL: "2m", SettingRetention: "10m"}}}
	run, err := reg.Start(ctx, e, env, WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Call[Budget](ctx, e, CreateFunction, CreateRequest{AgentID: "a", CeilingUSD: 1, Period: PeriodDay}); err != nil {
		t.Fatal(err)
	}
	fns := map[string]bool{}
	for _, fn := range (&Ledger{}).functions() {
		fns[fn.ID] = fn.Idempotent
		if fn.Description == "" {
			t.Errorf("%s has no description", fn.ID)
		}
		for _, s := range []string{fn.RequestSchema, fn.ResponseSchema} {
			if !json.Valid([]byte(s)) {
				t.Errorf("%s: schema is not JSON: %s", fn.ID, s)
			}
		}
	}
	want := map[string]bool{CreateFunction: false, DeleteFunction: true, ListFunction: true, CheckFunction: true,
		ReserveFunction: true, SettleFunction: true, UsageFunction: true}
	for id, idem := range want {
		if got, ok := fns[id]; !ok || got != idem {
			t.Errorf("%s: registered %v, idempotent %v; want idempotent %v", id, ok, got, idem)
		}
	}
	// Moving ceilings or spend is never the model's to do.
	for _, id := range []string{CreateFunction, DeleteFunction, ReserveFunction, SettleFunction} {
		if !agent.IsHumanOnly(id) {
			t.Errorf("%s is not on agent.HumanOnly", id)
		}
	}
	if err := run.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Call[ListResponse](ctx, e, ListFunction, ListRequest{}); !errors.Is(err, wire.ErrFunctionNotFound) {
		t.Fatalf("after close: %v", err)
	}
}

func TestWorkerStartClose(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()
	w := NewWorker(WithReservationTTL(time.Minute))
	if w.Ledger() != nil {
		t.Fatal("ledger before start")
	}
	if err := w.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx, e); !errors.Is(err, ErrStarted) {
		t.Fatalf("second start: %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := w.Start(ctx, e); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("start after close: %v", err)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]Option{
		"nil clock":     WithClock(nil),
		"nil logger":    WithLogger(nil),
		"ttl short":     WithReservationTTL(time.Millisecond),
		"ttl long":      WithReservationTTL(25 * time.Hour),
		"retention 0":   WithRetention(0),
		"attempts 0":    WithMaxAttempts(0),
		"attempts huge": WithMaxAttempts(1 << 20),
	} {
		if _, err := buildOptions([]Option{opt}); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("%s: %v", name, err)
		}
	}
	e := enginetest.Engine(t)
	if _, err := Open(context.Background(), e, WithMaxAttempts(0)); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("open with a bad option: %v", err)
	}
}

// A bucket made without per-key TTLs is refused at Open, loudly.
func TestOpenRefusesBucketWithoutTTL(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()
	cfg := BucketConfig()
	cfg.LimitMarkerTTL = 0
	if _, err := e.JetStream().CreateKeyValue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, e); !errors.Is(err, ErrNoTTLSupport) {
		t.Fatalf("open: %v", err)
	}
}

// A lost compare-and-set is retried; past the bound the call answers
// conflict (retryable).
func TestCASConflictBound(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithMaxAttempts(1))
	b := f.create(t, CreateRequest{BudgetID: "b1", WorkspaceID: "W", CeilingUSD: 1, Period: PeriodDay})
	key := spendKey(b.BudgetID, mustBounds(PeriodDay, t0))
	ctx := ctxT(t)
	_, err := f.l.casState(ctx, key, func(st *periodState, _ bool) bool {
		// Another node writes between our read and our write.
		if _, err := f.kv.Put(ctx, key, []byte(`{"spent_usd":0.5}`)); err != nil {
			t.Fatal(err)
		}
		st.SpentUSD = 0.1
		return true
	})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeConflict || !we.Retryable {
		t.Fatalf("lost CAS: %v", err)
	}
	if st := f.state(t, b, t0); st.SpentUSD != 0.5 {
		t.Fatalf("state %+v", st)
	}
}
