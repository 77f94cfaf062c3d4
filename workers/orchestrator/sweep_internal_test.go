package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// sweepFixture is an engine with the turn-state bucket (a primary and an
// "eu" copy) and the step stream, and the orchestrator parts the periodic
// sweep uses.
func sweepFixture(t *testing.T) (context.Context, *Orchestrator, store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	e := enginetest.Engine(t, engine.WithRegion("eu"))
	if _, err := e.EnsureSessionKV(ctx, jetstream.KeyValueConfig{Bucket: subjects.TurnStateBucket, History: 1, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.EnsureSessionStream(ctx, stepStreamConfig(1), subjects.StepSubjectPrefix); err != nil {
		t.Fatal(err)
	}
	turns := sessionKV{e: e, bucket: subjects.TurnStateBucket}
	o := &Orchestrator{e: e, turns: turns, scan: &staleScan{turns: turns}, logger: slog.New(slog.DiscardHandler)}
	return ctx, o, o.store()
}

// put writes sid's record in state st, last updated at.
func put(ctx context.Context, t *testing.T, st store, sid string, state agent.TurnState, at time.Time) {
	t.Helper()
	kv, err := st.kvs.of(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	var rev uint64
	if ent, err := kv.Get(ctx, sid); err == nil {
		rev = ent.Revision()
	}
	if _, err := st.Write(ctx, turn.Record{SessionID: sid, RunID: "r-" + sid, Step: 3, State: state, UpdatedAtMs: at.UnixMilli()}, rev); err != nil {
		t.Fatal(err)
	}
}

// The scan follows every copy of the bucket from where it was: a session
// it was told is settled is forgotten until its record is written again,
// a deleted record is forgotten, and nothing is read twice.
func TestStaleScanFollows(t *testing.T) {
	t.Parallel()
	ctx, o, st := sweepFixture(t)
	s := o.scan
	now := time.Now()
	put(ctx, t, st, "a", agent.StateAssistantStreaming, now)
	put(ctx, t, st, "b", agent.StateStopped, now)
	put(ctx, t, st, "eu.c", agent.StateFunctionExecute, now)
	put(ctx, t, st, "a", agent.StateAssistantStreaming, now) // a second revision of a

	steps := []struct {
		name   string
		before func()
		want   []string
	}{
		{"first follow: each key's latest", nil, []string{"a", "b", "eu.c"}},
		{"nothing new", func() { s.settled("b") }, []string{"a", "eu.c"}},
		{"b written again", func() { put(ctx, t, st, "b", agent.StateProvisioning, now) }, []string{"a", "b", "eu.c"}},
		{"a deleted", func() {
			kv, _ := st.kvs.of(ctx, "a")
			if err := kv.Delete(ctx, "a"); err != nil {
				t.Fatal(err)
			}
		}, []string{"b", "eu.c"}},
		{"eu.c settled, then a new eu session", func() {
			s.settled("eu.c")
			put(ctx, t, st, "eu.d", agent.StateSteeringCheck, now)
		}, []string{"b", "eu.d"}},
		{"eu.d written settled: dropped unread", func() {
			put(ctx, t, st, "eu.d", agent.StateStopped, now)
		}, []string{"b"}},
	}
	for _, step := range steps {
		if step.before != nil {
			step.before()
		}
		if err := s.follow(ctx); err != nil {
			t.Fatalf("%s: follow: %v", step.name, err)
		}
		if got := s.due(time.Now().Add(time.Hour)); !slices.Equal(got, step.want) {
			t.Fatalf("%s: due = %v, want %v", step.name, got, step.want)
		}
		if got := s.due(time.Now().Add(-time.Hour)); len(got) != 0 {
			t.Fatalf("%s: due an hour ago = %v, want none", step.name, got)
		}
	}
	// A record written settled reads back as any other.
	if rec, _, err := st.Load(ctx, "eu.d"); err != nil || rec.State != agent.StateStopped {
		t.Fatalf("load of a record written settled: %+v, %v", rec, err)
	}
	if s.cursor[""] == 0 || s.cursor["eu"] == 0 {
		t.Fatalf("cursors %v: want both copies followed", s.cursor)
	}
}

// The periodic sweep wakes a stalled mid-flight session once per sweep
// until its record moves, and stops looking at a session once it found its
// record settled: an idle node reads no record.
func TestResweepWakesStalled(t *testing.T) {
	t.Parallel()
	ctx, o, st := sweepFixture(t)
	old := time.Now().Add(-time.Hour)
	put(ctx, t, st, "stalled", agent.StateFunctionExecute, old)
	put(ctx, t, st, "eu.stalled", agent.StateAssistantStreaming, old)
	put(ctx, t, st, "done", agent.StateStopped, old)
	put(ctx, t, st, "parked", agent.StateFunctionAwaitingApproval, old)
	// The writes are only moments old by the server's clock: a stale
	// interval of 0 makes every one due. "busy" says it moved later than
	// the cutoff, so it is kept and not woken.
	put(ctx, t, st, "busy", agent.StateAssistantStreaming, time.Now().Add(time.Hour))

	n, err := o.resweep(ctx, 0)
	if err != nil || n != 2 {
		t.Fatalf("first sweep woke %d, %v; want the 2 stalled sessions", n, err)
	}
	if got := o.scan.tracked(); got != 3 {
		t.Fatalf("tracked %d after the first sweep, want 3 (two stalled, one busy)", got)
	}
	for _, sid := range []string{"stalled", "eu.stalled"} {
		s, err := o.e.SessionStream(ctx, subjects.StepStream, sid)
		if err != nil {
			t.Fatal(err)
		}
		subj, _ := subjects.StepSubject(sid)
		if _, err := s.GetLastMsgForSubject(ctx, subj); err != nil {
			t.Fatalf("no wake of %s: %v", sid, err)
		}
	}
	// Still stalled: woken again. Then both settle and busy ends.
	if n, err := o.resweep(ctx, 0); err != nil || n != 2 {
		t.Fatalf("second sweep woke %d, %v; want 2", n, err)
	}
	for _, sid := range []string{"stalled", "eu.stalled", "busy"} {
		put(ctx, t, st, sid, agent.StateStopped, time.Now())
	}
	if n, err := o.resweep(ctx, 0); err != nil || n != 0 {
		t.Fatalf("sweep after the runs ended woke %d, %v; want 0", n, err)
	}
	if got := o.scan.tracked(); got != 0 {
		t.Fatalf("tracked %d once every record settled, want 0", got)
	}
}

// A record another client put under a key, one that names no session of
// that key, is passed over and forgotten: the sweep still wakes the
// stalled sessions after it (before, waking it failed and ended the
// sweep, at every sweep).
func TestResweepPassesOverForeignRecords(t *testing.T) {
	t.Parallel()
	ctx, o, st := sweepFixture(t)
	kv, err := st.kvs.of(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ key, value string }{
		{"a", `{}`},
		{"b", `{"session_id":"a b","state":"assistant_streaming"}`},
		{"c", `{"session_id":"other","state":"assistant_streaming"}`},
		{"d", `garbage`},
	} {
		if _, err := kv.Put(ctx, r.key, []byte(r.value)); err != nil {
			t.Fatal(err)
		}
	}
	put(ctx, t, st, "stalled", agent.StateAssistantStreaming, time.Now().Add(-time.Hour))
	if n, err := o.resweep(ctx, 0); err != nil || n != 1 {
		t.Fatalf("sweep woke %d, %v; want the stalled session", n, err)
	}
	if got := o.scan.tracked(); got != 1 {
		t.Fatalf("tracked %d, want the stalled session only", got)
	}
	s, err := o.e.SessionStream(ctx, subjects.StepStream, "stalled")
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := subjects.StepSubject("stalled")
	if _, err := s.GetLastMsgForSubject(ctx, subj); err != nil {
		t.Fatalf("no wake of the stalled session: %v", err)
	}
}

// A pass reads past one pull batch (256) and ends where the stream ended,
// with one consumer for the whole pass.
func TestStaleScanLongPass(t *testing.T) {
	t.Parallel()
	ctx, o, st := sweepFixture(t)
	now := time.Now()
	const n = 700
	want := make([]string, 0, n)
	for i := range n {
		sid := fmt.Sprintf("s%04d", i)
		put(ctx, t, st, sid, agent.StateAssistantStreaming, now)
		want = append(want, sid)
	}
	stream, err := o.e.JetStream().Stream(ctx, "KV_"+subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	var created atomic.Int32
	sub, err := o.e.Conn().Subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED.KV_"+subjects.TurnStateBucket+".>", func(*nats.Msg) { created.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := o.e.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := o.scan.follow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := o.scan.due(time.Now().Add(time.Hour)); !slices.Equal(got, want) {
		t.Fatalf("due: %d sessions, want %d", len(got), len(want))
	}
	// The server sends advisories from its own queue: give the last one
	// time to arrive.
	time.Sleep(200 * time.Millisecond)
	if err := o.e.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if n := created.Load(); n != 1 {
		t.Errorf("the pass made %d consumers on %s, want 1", n, stream.CachedInfo().Config.Name)
	}
}
