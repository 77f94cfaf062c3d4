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

// TestEntryFitsJSONAnswers: an entry under the size cap in msgpack whose
// JSON would not fit an answer of its own (a control character takes six
// bytes there, one in msgpack) is invalid_payload, in either codec; the
// batch it is in stores nothing. Before, it was stored, and every
// session::entries and session::messages over JSON of a path through it
// failed with internal, for good. One that fits is read over JSON.
func TestEntryFitsJSONAnswers(t *testing.T) {
	t.Parallel()
	for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
		t.Run(codec.ContentType(), func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t, enginetest.WithMaxPayload(16<<10))
			e := enginetest.NewEngine(t, ns, engine.WithCodec(codec))
			w := NewWorker()
			if err := w.Start(context.Background(), e); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close(context.Background()) })
			s := w.Store()
			ctx := context.Background()
			if _, err := s.Create(ctx, CreateRequest{SessionID: "ctl"}); err != nil {
				t.Fatal(err)
			}
			// 12,000 bytes: under the entry limit (15 KiB less the slack),
			// 72,000 as JSON.
			ctl := agent.UserText(strings.Repeat("\x1b", 12000), 1)
			_, err := engine.Call[AppendResponse](ctx, e, AppendFunction, AppendRequest{SessionID: "ctl", Message: &ctl})
			if we := wire.From(err); err == nil || we.Code != wire.CodeInvalidPayload {
				t.Fatalf("append of an entry too large as JSON: %v; want invalid_payload", err)
			}
			_, err = engine.Call[AppendBatchResponse](ctx, e, AppendBatchFunction, AppendBatchRequest{SessionID: "ctl", Messages: []agent.Message{agent.UserText("fine", 1), ctl}})
			if we := wire.From(err); err == nil || we.Code != wire.CodeInvalidPayload {
				t.Fatalf("batch with an entry too large as JSON: %v; want invalid_payload", err)
			}
			if m, err := s.Meta(ctx, "ctl"); err != nil || m.EntryCount != 0 {
				t.Fatalf("meta %+v (%v): want no entry stored", m, err)
			}
			ok := agent.UserText(strings.Repeat("\x1b", 2000), 1)
			if _, err := engine.Call[AppendResponse](ctx, e, AppendFunction, AppendRequest{SessionID: "ctl", Message: &ok}); err != nil {
				t.Fatal(err)
			}
			json := enginetest.NewEngine(t, ns, engine.WithCodec(wire.JSON))
			if r, err := engine.Call[EntriesResponse](ctx, json, EntriesFunction, EntriesRequest{SessionID: "ctl"}); err != nil || len(r.Entries) != 1 {
				t.Fatalf("entries over JSON: %d (%v)", len(r.Entries), err)
			}
			if r, err := engine.Call[MessagesResponse](ctx, json, MessagesFunction, MessagesRequest{SessionID: "ctl"}); err != nil || len(r.Messages) != 1 {
				t.Fatalf("messages over JSON: %d (%v)", len(r.Messages), err)
			}
		})
	}
}
