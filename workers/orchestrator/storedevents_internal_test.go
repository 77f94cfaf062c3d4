package orchestrator

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// Past the event stream's duplicate window a replay asks which events of
// its outbox are stored already. Each is looked up: an event whose
// publish failed may sit before one that was stored, and must be
// published again, not counted as stored because a later one was.
func TestStoredEvents(t *testing.T) {
	t.Parallel()
	e, ctx := eventsEngine(t)
	p := newPublisher(e)
	emit := func(sid string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if err := p.Emit(ctx, agent.Event{Type: agent.EventTurnEnd, SessionID: sid}, id); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx, sid); err != nil {
			t.Fatal(err)
		}
	}
	// Another session's events share the stream and do not count.
	emit("other1", "r1:1:1", "r1:1:2")
	// r1:1:1 was never stored (its publish failed, the process died
	// before Flush published it again); r1:1:2 was.
	emit("gap1", "r1:1:0", "r1:1:2")

	outbox := []string{"r1:1:0", "r1:1:1", "r1:1:2", "r1:1:3"}
	hourAgo := time.Now().Add(-time.Hour).UnixMilli()
	for _, tc := range []struct {
		name      string
		sid       string
		writtenMs int64
		want      []string
	}{
		{"past the window", "gap1", hourAgo, []string{"r1:1:0", "r1:1:2"}},
		{"inside the window: the stream drops the copies", "gap1", time.Now().UnixMilli(), nil},
		{"no event stored", "none1", hourAgo, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.StoredEvents(ctx, tc.sid, outbox, tc.writtenMs)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("StoredEvents = %q, want %q", got, tc.want)
			}
		})
	}

	// The read's consumer is deleted once done, not left to the
	// inactive threshold: a mass replay must not pile them up.
	st, err := e.JetStream().Stream(ctx, subjects.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Consumers != 0 {
		t.Fatalf("consumers left on the event stream: %+v, %v", info.State, err)
	}

	// What was stored before the record's write (less the margin) is not
	// read.
	emit("since1", "r1:1:0")
	time.Sleep(50 * time.Millisecond)
	since := time.Now()
	emit("since1", "r2:1:0", "r2:1:1")
	have, err := p.storedSince(ctx, "since1", since)
	if err != nil {
		t.Fatal(err)
	}
	if len(have) != 2 || !have["ev:since1:r2:1:0"] || !have["ev:since1:r2:1:1"] {
		t.Fatalf("stored since: %v", have)
	}
	if have, err := p.storedSince(ctx, "since1", time.Now().Add(time.Hour)); err != nil || have != nil {
		t.Fatalf("stored since a future time: %v, %v", have, err)
	}
}

// eventsEngine starts a server and an engine with the event stream, and a
// context that ends with the test (30 s at most).
func eventsEngine(t *testing.T) (*engine.Engine, context.Context) {
	t.Helper()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := e.EnsureStream(ctx, eventStreamConfig(1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	return e, ctx
}
