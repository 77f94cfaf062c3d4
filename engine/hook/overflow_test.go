package hook_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/hook"
	"github.com/iii-on-nats/iii/subjects"
)

// flood starts a subscriber on topic's hook subject that answers every
// hook with body, again and again, until the test ends.
func flood(t *testing.T, ns *server.Server, topic string, body []byte) {
	t.Helper()
	subj, err := subjects.HookSubject(topic)
	if err != nil {
		t.Fatal(err)
	}
	nc := enginetest.Connect(t, ns)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() }) // before Connect's Close
	if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := nc.Publish(m.Reply, body); err != nil {
					return
				}
			}
		}()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// A subscriber that floods replies ends the round at MaxReplies or
// MaxReplyBytes, long before its timeout, with Overflow set; without the
// bounds every reply restarted the quiescence and was kept until the
// timeout. A round that expects MaxReplies replies ends normally.
func TestFloodingSubscriberOverflows(t *testing.T) {
	t.Parallel()
	// Long, so that "ended well before its timeout" holds on a loaded
	// machine under -race (10 s rounds took up to 12 s there); without
	// the bounds a round lasts the whole timeout.
	const timeout = 60 * time.Second
	big := `{"pad":"` + strings.Repeat("x", 64<<10) + `"}`
	for _, tc := range []struct {
		name         string
		body         string
		expected     int
		wantOverflow bool
	}{
		{name: "small_replies", body: `{}`, wantOverflow: true},
		{name: "invalid_replies", body: `not json`, wantOverflow: true},
		{name: "large_replies", body: big, wantOverflow: true},
		{name: "large_replies,expected_replies=1000", body: big, expected: hook.MaxExpectedReplies, wantOverflow: true},
		{name: "small_replies,expected_replies=1000", body: `{}`, expected: hook.MaxExpectedReplies},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			// The flood makes the inbox a slow consumer: keep that quiet.
			nc := enginetest.Connect(t, ns, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
			flood(t, ns, topic, []byte(tc.body))
			start := time.Now()
			res, err := hook.PublishCollect(context.Background(), nc, hook.Request{
				Topic:           topic,
				MergeRule:       hook.FirstBlockWins,
				TimeoutMs:       int(timeout / time.Millisecond),
				QuiescenceMs:    int(timeout / time.Millisecond),
				ExpectedReplies: tc.expected,
			})
			took := time.Since(start)
			if err != nil {
				t.Fatalf("PublishCollect: %v", err)
			}
			checkShape(t, res)
			t.Logf("took %v: %d replies, %d invalid, %d dropped, overflow %v", took, len(res.Replies), res.Invalid, res.Dropped, res.Overflow)
			if res.Overflow != tc.wantOverflow {
				t.Errorf("overflow %v, want %v", res.Overflow, tc.wantOverflow)
			}
			if took > timeout/2 {
				t.Errorf("took %v of a %v timeout: the round did not end at its bound", took, timeout)
			}
			read := len(res.Replies) + res.Invalid
			if read > hook.MaxReplies || read == 0 {
				t.Errorf("read %d messages, want 1..%d", read, hook.MaxReplies)
			}
			if tc.expected > 0 && !tc.wantOverflow && len(res.Replies) != tc.expected {
				t.Errorf("replies %d, want %d", len(res.Replies), tc.expected)
			}
			if kept := read * len(tc.body); kept > hook.MaxReplyBytes {
				t.Errorf("kept %d bytes of replies, over %d", kept, hook.MaxReplyBytes)
			}
		})
	}
}
