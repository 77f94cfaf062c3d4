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
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
)

// decisionsKV is the primary copy of the decisions bucket of f's server.
func decisionsKV(t testing.TB, f *fixture) jetstream.KeyValue {
	t.Helper()
	return bucketCopy(t, f.e, DecisionsBucket, "")
}

// withReceipts is base reading and writing receipts in kv.
func withReceipts(base *Store, kv jetstream.KeyValue) *Store {
	s := *base
	s.kv = func(ctx context.Context, bucket, sid string) (jetstream.KeyValue, error) {
		if bucket == DecisionsBucket {
			return kv, nil
		}
		return base.kv(ctx, bucket, sid)
	}
	return &s
}

// withApprovals is base reading and writing approval records in kv.
func withApprovals(base *Store, kv jetstream.KeyValue) *Store {
	s := *base
	s.kv = func(ctx context.Context, bucket, sid string) (jetstream.KeyValue, error) {
		if bucket == subjects.ApprovalsBucket {
			return kv, nil
		}
		return base.kv(ctx, bucket, sid)
	}
	return &s
}

// racingReceipts runs before() once, ahead of the first receipt write.
type racingReceipts struct {
	jetstream.KeyValue
	before func()
	once   sync.Once
}

func (r *racingReceipts) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	r.once.Do(r.before)
	return r.KeyValue.Create(ctx, key, value, opts...)
}

func (r *racingReceipts) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	r.once.Do(r.before)
	return r.KeyValue.Update(ctx, key, value, rev)
}

// killedKV stands for a resolver killed after its receipt was written and
// before the approval record was: the record write never happens.
type killedKV struct{ jetstream.KeyValue }

var errKilled = errors.New("killed before the record was written")

func (killedKV) Update(context.Context, string, []byte, uint64) (uint64, error) {
	return 0, errKilled
}

// consume deletes the decided record under key as the orchestrator does
// once it applied the decision: on the revision it saw.
func consume(t testing.TB, kv jetstream.KeyValue, key string) {
	t.Helper()
	ent, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(context.Background(), key, jetstream.LastRevision(ent.Revision())); err != nil {
		t.Fatal(err)
	}
}

// clock is a settable test clock.
type clock struct{ ms atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(testNow.UnixMilli())
	return c
}

func (c *clock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// A resolve whose reply is lost (the caller timed out, the connection
// dropped) and is sent again gets the decision that was recorded, whether
// the orchestrator has consumed (and deleted) the record or not. Any other
// decision is refused, and nothing is written by the answer.
func TestResolveRetryAfterLostReply(t *testing.T) {
	t.Parallel()
	rec := func(t testing.TB, callID string) agent.ApprovalRecord {
		return record(t, "s1", callID, "fs::write", map[string]any{"path": "/etc/x"}, 1000)
	}
	tests := []struct {
		name     string
		consumed bool                                                 // the orchestrator deleted the decided record
		retry    func(req ResolveRequest, hash string) ResolveRequest // from the first request
		refused  bool                                                 // not_pending, else the recorded decision
	}{
		{"same", false, func(r ResolveRequest, _ string) ResolveRequest { return r }, false},
		{"same after delete", true, func(r ResolveRequest, _ string) ResolveRequest { return r }, false},
		{"same with the shown hash", false, func(r ResolveRequest, h string) ResolveRequest { r.ArgsHash = h; return r }, false},
		{"same with the shown hash after delete", true, func(r ResolveRequest, h string) ResolveRequest { r.ArgsHash = h; return r }, false},
		{"other decision", false, func(r ResolveRequest, _ string) ResolveRequest { r.Decision = agent.DecisionDeny; return r }, true},
		{"other decision after delete", true, func(r ResolveRequest, _ string) ResolveRequest { r.Decision = agent.DecisionDeny; return r }, true},
		{"aborted after delete", true, func(r ResolveRequest, _ string) ResolveRequest { r.Decision = agent.DecisionAborted; return r }, true},
		{"other reason after delete", true, func(r ResolveRequest, _ string) ResolveRequest { r.Reason = "changed my mind"; return r }, true},
		{"other hash", false, func(r ResolveRequest, _ string) ResolveRequest { r.ArgsHash = goodHash; return r }, true},
		{"other hash after delete", true, func(r ResolveRequest, _ string) ResolveRequest { r.ArgsHash = goodHash; return r }, true},
	}
	f := newFixture(t)
	ctx := context.Background()
	nc := enginetest.Connect(t, f.ns)
	subj, err := subjects.FunctionSubject(ResolveFunction)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range tests {
		callID := fmt.Sprintf("toolu_%d", i)
		r := rec(t, callID)
		key, _ := park(t, f.approvals, r)
		first := ResolveRequest{SessionID: "s1", FunctionCallID: callID, Decision: agent.DecisionAllow, Reason: "fine"}
		body, _ := json.Marshal(first)
		// Sent with a reply subject nobody reads: the answer is lost.
		if err := nc.PublishRequest(subj, nc.NewRespInbox(), body); err != nil {
			t.Fatal(err)
		}
		enginetest.Eventually(t, 5*time.Second, func() error {
			if got, _, _ := stored(t, f.approvals, key); got.Status != agent.ApprovalDecided {
				return errors.New("not decided yet")
			}
			return nil
		})
		if tc.consumed {
			consume(t, f.approvals, key)
		}
		before := values(t, f.approvals)
		got, err := engine.Call[ResolveResponse](ctx, f.e, ResolveFunction, tc.retry(first, r.ArgsHash))
		if tc.refused {
			if !errors.Is(err, wire.ErrNotPending) {
				t.Errorf("%s: %+v, %v; want not_pending", tc.name, got, err)
			}
		} else if want := (ResolveResponse{OK: true, AlreadyDecided: true, Decision: agent.DecisionAllow, DecidedAt: testNow.UnixMilli()}); err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, want)
		}
		if after := values(t, f.approvals); after != before {
			t.Errorf("%s: the approvals bucket went from %d to %d values", tc.name, before, after)
		}
		if tc.consumed {
			if _, err := f.approvals.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Errorf("%s: a record is back: %v", tc.name, err)
			}
		} else if got, _, _ := stored(t, f.approvals, key); got.Decision != agent.DecisionAllow || got.Reason != "fine" {
			t.Errorf("%s: record %+v", tc.name, got)
		}
	}
}

