package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// orchestratorView decodes the approval record under key as the
// orchestrator does (its approvals watcher and approvals.Decisions) and
// says whether it applies it to the call parked as parked: decided, of
// the same run, with the parked arguments' hash.
func orchestratorView(t testing.TB, kv jetstream.KeyValue, key string, parked agent.ApprovalRecord) (agent.ApprovalRecord, bool) {
	t.Helper()
	ent, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var rec agent.ApprovalRecord
	if err := json.Unmarshal(ent.Value(), &rec); err != nil {
		t.Fatalf("the orchestrator cannot decode %s: %v", ent.Value(), err)
	}
	switch rec.Decision {
	case agent.DecisionAllow, agent.DecisionDeny, agent.DecisionAborted:
	default:
		return rec, false
	}
	return rec, rec.Status == agent.ApprovalDecided && agent.ValidateSessionID(rec.SessionID) == nil &&
		rec.SessionID == parked.SessionID && rec.FunctionCallID == parked.FunctionCallID &&
		rec.RunID == parked.RunID && rec.ArgsHash == parked.ArgsHash
}

// receiptOf is the receipt stored under key.
func receiptOf(t testing.TB, kv jetstream.KeyValue, key string) receipt {
	t.Helper()
	ent, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var r receipt
	if err := json.Unmarshal(ent.Value(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// receiptKind is what the decisions bucket holds for a parked call.
type receiptKind int

const (
	receiptOfKilled    receiptKind = iota // a resolver killed after its receipt: the decision is taken
	receiptNone                           // no receipt: nobody decided
	receiptOtherRun                       // the receipt of another run's call with the same id
	receiptTooOld                         // a killed resolver's receipt past the decision TTL
	receiptUndecodable                    // a value that is no receipt
)

func (k receiptKind) String() string {
	return [...]string{"killed resolver", "no receipt", "other run", "past the TTL", "undecodable"}[k]
}

// parkWith parks a call of sid in approvals and leaves in receipts what
// kind says, writing receipts as resolvers on e would (killed between
// their two writes), at the time now. It returns the key and the parked
// record.
func parkWith(t testing.TB, e *engine.Engine, approvals, receipts jetstream.KeyValue, sid, callID string, kind receiptKind, now time.Time) (string, agent.ApprovalRecord) {
	t.Helper()
	ctx := context.Background()
	rec := record(t, sid, callID, "shell::exec", map[string]any{"command": "make " + callID}, now.UnixMilli()-1000)
	key, _ := park(t, approvals, rec)
	killedAt := func(at time.Time) {
		s, err := Open(ctx, e, WithClock(func() time.Time { return at }), WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		req := ResolveRequest{SessionID: sid, FunctionCallID: callID, Decision: agent.DecisionAllow, Reason: "go"}
		if _, err := withApprovals(s, killedKV{approvals}).Resolve(ctx, req); !errors.Is(err, errKilled) {
			t.Fatalf("the killed resolve: %v", err)
		}
	}
	switch kind {
	case receiptOfKilled:
		killedAt(now)
	case receiptTooOld:
		killedAt(now.Add(-DefaultDecisionTTL - time.Minute))
	case receiptOtherRun:
		other := rec
		other.RunID = "run-0"
		b, _ := json.Marshal(newReceipt(ResolveRequest{SessionID: sid, FunctionCallID: callID}, other, verdict{Decision: agent.DecisionAllow, DecidedAt: now.UnixMilli()}))
		if _, err := receipts.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	case receiptUndecodable:
		if _, err := receipts.Put(ctx, key, []byte(`{"decision":"allow","session_id":`)); err != nil {
			t.Fatal(err)
		}
	}
	return key, rec
}

// A resolver killed after its receipt and before the record leaves the
// call pending; approval::list_pending writes the decision into the
// record (the orchestrator then applies it) and does not list the call.
// Nothing else is decided: a call with no receipt, another run's, one
// past the TTL or one that does not decode stays pending and listed.
func TestListPendingSettlesTakenDecisions(t *testing.T) {
	t.Parallel()
	kinds := []receiptKind{receiptOfKilled, receiptNone, receiptOtherRun, receiptTooOld, receiptUndecodable}
	for _, all := range []bool{false, true} {
		t.Run(fmt.Sprintf("all=%t", all), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, WithSettleDelay(0)) // no sweep: only the list writes
			receipts := decisionsKV(t, f)
			for i, kind := range kinds {
				sid := fmt.Sprintf("s%d", i)
				key, parked := parkWith(t, f.e, f.approvals, receipts, sid, "c1", kind, testNow)
				_, _, rev := stored(t, f.approvals, key)
				if _, applies := orchestratorView(t, f.approvals, key, parked); applies {
					t.Fatalf("%s: decided before the list", kind)
				}
				list := ""
				if !all {
					list = sid
				}
				listed := slices.Contains(ids(listPending(t, f, list)), sid+"/c1")
				rec, applies := orchestratorView(t, f.approvals, key, parked)
				if kind != receiptOfKilled {
					if !listed {
						t.Errorf("%s: not listed", kind)
					}
					if _, _, r := stored(t, f.approvals, key); r != rev || rec.Status != agent.ApprovalPending {
						t.Errorf("%s: record written: %+v", kind, rec)
					}
					continue
				}
				if listed {
					t.Errorf("%s: listed, though decided", kind)
				}
				r := receiptOf(t, receipts, key)
				if !applies || rec.Decision != agent.DecisionAllow || rec.Reason != "go" || rec.DecidedAt != r.DecidedAt {
					t.Errorf("%s: record %+v (orchestrator applies: %t), want the receipt's decision", kind, rec, applies)
				}
				// The resolver's retry is answered with the decision.
				got, err := f.w.Store().Resolve(context.Background(), ResolveRequest{SessionID: sid, FunctionCallID: "c1", Decision: agent.DecisionAllow, Reason: "go"})
				if err != nil || !got.AlreadyDecided || got.DecidedAt != r.DecidedAt {
					t.Errorf("%s: retry %+v, %v", kind, got, err)
				}
			}
		})
	}
}

// A resolver killed after its receipt and before the record, and nobody
// resolving or listing again: the worker's sweep writes the decision into
// the record within the settle delay, once whatever the number of
// replicas, and from the snapshot when it starts after the kill. It
// decides no call without a live receipt bound to it.
func TestSweepSettlesTakenDecisions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		replicas   int
		startAfter bool   // the workers start after the kill
		region     string // the session's home, and the workers'
	}{
		{"replicas=1", 1, false, ""},
		{"replicas=3", 3, false, ""},
		{"started after the kill", 1, true, ""},
		{"regional session", 2, false, "eu"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ns := enginetest.RunServer(t)
			var eopts []engine.Option
			sid := "s1"
			if tc.region != "" {
				eopts = append(eopts, engine.WithRegion(tc.region))
				sid = tc.region + ".s1"
			}
			e := enginetest.NewEngine(t, ns, eopts...)
			if _, err := Open(ctx, e); err != nil { // the buckets
				t.Fatal(err)
			}
			approvals := bucketCopy(t, e, subjects.ApprovalsBucket, tc.region)
			receipts := bucketCopy(t, e, DecisionsBucket, tc.region)
			var workers []*Worker
			start := func() {
				for range tc.replicas {
					w := NewWorker(WithSettleDelay(50*time.Millisecond), WithLogger(slog.New(slog.DiscardHandler)))
					if err := w.Start(ctx, enginetest.NewEngine(t, ns, eopts...)); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = w.Close(context.Background()) })
					workers = append(workers, w)
				}
			}
			if !tc.startAfter {
				start()
			}
			// Every write stored in the approvals bucket gets the next
			// sequence of its stream (a lost compare-and-set gets none).
			lastSeq := func() uint64 {
				t.Helper()
				info, err := e.JetStream().Stream(ctx, "KV_"+approvals.Bucket())
				if err != nil {
					t.Fatal(err)
				}
				return info.CachedInfo().State.LastSeq
			}
			before := lastSeq()
			now := time.Now()
			keys := map[receiptKind]string{}
			var taken agent.ApprovalRecord
			// The taken decision last: the sweep has seen the others first.
			for _, kind := range []receiptKind{receiptNone, receiptOtherRun, receiptTooOld, receiptUndecodable, receiptOfKilled} {
				key, parked := parkWith(t, e, approvals, receipts, sid, fmt.Sprintf("c%d", kind), kind, now)
				keys[kind] = key
				if kind == receiptOfKilled {
					taken = parked
				}
			}
			if tc.startAfter {
				start()
			}
			key := keys[receiptOfKilled]
			enginetest.Eventually(t, 10*time.Second, func() error {
				if rec, applies := orchestratorView(t, approvals, key, taken); !applies {
					return fmt.Errorf("the orchestrator applies no decision: %+v", rec)
				}
				return nil
			})
			enginetest.Eventually(t, 10*time.Second, func() error {
				for i, w := range workers {
					if !w.sweep.idle() {
						return fmt.Errorf("replica %d still sweeping", i)
					}
				}
				return nil
			})
			rec, _ := orchestratorView(t, approvals, key, taken)
			if r := receiptOf(t, receipts, key); rec.Decision != agent.DecisionAllow || rec.Reason != "go" || rec.DecidedAt != r.DecidedAt {
				t.Errorf("record %+v, want the receipt's decision %+v", rec, r.verdict)
			}
			// Written once: each call parked, the taken one decided.
			if got, want := lastSeq()-before, uint64(len(keys)+1); got != want {
				t.Errorf("%d writes to the approvals, want %d", got, want)
			}
			for kind, k := range keys {
				if kind != receiptOfKilled {
					if rec, _, _ := stored(t, approvals, k); rec.Status != agent.ApprovalPending {
						t.Errorf("%s: decided without a live receipt bound to it: %+v", kind, rec)
					}
				}
			}
		})
	}
}

