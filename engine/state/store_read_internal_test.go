package state

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/enginetest"
)

// unansweredOnce is the store's real stream, except that its first
// last-message get is never answered: what a direct get sent to a replica
// that died, or to a stream electing its leader, sees.
type unansweredOnce struct {
	jetstream.Stream
	calls atomic.Int32
}

func (u *unansweredOnce) GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	if u.calls.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return u.Stream.GetLastMsgForSubject(ctx, subject)
}

// TestReadUnansweredIsSentAgain: a read whose get goes unanswered is sent
// again after one attempt (engine.RetryRead), so Get answers well within
// a long deadline instead of timing out at its end.
func TestReadUnansweredIsSentAgain(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := New(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Set(ctx, "s", "k", "v"); err != nil {
		t.Fatal(err)
	}
	u := &unansweredOnce{Stream: store.stream}
	store.stream = u
	start := time.Now()
	v, _, err := store.Get(ctx, "s", "k")
	if err != nil {
		t.Fatalf("Get after an unanswered read: %v (after %v)", err, time.Since(start))
	}
	if v != "v" || u.calls.Load() != 2 {
		t.Fatalf("Get = %v after %d gets", v, u.calls.Load())
	}
}
