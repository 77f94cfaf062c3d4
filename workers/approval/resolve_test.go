package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	tests := []struct {
		decision, reason string
	}{
		{agent.DecisionAllow, "looks fine"},
		{agent.DecisionDeny, ""},
		{agent.DecisionAborted, "stop everything"},
	}
	for i, tc := range tests {
		callID := fmt.Sprintf("toolu_%d:x", i) // ':' is escaped in the key
		rec := record(t, "s1", callID, "fs::write", map[string]any{"path": "/etc/x", "n": 1.0}, 1000)
		key, _ := park(t, f.approvals, rec)
		req := ResolveRequest{SessionID: "s1", FunctionCallID: callID, Decision: tc.decision, Reason: tc.reason}
		if err := resolve(ctx, f.e, req); err != nil {
			t.Fatalf("%s: %v", tc.decision, err)
		}
		got, raw, _ := stored(t, f.approvals, key)
		want := rec
		want.Status, want.Decision, want.Reason, want.DecidedAt = agent.ApprovalDecided, tc.decision, tc.reason, testNow.UnixMilli()
		if gb, wb := mustJSON(t, got), mustJSON(t, want); gb != wb {
			t.Errorf("%s: record\n got %s\nwant %s", tc.decision, gb, wb)
		}
		if _, has := raw["reason"]; has != (tc.reason != "") {
			t.Errorf("%s: reason key present=%v in %v", tc.decision, has, raw)
		}
		// Decided once: the same decision again is answered from the
		// record; any other is refused.
		again, err := engine.Call[ResolveResponse](ctx, f.e, ResolveFunction, req)
		if err != nil || !again.OK || !again.AlreadyDecided || again.Decision != tc.decision || again.DecidedAt != testNow.UnixMilli() {
			t.Errorf("%s: second resolve = %+v, %v; want ok, already decided", tc.decision, again, err)
		}
		for _, other := range []ResolveRequest{
			{SessionID: "s1", FunctionCallID: callID, Decision: otherDecision(tc.decision), Reason: tc.reason},
			{SessionID: "s1", FunctionCallID: callID, Decision: tc.decision, Reason: tc.reason + " (changed)"},
		} {
			if err := resolve(ctx, f.e, other); !errors.Is(err, wire.ErrNotPending) || !strings.Contains(err.Error(), "already decided") {
				t.Errorf("%s: %+v after = %v, want not_pending", tc.decision, other, err)
			}
		}
		if again, _, _ := stored(t, f.approvals, key); again.Decision != tc.decision || again.Reason != tc.reason {
			t.Errorf("%s: decision overwritten: %+v", tc.decision, again)
		}
	}
	// Unknown call, unknown session, a deleted record.
	key, _ := park(t, f.approvals, record(t, "s1", "gone", "fs::read", nil, 1))
	if err := f.approvals.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	for _, r := range []ResolveRequest{
		{SessionID: "s1", FunctionCallID: "nope", Decision: agent.DecisionAllow},
		{SessionID: "s2", FunctionCallID: "toolu_0:x", Decision: agent.DecisionAllow},
		{SessionID: "s1", FunctionCallID: "gone", Decision: agent.DecisionAllow},
	} {
		err := resolve(ctx, f.e, r)
		if !errors.Is(err, wire.ErrNotPending) || !strings.Contains(err.Error(), "not waiting") {
			t.Errorf("resolve(%+v) = %v, want not_pending", r, err)
		}
	}
}