// The settle delay is 0 (no sweep) to MaxSettleDelay.
func TestWithSettleDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d  time.Duration
		ok bool
	}{
		{0, true},
		{time.Millisecond, true},
		{MaxSettleDelay, true},
		{-time.Nanosecond, false},
		{MaxSettleDelay + time.Nanosecond, false},
	}
	for _, tc := range tests {
		_, err := buildOptions([]Option{WithSettleDelay(tc.d)})
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("WithSettleDelay(%v): %v", tc.d, err)
		}
	}
}

// flakyKV fails reads with get() and writes with update() when they
// return an error.
type flakyKV struct {
	jetstream.KeyValue
	get, update func() error
}

func (f flakyKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if err := f.get(); err != nil {
		return nil, err
	}
	return f.KeyValue.Get(ctx, key)
}

func (f flakyKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if err := f.update(); err != nil {
		return 0, err
	}
	return f.KeyValue.Update(ctx, key, value, rev)
}

// A sweep check that cannot reach the buckets is retried with backoff and
// logged at Warn, and settles the call once they answer; one that can
// never succeed (a decided record over the max payload) is logged at
// Error and not retried.
func TestSweepRetries(t *testing.T) {
	t.Parallel()
	unreachable := fmt.Errorf("jetstream down: %w", nats.ErrNoResponders)
	tests := []struct {
		name          string
		getFails      int   // reads of the record that fail before they answer
		updateErr     error // every write's error
		decided       bool
		warns, errors int
	}{
		{"unreachable twice", 2, nil, true, 2, 0},
		{"never fits", 0, nats.ErrMaxPayload, false, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t, WithSettleDelay(0))
			var logs enginetest.Buffer
			s, err := Open(ctx, f.e, WithClock(func() time.Time { return testNow }), WithSettleDelay(10*time.Millisecond),
				WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			var gets, updates atomic.Int32
			flaky := flakyKV{KeyValue: f.approvals,
				get: func() error {
					if int(gets.Add(1)) <= tc.getFails {
						return unreachable
					}
					return nil
				},
				update: func() error { updates.Add(1); return tc.updateErr },
			}
			base := s.regionKV
			s.regionKV = func(ctx context.Context, bucket, region string) (jetstream.KeyValue, error) {
				if bucket == subjects.ApprovalsBucket {
					return flaky, nil
				}
				return base(ctx, bucket, region)
			}
			key, parked := parkWith(t, f.e, f.approvals, decisionsKV(t, f), "s1", "c1", receiptOfKilled, testNow)
			sw, err := s.startSweep(ctx, []string{""})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sw.Stop)
			enginetest.Eventually(t, 10*time.Second, func() error {
				if updates.Load() == 0 || !sw.idle() {
					return fmt.Errorf("%d reads, %d writes", gets.Load(), updates.Load())
				}
				return nil
			})
			if _, applies := orchestratorView(t, f.approvals, key, parked); applies != tc.decided {
				t.Errorf("decided %t, want %t", applies, tc.decided)
			}
			if got, want := int(gets.Load()), tc.getFails+1; got != want {
				t.Errorf("%d reads of the record, want %d", got, want)
			}
			if updates.Load() != 1 {
				t.Errorf("%d writes of the record, want 1", updates.Load())
			}
			out := logs.String()
			if w, e := strings.Count(out, "decision receipt not checked; retrying"), strings.Count(out, "decision receipt not checked; giving up"); w != tc.warns || e != tc.errors {
				t.Errorf("%d warnings and %d errors logged, want %d and %d:\n%s", w, e, tc.warns, tc.errors, out)
			}
		})
	}
}