// A resolver killed between its two writes (the receipt, then the record)
// leaves the decision taken: the next resolve of the call writes it into
// the record, whichever decision that one asks for, so the call never
// both runs and is reported refused (nor is refused and reported run).
func TestResolveKilledBetweenWrites(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		retry string // the decision of the next resolve
		gone  bool   // the pending record is deleted before it (the run ended)
	}{
		{"retried", agent.DecisionAllow, false},
		{"other decision", agent.DecisionDeny, false},
		{"retried after the run ended", agent.DecisionAllow, true},
		{"other decision after the run ended", agent.DecisionDeny, true},
	}
	f := newFixture(t)
	ctx := context.Background()
	c := newClock()
	base, err := Open(ctx, f.e, WithClock(c.now), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	killed := withApprovals(base, killedKV{f.approvals})
	for i, tc := range tests {
		callID := fmt.Sprintf("c%d", i)
		key, _ := park(t, f.approvals, record(t, "s1", callID, "shell::exec", map[string]any{"command": "make"}, 5))
		first := ResolveRequest{SessionID: "s1", FunctionCallID: callID, Decision: agent.DecisionAllow, Reason: "go"}
		firstAt := c.now().UnixMilli()
		if _, err := killed.Resolve(ctx, first); !errors.Is(err, errKilled) {
			t.Fatalf("%s: the killed resolve: %v", tc.name, err)
		}
		if got, _, _ := stored(t, f.approvals, key); got.Status != agent.ApprovalPending {
			t.Fatalf("%s: record written: %+v", tc.name, got)
		}
		if tc.gone {
			if err := f.approvals.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		c.advance(time.Minute)
		next := first
		next.Decision = tc.retry
		got, err := base.Resolve(ctx, next)
		if tc.retry == first.Decision {
			want := ResolveResponse{OK: true, AlreadyDecided: true, Decision: first.Decision, DecidedAt: firstAt}
			if err != nil || got != want {
				t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, want)
			}
		} else if !errors.Is(err, wire.ErrNotPending) || !strings.Contains(err.Error(), "already decided (allow)") {
			t.Errorf("%s: %+v, %v; want not_pending, decided allow", tc.name, got, err)
		}
		if tc.gone {
			if _, err := f.approvals.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Errorf("%s: a record is back: %v", tc.name, err)
			}
			continue
		}
		// The record carries the decision taken first, at its time.
		if rec, _, _ := stored(t, f.approvals, key); rec.Status != agent.ApprovalDecided || rec.Decision != first.Decision || rec.Reason != first.Reason || rec.DecidedAt != firstAt {
			t.Errorf("%s: record %+v", tc.name, rec)
		}
	}
}

