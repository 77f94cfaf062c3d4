package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// The record store reads the same through KV gets and through the stream
// leader (the mode of replicated nodes).
func TestStoreReads(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := enginetest.Engine(t, engine.WithRegion("eu"))
	if _, err := e.EnsureSessionKV(ctx, jetstream.KeyValueConfig{Bucket: subjects.TurnStateBucket, History: 1, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	for _, leader := range []bool{false, true} {
		st := store{kvs: sessionKV{e: e, bucket: subjects.TurnStateBucket}, leader: leader}
		for _, sid := range []string{"plain", "eu.homed"} {
			sid := sid
			if leader {
				sid += "-l"
			}
			if _, _, err := st.Load(ctx, sid); !errors.Is(err, session.ErrNoRecord) {
				t.Fatalf("leader %v, %s: load before any write: %v", leader, sid, err)
			}
			rev, err := st.Write(ctx, turn.Record{SessionID: sid, RunID: "r1", Step: 1}, 0)
			if err != nil {
				t.Fatal(err)
			}
			rev, err = st.Write(ctx, turn.Record{SessionID: sid, RunID: "r1", Step: 2}, rev)
			if err != nil {
				t.Fatal(err)
			}
			rec, got, err := st.Load(ctx, sid)
			if err != nil || got != rev || rec.Step != 2 || rec.RunID != "r1" {
				t.Fatalf("leader %v, %s: load = step %d at %d, %v; want step 2 at %d", leader, sid, rec.Step, got, err, rev)
			}
			if _, err := st.Write(ctx, turn.Record{SessionID: sid, Step: 3}, rev-1); !errors.Is(err, session.ErrFenced) {
				t.Fatalf("a write at an old revision: %v, want fenced", err)
			}
			kv, err := st.kvs.of(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, sid); err != nil {
				t.Fatal(err)
			}
			if _, _, err := st.Load(ctx, sid); !errors.Is(err, session.ErrNoRecord) {
				t.Fatalf("leader %v, %s: load after delete: %v", leader, sid, err)
			}
		}
		if _, _, err := st.Load(ctx, "zz.nowhere"); !errors.Is(err, engine.ErrUnknownRegion) {
			t.Fatalf("leader %v: load of a session of an unknown region: %v", leader, err)
		}
	}
}

// A turn record too large for one message is refused before anything is
// sent (session.ErrUnstorable), so the grain fails the run instead of
// retrying it.
func TestStoreRefusesARecordTooLarge(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := enginetest.Engine(t)
	if _, err := e.EnsureSessionKV(ctx, jetstream.KeyValueConfig{Bucket: subjects.TurnStateBucket, History: 1, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	st := store{kvs: sessionKV{e: e, bucket: subjects.TurnStateBucket}}
	big := turn.Record{SessionID: "big", RunID: "r1", Step: 1, Request: agent.RunStart{SystemPrompt: strings.Repeat("p", int(e.Conn().MaxPayload()))}}
	if _, err := st.Write(ctx, big, 0); !errors.Is(err, session.ErrUnstorable) {
		t.Fatalf("write of a record over the max payload: %v", err)
	}
	if _, _, err := st.Load(ctx, "big"); !errors.Is(err, session.ErrNoRecord) {
		t.Fatalf("something was written: %v", err)
	}
}

// An approval record another client wrote that does not decode is no
// decision (a warning), not an error that would halt the grain at every
// wake while its call is parked.
func TestDecisionsSkipUndecodableRecords(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := enginetest.Engine(t)
	for _, cfg := range approvalBucketConfigs() {
		cfg.Storage = jetstream.MemoryStorage
		if _, err := e.EnsureSessionKV(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	a := approvals{kvs: sessionKV{e: e, bucket: subjects.ApprovalsBucket}, now: time.Now, tracer: e.Tracer()}
	parked := []agent.PendingApproval{{FunctionCallID: "c1", ArgsHash: "h"}, {FunctionCallID: "c2", ArgsHash: "h"}}
	for _, p := range parked {
		if err := a.Request(ctx, "s1", "r1", p); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := a.kvs.of(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	key1, _ := subjects.ApprovalKey("s1", "c1")
	if _, err := kv.Put(ctx, key1, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	key2, _ := subjects.ApprovalKey("s1", "c2")
	decided, _ := json.Marshal(agent.ApprovalRecord{SessionID: "s1", RunID: "r1", FunctionCallID: "c2", ArgsHash: "h", Status: agent.ApprovalDecided, Decision: agent.DecisionAllow})
	if _, err := kv.Put(ctx, key2, decided); err != nil {
		t.Fatal(err)
	}
	ds, err := a.Decisions(ctx, "s1", "r1", parked)
	if err != nil || len(ds) != 1 || ds[0].ID != "c2" {
		t.Fatalf("decisions %+v, %v", ds, err)
	}
	// Parking the call again replaces the record.
	if err := a.Request(ctx, "s1", "r1", parked[0]); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := a.get(ctx, "s1", key1); err != nil || rec.Status != agent.ApprovalPending {
		t.Fatalf("record after parking again: %+v, %v", rec, err)
	}
}
