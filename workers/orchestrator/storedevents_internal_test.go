package orchestrator

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	// A record written this long ago is the oldest whose replay trusts
	// the window.
	trusted := time.Now().Add(-(eventDuplicateWindow - replayMargin)).UnixMilli()
	for _, tc := range []struct {
		name      string
		sid       string
		writtenMs int64
		want      []string
	}{
		{"past the window", "gap1", hourAgo, []string{"r1:1:0", "r1:1:2"}},
		{"inside the window: the stream drops the copies", "gap1", time.Now().UnixMilli(), nil},
		{"written just inside the window, less the margin", "gap1", trusted + time.Second.Milliseconds(), nil},
		{"written inside the window, not less the margin", "gap1", trusted - time.Second.Milliseconds(), []string{"r1:1:0", "r1:1:2"}},
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

// A publish that failed is not carried by the next checkpoint: settled
// says so (and keeps saying so: the future's error answers once), and
// Flush publishes it again, once.
func TestPublisherFailedPublish(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	p := newPublisher(e)
	// No event stream yet: the publish has no responders.
	if err := p.publish("f1", "iii.events.f1", "ev:f1:r1:1:0", []byte(`{"type":"turn_end"}`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		done, failed := p.settled("f1")
		if done {
			t.Fatal("a publish with no stream settled")
		}
		if failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed publish was never reported")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if done, failed := p.settled("f1"); done || !failed {
		t.Fatalf("settled again = %v, %v; want the failure kept", done, failed)
	}
	if _, err := e.EnsureStream(ctx, eventStreamConfig(1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx, "f1"); err != nil {
		t.Fatal(err)
	}
	if done, failed := p.settled("f1"); !done || failed {
		t.Fatalf("settled after Flush = %v, %v", done, failed)
	}
	st, err := e.JetStream().Stream(ctx, subjects.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("event stream after Flush: %+v, %v", info.State, err)
	}
}

// failedFuture is a publish whose answer never came.
type failedFuture struct{ msg *nats.Msg }

func (f failedFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (f failedFuture) Err() <-chan error {
	ch := make(chan error, 1)
	ch <- nats.ErrTimeout
	return ch
}
func (f failedFuture) Msg() *nats.Msg { return f.msg }

// A publish that failed longer ago than the event stream's duplicate
// window is looked up before Flush publishes it again: one whose answer
// was lost but that was stored is not stored twice.
func TestFlushPastTheWindow(t *testing.T) {
	t.Parallel()
	e, ctx := eventsEngine(t)
	p := newPublisher(e)
	if err := p.Emit(ctx, agent.Event{Type: agent.EventTurnEnd, SessionID: "late1"}, "r1:1:0"); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx, "late1"); err != nil {
		t.Fatal(err)
	}
	// The server forgets the id, as it would after the window.
	es, err := e.JetStream().Stream(ctx, subjects.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := es.CachedInfo().Config
	cfg.Duplicates = 200 * time.Millisecond
	if _, err := e.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	msg := func(id string) *nats.Msg {
		m := nats.NewMsg("iii.events.late1")
		m.Header.Set(jetstream.MsgIDHeader, "ev:late1:"+id)
		m.Data = []byte(`{"type":"turn_end","session_id":"late1"}`)
		return m
	}
	// Both failed "an hour ago" as far as the window can tell: the first
	// was stored (its answer lost), the second was not.
	long := time.Now().Add(-time.Hour)
	p.pending["late1"] = []pubAck{
		{f: failedFuture{msg("r1:1:0")}, at: long},
		{f: failedFuture{msg("r1:1:1")}, at: long},
	}
	if err := p.Flush(ctx, "late1"); err != nil {
		t.Fatal(err)
	}
	info, err := es.Info(ctx)
	if err != nil || info.State.Msgs != 2 {
		t.Fatalf("event stream after Flush: %+v, %v; want r1:1:0 once and r1:1:1", info.State, err)
	}
}
