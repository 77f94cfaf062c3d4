package approval

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// testNow is the fixed clock of the tests.
var testNow = time.UnixMilli(1_700_000_000_123)

type fixture struct {
	ns        *server.Server
	e         *engine.Engine
	w         *Worker
	approvals jetstream.KeyValue
	settings  jetstream.KeyValue
}

// newFixture starts a server, an engine and a started worker with the
// fixed clock and opts.
func newFixture(t testing.TB, opts ...Option) *fixture {
	t.Helper()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	w := NewWorker(append([]Option{WithClock(func() time.Time { return testNow })}, opts...)...)
	ctx := context.Background()
	if err := w.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	a, err := e.EnsureKV(ctx, ApprovalsBucketConfig())
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.EnsureKV(ctx, SettingsBucketConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ns: ns, e: e, w: w, approvals: a, settings: s}
}

// record is a pending record as the orchestrator writes it.
func record(t testing.TB, sid, callID, fnID string, args map[string]any, requestedAt int64) agent.ApprovalRecord {
	t.Helper()
	h, err := agent.ArgsHash(fnID, args)
	if err != nil {
		t.Fatal(err)
	}
	return agent.ApprovalRecord{
		SessionID: sid, RunID: "run-1", FunctionCallID: callID, FunctionID: fnID,
		Args: args, ArgsHash: h, RequestedAt: requestedAt, Status: agent.ApprovalPending,
	}
}

// park creates rec under its key, as the orchestrator does, and returns the
// key and revision.
func park(t testing.TB, kv jetstream.KeyValue, rec agent.ApprovalRecord) (string, uint64) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return parkRaw(t, kv, rec.SessionID, rec.FunctionCallID, b)
}

func parkRaw(t testing.TB, kv jetstream.KeyValue, sid, callID string, value []byte) (string, uint64) {
	t.Helper()
	key, err := subjects.ApprovalKey(sid, callID)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Create(context.Background(), key, value)
	if err != nil {
		t.Fatal(err)
	}
	return key, rev
}

// stored reads the record under key.
func stored(t testing.TB, kv jetstream.KeyValue, key string) (agent.ApprovalRecord, map[string]any, uint64) {
	t.Helper()
	ent, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var rec agent.ApprovalRecord
	var raw map[string]any
	if err := json.Unmarshal(ent.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(ent.Value(), &raw); err != nil {
		t.Fatal(err)
	}
	return rec, raw, ent.Revision()
}

// values is the number of messages in the bucket's stream (History 1: one
// per key ever written and not purged).
func values(t testing.TB, kv jetstream.KeyValue) uint64 {
	t.Helper()
	st, err := kv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Values()
}

func resolve(ctx context.Context, e *engine.Engine, req ResolveRequest) error {
	resp, err := engine.Call[ResolveResponse](ctx, e, ResolveFunction, req)
	if err == nil && !resp.OK {
		return errors.New("ok is false")
	}
	return err
}

// resolveIn resolves req on s in process, dropping the answer.
func resolveIn(ctx context.Context, s *Store, req ResolveRequest) error {
	_, err := s.Resolve(ctx, req)
	return err
}

// otherDecision is a decision other than d.
func otherDecision(d string) string {
	if d == agent.DecisionDeny {
		return agent.DecisionAllow
	}
	return agent.DecisionDeny
}
