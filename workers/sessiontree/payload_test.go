package sessiontree

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestEntryLimitFollowsMaxPayload: on a server whose max payload is below
// the entry limit, the default limit shrinks to fit it (an entry the
// server would refuse is invalid_payload, for good, not unavailable), and
// an entry limit set above it fails Open saying so.
func TestEntryLimitFollowsMaxPayload(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(64<<10))
	e := enginetest.NewEngine(t, ns)
	s, err := Open(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx := context.Background()
	if _, err := s.Create(ctx, CreateRequest{SessionID: "p1"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{40 << 10, 64 << 10, 100 << 10} {
		_, err := s.Append(ctx, AppendRequest{SessionID: "p1", Message: new(agent.UserText(strings.Repeat("x", n), 1))})
		var we *wire.Error
		switch {
		case n <= 40<<10 && err != nil:
			t.Errorf("%d bytes: %v", n, err)
		case n > 40<<10 && (!errors.As(err, &we) || we.Code != wire.CodeInvalidPayload):
			t.Errorf("%d bytes: %v; want invalid_payload", n, err)
		}
	}
	if r, err := s.Messages(ctx, ReadRequest{SessionID: "p1"}); err != nil || len(r.Messages) != 1 {
		t.Fatalf("messages %d (%v); want the one that fit", len(r.Messages), err)
	}
	if _, err := Open(ctx, e, WithMaxEntrySize(256<<10)); !errors.Is(err, engine.ErrInvalidOption) || !strings.Contains(err.Error(), "max payload") {
		t.Fatalf("Open with an entry limit over the max payload: %v", err)
	}
}
