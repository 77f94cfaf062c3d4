package orchestrator

import (
	"context"
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
