package hook

import (
	"bytes"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/enginetest"
)

// startInbox subscribes a round's inbox on a fresh server and returns it
// with a second connection to answer on. deliver wraps the handler.
func startInbox(t *testing.T, expected int, wrap func(func(*nats.Msg)) func(*nats.Msg)) (*inbox, *nats.Conn, string) {
	t.Helper()
	ns := enginetest.RunServer(t)
	nc := enginetest.Connect(t, ns, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	in := newInbox(expected)
	subj := nc.NewInbox()
	in.mu.Lock()
	sub, err := nc.Subscribe(subj, wrap(in.deliver))
	in.sub = sub
	in.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return in, enginetest.Connect(t, ns), subj
}

// waitIdle waits until in's handler has seen every message it was sent.
func waitIdle(t *testing.T, in *inbox) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if n, _, err := in.sub.Pending(); n == 0 || err != nil {
			return // all handled, or unsubscribed at the round's end
		}
		if time.Now().After(deadline) {
			t.Fatal("the handler did not catch up")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A flood of large replies that nobody reads yet is held within
// MaxReplyBytes: the handler counts each message as it arrives, not when
// the collector reads it. With a channel of expected_replies + 16 slots
// counted only on read, 40 replies of 512 KiB (20 MiB) were all held.
func TestInboxHoldsWithinBounds(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("x"), 512<<10)
	for _, tc := range []struct {
		name     string
		expected int
	}{
		{"expected_replies=0", 0},
		{"expected_replies=1000", MaxExpectedReplies},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, pub, subj := startInbox(t, tc.expected, func(h func(*nats.Msg)) func(*nats.Msg) { return h })
			for range 40 {
				if err := pub.Publish(subj, body); err != nil {
					t.Fatal(err)
				}
			}
			if err := pub.Flush(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-in.over:
			case <-time.After(10 * time.Second):
				t.Fatal("the round did not overflow")
			}
			waitIdle(t, in)
			held := 0
			for _, m := range in.take() {
				held += m.Size()
			}
			if held > MaxReplyBytes || held == 0 {
				t.Errorf("the round holds %d bytes of replies, want 1..%d", held, MaxReplyBytes)
			}
		})
	}
}

// A reply the client dropped while the round was open (its handler did
// not keep up) may have been a block: the round ends with Overflow, as
// at a bound, so a caller guarding a call denies it.
func TestInboxDropOverflows(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	in, pub, subj := startInbox(t, 0, func(h func(*nats.Msg)) func(*nats.Msg) {
		return func(m *nats.Msg) { <-release; h(m) }
	})
	if err := in.sub.SetPendingLimits(2, MaxReplyBytes); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := pub.Publish(subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n, _ := in.sub.Dropped(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing was dropped")
		}
	}
	close(release)
	select {
	case <-in.over:
	case <-time.After(10 * time.Second):
		t.Fatal("a dropped reply did not end the round with Overflow")
	}
}
