package approval

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
)

// A raw JSON request, as `nats req iii.fn.approval.resolve '{...}'` sends.
func TestResolveOverRawJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rec := record(t, "s1", "toolu_01", "fs::write", map[string]any{"path": "/etc/hosts"}, 7)
	key, _ := park(t, f.approvals, rec)
	nc := enginetest.Connect(t, f.ns)
	subj, err := subjects.FunctionSubject(ResolveFunction)
	if err != nil {
		t.Fatal(err)
	}
	if subj != "iii.fn.approval.resolve" {
		t.Fatalf("subject %s", subj)
	}
	body := `{"session_id":"s1","function_call_id":"toolu_01","decision":"allow","reason":"ok by me","args_hash":"` + rec.ArgsHash + `"}`
	m, err := nc.Request(subj, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if we := wire.Decode(m); we != nil {
		t.Fatal(we)
	}
	if string(m.Data) != `{"ok":true,"decision":"allow","decided_at":1700000000123}` || m.Header.Get(wire.HeaderContentType) != wire.ContentJSON {
		t.Fatalf("reply %s (%s)", m.Data, m.Header.Get(wire.HeaderContentType))
	}
	if got, _, _ := stored(t, f.approvals, key); got.Status != agent.ApprovalDecided || got.Reason != "ok by me" {
		t.Fatalf("record %+v", got)
	}
	// The same request again (a `nats req` retried after a timeout): the
	// recorded decision.
	m, err = nc.Request(subj, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if we := wire.Decode(m); we != nil || string(m.Data) != `{"ok":true,"already_decided":true,"decision":"allow","decided_at":1700000000123}` {
		t.Fatalf("repeated: %v %s", we, m.Data)
	}
	for body, want := range map[string]*wire.Error{
		`{"session_id":"s1","function_call_id":"toolu_01","decision":"deny"}`: wire.ErrNotPending,
		`{"session_id":"s1","function_call_id":"a.b","decision":"deny"}`:      wire.ErrInvalidPayload,
		`{"session_id":"s1","function_call_id":"toolu_01","decision":true}`:   wire.ErrInvalidPayload,
		`{"session_id":"s1"`: wire.ErrInvalidPayload,
		``:                   wire.ErrInvalidPayload,
	} {
		m, err := nc.Request(subj, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if we := wire.Decode(m); !errors.Is(we, want) {
			t.Errorf("%s: %v, want %v", body, we, want.Code)
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
	bad := workers.Env{Settings: map[string]map[string]string{WorkerName: {"nope": "1"}}}
	if _, err := reg.Start(ctx, e, bad, WorkerName); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("unknown setting: %v", err)
	}
	run, err := reg.Start(ctx, e, workers.Env{}, WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	// The functions are served, with the flags the chokepoint relies on.
	if st, err := engine.Call[agent.ApprovalSettings](ctx, e, SettingsGetFunction, SettingsGetRequest{SessionID: "s"}); err != nil || st.Mode != agent.ApprovalManual {
		t.Fatalf("settings::get: %+v, %v", st, err)
	}
	fns := map[string]bool{}
	for _, fn := range (&Store{}).functions() {
		fns[fn.ID] = fn.Idempotent
		if fn.Description == "" || fn.RequestSchema == "" || fn.ResponseSchema == "" {
			t.Errorf("%s lacks a description or schema", fn.ID)
		}
	}
	want := map[string]bool{ResolveFunction: false, ListPendingFunction: true, SettingsGetFunction: true, SettingsSetFunction: false}
	for id, idem := range want {
		if got, ok := fns[id]; !ok || got != idem {
			t.Errorf("%s: registered %v, idempotent %v; want idempotent %v", id, ok, got, idem)
		}
	}
	for _, id := range []string{ResolveFunction, SettingsSetFunction} {
		if !agent.IsHumanOnly(id) {
			t.Errorf("%s is not on agent.HumanOnly", id)
		}
	}
	if err := run.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Call[agent.ApprovalSettings](ctx, e, SettingsGetFunction, SettingsGetRequest{SessionID: "s"}); !errors.Is(err, wire.ErrFunctionNotFound) {
		t.Fatalf("after close: %v", err)
	}
}

func TestWorkerStartClose(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx := context.Background()
	w := NewWorker()
	if w.Store() != nil {
		t.Fatal("store before start")
	}
	if err := w.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx, e); !errors.Is(err, ErrStarted) {
		t.Fatalf("second start: %v", err)
	}
	if w.Store() == nil {
		t.Fatal("no store after start")
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
	if err := NewWorker().Close(ctx); err != nil {
		t.Fatalf("close unstarted: %v", err)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]Option{"nil clock": WithClock(nil), "nil logger": WithLogger(nil)} {
		if _, err := buildOptions([]Option{opt}); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("%s: %v", name, err)
		}
	}
	e := enginetest.Engine(t)
	if err := NewWorker(WithClock(nil)).Start(context.Background(), e); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("start with a bad option: %v", err)
	}
	if _, err := buildOptions([]Option{nil}); err != nil {
		t.Fatal(err)
	}
}

// Every Store method refuses bad input itself, for in-process callers.
func TestStoreValidates(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s, ctx := f.w.Store(), context.Background()
	errs := []error{
		resolveIn(ctx, s, ResolveRequest{SessionID: "a.b.c", FunctionCallID: "c", Decision: "allow"}),
		func() error { _, err := s.ListPending(ctx, "a>"); return err }(),
		func() error { _, err := s.Settings(ctx, ""); return err }(),
		func() error { _, err := s.SetSettings(ctx, SettingsSetRequest{SessionID: "a*"}); return err }(),
	}
	for i, err := range errs {
		if !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%d: %v", i, err)
		}
	}
}

// JetStream trouble is unavailable (retryable); the caller's context ending
// is canceled or timeout.
func TestStoreErrors(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	s, err := Open(ctx, e, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	m := agent.ApprovalAuto
	calls := map[string]func(context.Context) error{
		"resolve": func(ctx context.Context) error {
			return resolveIn(ctx, s, ResolveRequest{SessionID: "s", FunctionCallID: "c", Decision: "allow"})
		},
		"list all":     func(ctx context.Context) error { _, err := s.ListPending(ctx, ""); return err },
		"list session": func(ctx context.Context) error { _, err := s.ListPending(ctx, "s"); return err },
		"get":          func(ctx context.Context) error { _, err := s.Settings(ctx, "s"); return err },
		"set": func(ctx context.Context) error {
			_, err := s.SetSettings(ctx, SettingsSetRequest{SessionID: "s", Mode: &m})
			return err
		},
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	for name, call := range calls {
		if err := call(canceled); !errors.Is(err, wire.ErrCanceled) {
			t.Errorf("%s with a canceled ctx: %v", name, err)
		}
		if err := call(expired); !errors.Is(err, wire.ErrTimeout) {
			t.Errorf("%s with an expired ctx: %v", name, err)
		}
	}
	js := e.JetStream()
	for _, b := range []string{subjects.ApprovalsBucket, subjects.ApprovalSettingsBucket} {
		if err := js.DeleteKeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for name, call := range calls {
		err := call(ctx)
		var we *wire.Error
		if !errors.Is(err, wire.ErrUnavailable) || !errors.As(err, &we) || !we.Retryable {
			t.Errorf("%s without buckets: %v, want unavailable", name, err)
		}
	}
}
