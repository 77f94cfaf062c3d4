package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// Requeue is idempotent, as delivering an outbox twice must be: the run's
// follow-ups go back in front of what was pushed since, once.
func TestInboxRequeueOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := enginetest.Engine(t)
	if _, err := e.EnsureSessionKV(ctx, jetstream.KeyValueConfig{Bucket: subjects.InboxBucket, History: 1, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	b := inbox{kvs: sessionKV{e: e, bucket: subjects.InboxBucket}}
	held := []agent.Message{agent.UserText("first", 1), agent.UserText("second", 2)}
	if _, err := b.push(ctx, "s1", InboxFollowup, agent.UserText("pushed since", 3)); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time is a redelivery after a crash
		if err := b.Requeue(ctx, "s1", held); err != nil {
			t.Fatal(err)
		}
	}
	_, followups, _, err := b.Peek(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range followups {
		got = append(got, m.Content[0].Text)
	}
	if want := []string{"first", "second", "pushed since"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("follow-ups %q, want %q", got, want)
	}
	// Different follow-ups are put back, even when others already are.
	if err := b.Requeue(ctx, "s1", []agent.Message{agent.UserText("third", 4)}); err != nil {
		t.Fatal(err)
	}
	if _, followups, _, _ = b.Peek(ctx, "s1"); len(followups) != 4 || followups[0].Content[0].Text != "third" {
		t.Fatalf("a new requeue was not put back: %d follow-ups", len(followups))
	}
}

// Ack removes only the items its Peek returned: an inbox drained
// (session::inbox_drain) and pushed to between a steering check's Peek and
// its Ack keeps the new item, which the check never read. An Ack by count
// removed it, and no run ever saw it.
func TestInboxAckKeepsItemsPushedSincePeek(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := enginetest.Engine(t)
	if _, err := e.EnsureSessionKV(ctx, jetstream.KeyValueConfig{Bucket: subjects.InboxBucket, History: 1, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	b := inbox{kvs: sessionKV{e: e, bucket: subjects.InboxBucket}}
	texts := func(items []agent.Message) []string {
		var out []string
		for _, m := range items {
			out = append(out, m.Content[0].Text)
		}
		return out
	}
	for _, name := range []string{InboxSteering, InboxFollowup} {
		for i, text := range []string{"a", "b"} {
			if _, err := b.push(ctx, "s1", name, agent.UserText(text, int64(i+1))); err != nil {
				t.Fatal(err)
			}
		}
	}
	steering, followups, mark, err := b.Peek(ctx, "s1")
	if err != nil || len(steering) != 2 || len(followups) != 2 {
		t.Fatalf("peek: %v %v %+v %v", texts(steering), texts(followups), mark, err)
	}
	// Between the check's Peek and its Ack: the steering inbox is drained
	// and pushed to; the follow-ups get one more item behind the two read.
	if _, err := b.drain(ctx, "s1", InboxSteering); err != nil {
		t.Fatal(err)
	}
	if _, err := b.push(ctx, "s1", InboxSteering, agent.UserText("pushed since", 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.push(ctx, "s1", InboxFollowup, agent.UserText("c", 4)); err != nil {
		t.Fatal(err)
	}
	if err := b.Ack(ctx, "s1", mark); err != nil {
		t.Fatal(err)
	}
	steering, followups, _, err = b.Peek(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got := texts(steering); len(got) != 1 || got[0] != "pushed since" {
		t.Errorf("steering after the ack: %q, want the item pushed since the peek", got)
	}
	if got := texts(followups); len(got) != 1 || got[0] != "c" {
		t.Errorf("follow-ups after the ack: %q, want [c]", got)
	}
	// The same Ack again (an activation after a crash that could not
	// tell whether the first one was done) removes nothing more; the
	// mark alone says what to remove, in any process.
	if err := (inbox{kvs: sessionKV{e: e, bucket: subjects.InboxBucket}}).Ack(ctx, "s1", mark); err != nil {
		t.Fatal(err)
	}
	kv, err := e.JetStream().KeyValue(ctx, subjects.InboxBucket)
	if err != nil {
		t.Fatal(err)
	}
	before, err := kv.Get(ctx, inboxKey("s1", InboxSteering))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Ack(ctx, "s1", mark); err != nil {
		t.Fatal(err)
	}
	steering, followups, _, err = b.Peek(ctx, "s1")
	if err != nil || len(steering) != 1 || len(followups) != 1 {
		t.Errorf("after the Ack again: %q %q, %v", texts(steering), texts(followups), err)
	}
	// A removal that matched nothing writes nothing.
	if after, err := kv.Get(ctx, inboxKey("s1", InboxSteering)); err != nil || after.Revision() != before.Revision() {
		t.Errorf("an Ack that removed nothing wrote the inbox: revision %d → %d, %v", before.Revision(), after.Revision(), err)
	}
}

// within takes the longest head within the bytes and within the items an
// inbox holds (maxInboxItems), one item at least, with a digest for each.
func TestInboxWithin(t *testing.T) {
	t.Parallel()
	small := func(n int) []agent.Message {
		out := make([]agent.Message, n)
		for i := range out {
			out[i] = agent.UserText(fmt.Sprintf("s%04d", i), 1)
		}
		return out
	}
	big := agent.UserText(strings.Repeat("b", 1000), 1)
	for _, c := range []struct {
		name  string
		items []agent.Message
		limit int64
		want  int
	}{
		{"none", nil, 1 << 20, 0},
		{"all", small(10), 1 << 20, 10},
		{"bytes", []agent.Message{big, big, big}, 2200 + 2*itemOverhead, 2},
		// Small items count their cost to the record beyond their JSON:
		// 62 of some 330 bytes each fit 20 KiB, not all 200.
		{"overhead", small(200), 20 << 10, 62},
		{"one over the bytes alone", []agent.Message{big, big}, 10, 1},
		{"items", small(3 * maxInboxItems), 1 << 40, maxInboxItems},
	} {
		got, ds := within(c.items, c.limit)
		if len(got) != c.want || len(ds) != c.want {
			t.Errorf("%s: %d items, %d digests, want %d", c.name, len(got), len(ds), c.want)
			continue
		}
		for i, m := range got {
			if ds[i] != itemDigest(m) {
				t.Errorf("%s: digest %d is not the item's", c.name, i)
			}
		}
	}
}