// Fields the orchestrator adds that this package does not know survive a
// decision.
func TestResolveKeepsUnknownFields(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	key, _ := parkRaw(t, f.approvals, "s1", "c1", []byte(`{"session_id":"s1","function_call_id":"c1","status":"pending","future":{"x":[1,2]},"args":{"a":"b"}}`))
	if err := resolve(context.Background(), f.e, ResolveRequest{SessionID: "s1", FunctionCallID: "c1", Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	_, raw, _ := stored(t, f.approvals, key)
	if got := mustJSON(t, raw["future"]); got != `{"x":[1,2]}` {
		t.Fatalf("unknown field became %s in %v", got, raw)
	}
	if raw["status"] != "decided" || raw["decision"] != "deny" {
		t.Fatalf("record %v", raw)
	}
}

func TestResolveArgsHash(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	rec := record(t, "s1", "c1", "shell::exec", map[string]any{"command": "ls"}, 5)
	key, rev := park(t, f.approvals, rec)
	other, err := agent.ArgsHash("shell::exec", map[string]any{"command": "rm -rf /"})
	if err != nil {
		t.Fatal(err)
	}
	err = resolve(ctx, f.e, ResolveRequest{SessionID: "s1", FunctionCallID: "c1", Decision: "allow", ArgsHash: other})
	if !errors.Is(err, wire.ErrNotPending) || !strings.Contains(err.Error(), "changed since it was shown") {
		t.Fatalf("mismatched hash: %v", err)
	}
	if got, _, r := stored(t, f.approvals, key); r != rev || got.Status != agent.ApprovalPending {
		t.Fatalf("record changed by a refused decision: %+v rev %d", got, r)
	}
	// The hash it was shown, in upper case: accepted.
	if err := resolve(ctx, f.e, ResolveRequest{SessionID: "s1", FunctionCallID: "c1", Decision: "allow", ArgsHash: strings.ToUpper(rec.ArgsHash[:7]) + strings.ToUpper(rec.ArgsHash[7:])}); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("SHA256: prefix = %v, want invalid_payload", err)
	}
	if err := resolve(ctx, f.e, ResolveRequest{SessionID: "s1", FunctionCallID: "c1", Decision: "allow", ArgsHash: "sha256:" + strings.ToUpper(rec.ArgsHash[7:])}); err != nil {
		t.Fatal(err)
	}
	// A record without a hash never matches a given one.
	parkRaw(t, f.approvals, "s1", "c2", []byte(`{"status":"pending","function_id":"x::y"}`))
	if err := resolve(ctx, f.e, ResolveRequest{SessionID: "s1", FunctionCallID: "c2", Decision: "allow", ArgsHash: goodHash}); !errors.Is(err, wire.ErrNotPending) {
		t.Fatalf("hash against a hashless record: %v", err)
	}
}

func TestResolveUndecodableRecords(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for i, v := range []string{`not json`, `[1,2]`, `null`, `"pending"`, `{"status":5}`, `{"status":"weird"}`, `{}`, `{"status":"decided","decision":"deny"}`} {
		callID := fmt.Sprintf("c%d", i)
		key, rev := parkRaw(t, f.approvals, "s1", callID, []byte(v))
		err := resolve(ctx, f.e, ResolveRequest{SessionID: "s1", FunctionCallID: callID, Decision: "allow"})
		if !errors.Is(err, wire.ErrNotPending) {
			t.Errorf("record %s: %v, want not_pending", v, err)
		}
		ent, gerr := f.approvals.Get(ctx, key)
		if gerr != nil || ent.Revision() != rev || string(ent.Value()) != v {
			t.Errorf("record %s changed: %v", v, gerr)
		}
	}
}

func TestResolveConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	store := f.w.Store()
	for round := range 4 {
		callID := fmt.Sprintf("c%d", round)
		key, _ := park(t, f.approvals, record(t, "s1", callID, "fs::write", nil, 1))
		var okN, notPendingN atomic.Int32
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				req := ResolveRequest{SessionID: "s1", FunctionCallID: callID, Decision: []string{"allow", "deny"}[g%2], Reason: fmt.Sprint(g)}
				var err error
				if round%2 == 0 {
					err = resolve(ctx, f.e, req) // through the bus
				} else {
					err = resolveIn(ctx, store, req) // in process: more overlap
				}
				switch {
				case err == nil:
					okN.Add(1)
				case errors.Is(err, wire.ErrNotPending):
					notPendingN.Add(1)
				default:
					t.Errorf("resolve: %v", err)
				}
			})
		}
		wg.Wait()
		if okN.Load() != 1 || notPendingN.Load() != 7 {
			t.Fatalf("round %d: %d ok, %d not_pending; want 1 and 7", round, okN.Load(), notPendingN.Load())
		}
		if rec, _, _ := stored(t, f.approvals, key); rec.Status != agent.ApprovalDecided {
			t.Fatalf("round %d: %+v", round, rec)
		}
	}
}

