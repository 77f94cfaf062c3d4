package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// The inbox watch answers a steering check of a session with empty
// inboxes without a read, and sees every write to the bucket: a push, a
// write by another client (as `nats kv put` makes), a drain. Before it has
// caught up, after it stops, and for a session homed in a region, every
// check reads.
func TestInboxWatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	kv, err := e.EnsureSessionKV(ctx, jetstream.KeyValueConfig{Bucket: subjects.InboxBucket, History: 1, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	// An inbox that held items before the watch started.
	if _, err := kv.Put(ctx, inboxKey("old", InboxFollowup), mustJSON(t, []agent.Message{agent.UserText("queued before", 1)})); err != nil {
		t.Fatal(err)
	}
	b := inbox{kvs: sessionKV{e: e, bucket: subjects.InboxBucket}, watch: newInboxWatch()}
	if b.watch.empty("s1") {
		t.Fatal("an unstarted watch answered for the inbox")
	}
	if err := b.watch.start(ctx, e.Conn(), kv, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	// eventually waits until Peek of sid finds n steering and m follow-up
	// items.
	eventually := func(what, sid string, n, m int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			steering, followups, _, err := b.Peek(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			if len(steering) == n && len(followups) == m {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d steering and %d follow-up items, want %d and %d", what, len(steering), len(followups), n, m)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Once caught up, a check of empty inboxes reads nothing.
	enginetest.Eventually(t, 10*time.Second, func() error {
		if before := b.watch.skipped.Load(); !b.watch.empty("s1") || b.watch.skipped.Load() != before+1 {
			return errors.New("the watch has not caught up")
		}
		return nil
	})
	eventually("written before the watch", "old", 0, 1)

	// A push made here is seen at once, before the watch delivers it.
	if _, err := b.push(ctx, "s1", InboxSteering, agent.UserText("steer", 2)); err != nil {
		t.Fatal(err)
	}
	if steering, _, _, err := b.Peek(ctx, "s1"); err != nil || len(steering) != 1 {
		t.Fatalf("right after a push here: %d steering items (err %v), want 1", len(steering), err)
	}
	// Another client writes the bucket directly.
	js, err := jetstream.New(enginetest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	okv, err := js.KeyValue(ctx, subjects.InboxBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := okv.Put(ctx, inboxKey("s2", InboxFollowup), mustJSON(t, []agent.Message{agent.UserText("later", 3)})); err != nil {
		t.Fatal(err)
	}
	eventually("put by another client", "s2", 0, 1)
	if _, err := b.drain(ctx, "s1", InboxSteering); err != nil {
		t.Fatal(err)
	}
	eventually("drained", "s1", 0, 0)
	if err := okv.Delete(ctx, inboxKey("s2", InboxFollowup)); err != nil {
		t.Fatal(err)
	}
	eventually("deleted by another client", "s2", 0, 0)
	// A read finds the inbox empty before the watch delivers the delete:
	// wait for the watch, then a check reads nothing.
	enginetest.Eventually(t, 10*time.Second, func() error {
		if !b.watch.empty("s2") {
			return errors.New("the watch has not seen the delete")
		}
		return nil
	})
	before := b.watch.skipped.Load()
	if _, _, _, err := b.Peek(ctx, "s2"); err != nil || b.watch.skipped.Load() != before+1 {
		t.Fatalf("a check after the delete read the inbox (err %v)", err)
	}
	if b.watch.empty("eu.s3") {
		t.Fatal("the watch answered for a session homed in a region")
	}
	b.watch.stop()
	if b.watch.empty("s1") {
		t.Fatal("a stopped watch answered for the inbox")
	}
}

// A write older than the last one known for a key changes nothing: a
// put made here may be known before the watch delivers an earlier delete.
func TestInboxWatchKeepsTheNewestWrite(t *testing.T) {
	w := newInboxWatch()
	w.ready = true
	key := inboxKey("s1", InboxFollowup)
	for _, step := range []struct {
		rev       uint64
		full      bool
		wantEmpty bool
	}{
		{5, true, false},  // a put made here
		{4, false, false}, // the watch delivers an older delete
		{5, true, false},  // and then the put itself
		{6, false, true},  // a newer delete empties it
		{3, true, true},   // a stale put does not bring it back
	} {
		w.saw(key, step.rev, step.full)
		if got := w.empty("s1"); got != step.wantEmpty {
			t.Fatalf("after rev %d (full %v): empty = %v, want %v", step.rev, step.full, got, step.wantEmpty)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
