package orchestrator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
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