// racingKV runs before() ahead of each Update, to lose compare-and-sets on
// purpose.
type racingKV struct {
	jetstream.KeyValue
	before func(n int)
	n      int
}

func (r *racingKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	r.n++
	r.before(r.n)
	return r.KeyValue.Update(ctx, key, value, rev)
}

func TestResolveLostCAS(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	base := f.w.Store()
	withKV := func(kv jetstream.KeyValue) *Store {
		s := *base
		s.kv = func(ctx context.Context, bucket, sid string) (jetstream.KeyValue, error) {
			if bucket == subjects.ApprovalsBucket {
				return kv, nil
			}
			return base.kv(ctx, bucket, sid)
		}
		return &s
	}
	req := func(callID string) ResolveRequest {
		return ResolveRequest{SessionID: "s1", FunctionCallID: callID, Decision: "allow"}
	}

	// Another resolver decides between our read and our write: the
	// decision whose receipt came first stands, the other is not_pending.
	key, _ := park(t, f.approvals, record(t, "s1", "c1", "x::y", nil, 1))
	s := withKV(&racingKV{KeyValue: f.approvals, before: func(n int) {
		if n == 1 {
			// Our receipt is written: the other resolver writes ours.
			err := resolveIn(ctx, base, ResolveRequest{SessionID: "s1", FunctionCallID: "c1", Decision: "deny", Reason: "second"})
			if !errors.Is(err, wire.ErrNotPending) || !strings.Contains(err.Error(), "already decided (allow)") {
				t.Errorf("the later decision: %v, want not_pending", err)
			}
		}
	}})
	if err := resolveIn(ctx, s, req("c1")); err != nil {
		t.Fatalf("the first decision, written by the other resolver: %v", err)
	}
	if rec, _, _ := stored(t, f.approvals, key); rec.Decision != "allow" || rec.Reason != "" {
		t.Fatalf("first decision overwritten: %+v", rec)
	}
	// ... and before our receipt: ours is not_pending.
	key, _ = park(t, f.approvals, record(t, "s1", "c1b", "x::y", nil, 1))
	s = withReceipts(base, &racingReceipts{KeyValue: decisionsKV(t, f), before: func() {
		if err := resolveIn(ctx, base, ResolveRequest{SessionID: "s1", FunctionCallID: "c1b", Decision: "deny", Reason: "first"}); err != nil {
			t.Error(err)
		}
	}})
	if err := resolveIn(ctx, s, req("c1b")); !errors.Is(err, wire.ErrNotPending) {
		t.Fatalf("lost to a decision: %v", err)
	}
	if rec, _, _ := stored(t, f.approvals, key); rec.Decision != "deny" || rec.Reason != "first" {
		t.Fatalf("winner overwritten: %+v", rec)
	}

	// The record is rewritten, still pending (same call): the re-read wins.
	key, _ = park(t, f.approvals, record(t, "s1", "c2", "x::y", nil, 1))
	touch := func() {
		ent, err := f.approvals.Get(ctx, key)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := f.approvals.Update(ctx, key, ent.Value(), ent.Revision()); err != nil {
			t.Error(err)
		}
	}
	s = withKV(&racingKV{KeyValue: f.approvals, before: func(n int) {
		if n == 1 {
			touch()
		}
	}})
	if err := resolveIn(ctx, s, req("c2")); err != nil {
		t.Fatalf("after one lost CAS on a still pending record: %v", err)
	}

	// Deleted before it was read (the run ended): not_pending.
	key, _ = park(t, f.approvals, record(t, "s1", "c3", "x::y", nil, 1))
	if err := f.approvals.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := resolveIn(ctx, base, req("c3")); !errors.Is(err, wire.ErrNotPending) {
		t.Fatalf("deleted before: %v", err)
	}
	// Deleted after the decision was taken (its receipt written), before
	// our record write: another resolver may have written it and the
	// orchestrator applied it, so it is not refused.
	key, _ = park(t, f.approvals, record(t, "s1", "c3b", "x::y", nil, 1))
	s = withKV(&racingKV{KeyValue: f.approvals, before: func(int) {
		if err := f.approvals.Delete(ctx, key); err != nil {
			t.Error(err)
		}
	}})
	if got, err := s.Resolve(ctx, req("c3b")); err != nil || got.AlreadyDecided || got.Decision != "allow" {
		t.Fatalf("deleted in between: %+v, %v", got, err)
	}

	// Losing twice: conflict, retryable, and the record not decided yet;
	// the decision is taken (its receipt written): a retry, or any other
	// resolve, writes it.
	key, _ = park(t, f.approvals, record(t, "s1", "c4", "x::y", nil, 1))
	s = withKV(&racingKV{KeyValue: f.approvals, before: func(int) { touch() }})
	err := resolveIn(ctx, s, req("c4"))
	var we *wire.Error
	if !errors.Is(err, wire.ErrConflict) || !errors.As(err, &we) || !we.Retryable {
		t.Fatalf("lost twice: %v", err)
	}
	if rec, _, _ := stored(t, f.approvals, key); rec.Status != agent.ApprovalPending {
		t.Fatalf("decided after two lost CAS: %+v", rec)
	}
	if got, err := base.Resolve(ctx, req("c4")); err != nil || !got.AlreadyDecided {
		t.Fatalf("retry after conflict: %+v, %v", got, err)
	}
	if rec, _, _ := stored(t, f.approvals, key); rec.Decision != "allow" {
		t.Fatalf("after the retry: %+v", rec)
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A write that can never fit the server's max payload is invalid_payload,
// not unavailable: retrying the same request cannot help. Only another
// client's record comes this close to the limit; the decision with a
// shorter reason fits.
func TestWritesOverMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(maxPayload))
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	s, err := Open(ctx, e, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	approvals, err := e.EnsureKV(ctx, ApprovalsBucketConfig())
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", maxPayload-2000)
	key, rev := parkRaw(t, approvals, "s1", "c1", []byte(`{"status":"pending","function_id":"fs::write","args":{"body":"`+big+`"}}`))
	long := strings.Repeat("r", MaxReasonBytes)
	patterns := make([]string, MaxAlwaysAllow)
	for i := range patterns {
		patterns[i] = fmt.Sprintf("%03d::%s", i, strings.Repeat("p", 250))
	}
	for name, call := range map[string]func() error{
		"resolve": func() error {
			return resolveIn(ctx, s, ResolveRequest{SessionID: "s1", FunctionCallID: "c1", Decision: "allow", Reason: long})
		},
		"settings": func() error {
			_, err := s.SetSettings(ctx, SettingsSetRequest{SessionID: "s1", AlwaysAllow: &patterns})
			return err
		},
	} {
		err := call()
		var we *wire.Error
		if !errors.Is(err, wire.ErrInvalidPayload) || !errors.As(err, &we) || we.Retryable {
			t.Errorf("%s over the max payload: %v, want invalid_payload, not retryable", name, err)
		}
	}
	if got, _, r := stored(t, approvals, key); r != rev || got.Status != agent.ApprovalPending {
		t.Fatalf("record changed by a refused decision: rev %d", r)
	}
	if err := resolveIn(ctx, s, ResolveRequest{SessionID: "s1", FunctionCallID: "c1", Decision: "allow", Reason: "short"}); err != nil {
		t.Fatalf("with a short reason: %v", err)
	}
}