// What is kept for the answers decides nothing new: a receipt never
// decides a call parked after it (another run's call with the same id),
// a call that was never pending gets no record, and an old receipt (past
// the TTL) or a value that is no receipt is ignored.
func TestDecisionReceiptApprovesNothingNew(t *testing.T) {
	t.Parallel()
	f := newFixture(t, WithSettleDelay(0)) // its clock would see c's old receipts live
	ctx := context.Background()
	c := newClock()
	s, err := Open(ctx, f.e, WithClock(c.now), WithDecisionTTL(time.Hour), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	receipts := decisionsKV(t, f)
	allow := ResolveRequest{SessionID: "s1", FunctionCallID: "c1", Decision: agent.DecisionAllow}

	// Run r1 parks c1; it is allowed and consumed.
	r1 := record(t, "s1", "c1", "fs::write", map[string]any{"path": "/a"}, 10)
	key, _ := park(t, f.approvals, r1)
	if got, err := s.Resolve(ctx, allow); err != nil || got.AlreadyDecided {
		t.Fatalf("first decision: %+v, %v", got, err)
	}
	consume(t, f.approvals, key)

	// Run r2 parks a call with the same id: pending, listed, undecided.
	r2 := record(t, "s1", "c1", "fs::write", map[string]any{"path": "/b"}, 20)
	r2.RunID = "run-2"
	park(t, f.approvals, r2)
	if p, err := s.ListPending(ctx, "s1"); err != nil || len(p) != 1 || p[0].Args["path"] != "/b" {
		t.Fatalf("list: %+v, %v", p, err)
	}
	if got, _, _ := stored(t, f.approvals, key); got.Status != agent.ApprovalPending {
		t.Fatalf("r2 decided by r1's receipt: %+v", got)
	}
	// The old receipt neither answers for nor decides it: r2's call takes
	// its own decision.
	c.advance(time.Second)
	deny := allow
	deny.Decision = agent.DecisionDeny
	if got, err := s.Resolve(ctx, deny); err != nil || got.AlreadyDecided || got.Decision != agent.DecisionDeny {
		t.Fatalf("r2's decision: %+v, %v", got, err)
	}
	if got, _, _ := stored(t, f.approvals, key); got.Decision != agent.DecisionDeny || got.RunID != "run-2" {
		t.Fatalf("r2's record %+v", got)
	}
	consume(t, f.approvals, key)

	// A receipt of a call that was never pending (written by hand) gets a
	// repeat answered, no record: nothing is parked, so nothing can run.
	forged, _ := json.Marshal(newReceipt(ResolveRequest{SessionID: "s1", FunctionCallID: "ghost"}, agent.ApprovalRecord{RunID: "r9", FunctionID: "shell::exec"},
		verdict{Decision: agent.DecisionAllow, DecidedAt: c.now().UnixMilli()}))
	ghost, _ := subjects.ApprovalKey("s1", "ghost")
	if _, err := receipts.Put(ctx, ghost, forged); err != nil {
		t.Fatal(err)
	}
	before := values(t, f.approvals)
	if _, err := s.Resolve(ctx, ResolveRequest{SessionID: "s1", FunctionCallID: "ghost", Decision: agent.DecisionAllow}); err != nil {
		t.Fatalf("repeat of the forged decision: %v", err)
	}
	if _, err := f.approvals.Get(ctx, ghost); !errors.Is(err, jetstream.ErrKeyNotFound) || values(t, f.approvals) != before {
		t.Fatalf("a record appeared for a call never parked: %v", err)
	}
	// Parked later (its own run, time, arguments), the forged receipt
	// does not bind: the human's decision is the one taken.
	gr := record(t, "s1", "ghost", "shell::exec", map[string]any{"command": "rm"}, 30)
	park(t, f.approvals, gr)
	if got, err := s.Resolve(ctx, ResolveRequest{SessionID: "s1", FunctionCallID: "ghost", Decision: agent.DecisionDeny}); err != nil || got.Decision != agent.DecisionDeny {
		t.Fatalf("decision on a call with a forged receipt: %+v, %v", got, err)
	}
	if got, _, _ := stored(t, f.approvals, ghost); got.Decision != agent.DecisionDeny {
		t.Fatalf("record %+v", got)
	}

	// Past the TTL a receipt answers nothing ...
	key3, _ := park(t, f.approvals, record(t, "s1", "c3", "x::y", nil, 40))
	if _, err := s.Resolve(ctx, ResolveRequest{SessionID: "s1", FunctionCallID: "c3", Decision: agent.DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	consume(t, f.approvals, key3)
	c.advance(time.Hour)
	if _, err := s.Resolve(ctx, ResolveRequest{SessionID: "s1", FunctionCallID: "c3", Decision: agent.DecisionAllow}); !errors.Is(err, wire.ErrNotPending) {
		t.Fatalf("repeat past the TTL: %v", err)
	}
	// ... and decides nothing: a killed resolver's receipt past the TTL
	// leaves the still pending call to the next decision.
	key4, _ := park(t, f.approvals, record(t, "s1", "c4", "x::y", nil, 50))
	if _, err := withApprovals(s, killedKV{f.approvals}).Resolve(ctx, ResolveRequest{SessionID: "s1", FunctionCallID: "c4", Decision: agent.DecisionAllow}); !errors.Is(err, errKilled) {
		t.Fatal(err)
	}
	c.advance(time.Hour)
	if got, err := s.Resolve(ctx, ResolveRequest{SessionID: "s1", FunctionCallID: "c4", Decision: agent.DecisionDeny}); err != nil || got.AlreadyDecided || got.Decision != agent.DecisionDeny {
		t.Fatalf("decision after an old receipt: %+v, %v", got, err)
	}
	if got, _, _ := stored(t, f.approvals, key4); got.Decision != agent.DecisionDeny {
		t.Fatalf("record %+v", got)
	}

	// A value that is no receipt (another client's) is ignored: replaced
	// by a decision, no answer to a repeat.
	for i, v := range []string{`garbage`, `{"decision":"maybe","session_id":"s1","function_call_id":"f0"}`,
		`{"decision":"allow","session_id":"s1","function_call_id":"f2","run_id":"run-1","function_id":"x::y","requested_at":60,"decided_at":"x"}`,
		`{"decision":"allow","session_id":"s2","function_call_id":"f3","run_id":"run-1","function_id":"x::y","requested_at":60,"decided_at":1}`} {
		callID := fmt.Sprintf("f%d", i)
		key, _ := park(t, f.approvals, record(t, "s1", callID, "x::y", nil, 60))
		if _, err := receipts.Put(ctx, key, []byte(v)); err != nil {
			t.Fatal(err)
		}
		req := ResolveRequest{SessionID: "s1", FunctionCallID: callID, Decision: agent.DecisionAllow}
		if got, err := s.Resolve(ctx, req); err != nil || got.AlreadyDecided {
			t.Fatalf("%s: decision over it: %+v, %v", v, got, err)
		}
		consume(t, f.approvals, key)
		if _, err := receipts.Put(ctx, key, []byte(v)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Resolve(ctx, req); !errors.Is(err, wire.ErrNotPending) {
			t.Fatalf("%s: repeat answered: %v", v, err)
		}
	}
}

// The decision TTL is the decisions bucket's max age, set by option or by
// the module setting; values out of range are refused.
func TestDecisionTTL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value string
		ttl   time.Duration // 0: refused
	}{
		{"", DefaultDecisionTTL},
		{"2h", 2 * time.Hour},
		{"1m", time.Minute},
		{"720h", 720 * time.Hour},
		{"59s", 0},
		{"721h", 0},
		{"-1h", 0},
		{"soon", 0},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			t.Parallel()
			env := workers.Env{}
			if tc.value != "" {
				env.Settings = map[string]map[string]string{WorkerName: {SettingDecisionTTL: tc.value}}
			}
			w := NewWorker()
			err := w.Provision(context.Background(), env)
			if tc.ttl == 0 {
				if !errors.Is(err, engine.ErrInvalidOption) {
					t.Fatalf("%q: %v, want ErrInvalidOption", tc.value, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			e := enginetest.Engine(t)
			ctx := context.Background()
			if err := w.Start(ctx, e); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close(context.Background()) })
			st, err := bucketCopy(t, e, DecisionsBucket, "").Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.TTL() != tc.ttl || st.History() != 1 {
				t.Fatalf("bucket max age %v history %d, want %v and 1", st.TTL(), st.History(), tc.ttl)
			}
		})
	}
}

// A session whose region has approvals but no decisions bucket (its nodes
// predate it) is still decided, without a receipt.
func TestResolveWithoutDecisionsCopy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	rc := ApprovalsBucketConfig()
	rc.Bucket = subjects.RegionalBucket(rc.Bucket, "old")
	us, err := f.e.EnsureKV(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := park(t, us, record(t, "old.s1", "c1", "x::y", nil, 1))
	if got := ids(listPendingOn(t, f.e, "old.s1")); len(got) != 1 || got[0] != "old.s1/c1" {
		t.Fatalf("listed %v", got)
	}
	if err := resolve(ctx, f.e, ResolveRequest{SessionID: "old.s1", FunctionCallID: "c1", Decision: agent.DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := stored(t, us, key); got.Decision != agent.DecisionAllow {
		t.Fatalf("record %+v", got)
	}
	if _, err := f.e.JetStream().KeyValue(ctx, subjects.RegionalBucket(DecisionsBucket, "old")); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("decisions copy: %v", err)
	}
}
