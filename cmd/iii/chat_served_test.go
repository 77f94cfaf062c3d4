package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// A line sent to a node whose orchestrator has not registered yet (it is
// restarting; chat reconnected first) waits for it within the reconnect
// wait instead of failing with function_not_found; a start whose answer
// was lost is sent again once the connection is up (it carries an
// idempotency key); nothing else is retried.
func TestWhenServed(t *testing.T) {
	t.Parallel()
	notFound := wire.Wrap(wire.CodeFunctionNotFound, nil, "no worker is registered for this function")
	other := wire.Errorf(wire.CodeInvalidPayload, "bad")
	timeout := wire.Errorf(wire.CodeTimeout, "no reply before the deadline")
	back := func(context.Context) (string, error) { return "", nil }
	gone := func(context.Context) (string, error) { return "the node did not come back within 1m0s", nil }
	tests := []struct {
		name      string
		wait      time.Duration
		await     func(context.Context) (string, error)
		answers   []error // then nil
		want      error
		wantCalls int
		said      bool
	}{
		{name: "served at once", wait: time.Minute, wantCalls: 1},
		{name: "registered after a while", wait: time.Minute, answers: []error{notFound, notFound, notFound, notFound, notFound, notFound, notFound}, wantCalls: 8, said: true},
		{name: "never registered", wait: 500 * time.Millisecond, answers: []error{notFound, notFound, notFound, notFound, notFound, notFound, notFound, notFound, notFound, notFound}, want: wire.ErrFunctionNotFound, wantCalls: 4},
		{name: "no wait", wait: 0, answers: []error{notFound}, want: wire.ErrFunctionNotFound, wantCalls: 1},
		{name: "other errors are not retried", wait: time.Minute, await: back, answers: []error{other}, want: wire.ErrInvalidPayload, wantCalls: 1},
		{name: "answer lost, connection back", wait: time.Minute, await: back, answers: []error{timeout, timeout}, wantCalls: 3},
		{name: "answer lost, node gone", wait: time.Minute, await: gone, answers: []error{timeout}, want: wire.ErrTimeout, wantCalls: 1},
		{name: "answer lost, no retry without await", wait: time.Minute, answers: []error{timeout}, want: wire.ErrTimeout, wantCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var notes bytes.Buffer
			calls := 0
			err := whenServed(context.Background(), tc.wait, &notes, tc.await, func() error {
				calls++
				if calls <= len(tc.answers) {
					return tc.answers[calls-1]
				}
				return nil
			})
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if tc.want == nil && calls != tc.wantCalls || tc.want != nil && calls < tc.wantCalls {
				t.Fatalf("%d calls, want %d", calls, tc.wantCalls)
			}
			if said := strings.Contains(notes.String(), "node is starting"); said != tc.said {
				t.Fatalf("notes %q", notes.String())
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := whenServed(ctx, time.Minute, &bytes.Buffer{}, back, func() error { return notFound }); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

// Every line chat sends starts its run with an idempotency key of its own,
// so a start sent again after a lost answer starts it once.
func TestChatStartsWithIdempotencyKey(t *testing.T) {
	a := startTestApp(t)
	keys := map[string]bool{}
	for range 2 {
		if out, err := runIII(t, "chat", "--nats", a.node.ClientURL(), "--session", "chat_idem", "-m", "hello"); err != nil {
			t.Fatalf("chat: %v\n%s", err, out)
		}
		out, err := turnRecordJSON(t, a, "chat_idem")
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Request struct {
				IdempotencyKey string `json:"idempotency_key"`
			} `json:"request"`
		}
		if err := json.Unmarshal(out, &rec); err != nil {
			t.Fatal(err)
		}
		k := rec.Request.IdempotencyKey
		if !strings.HasPrefix(k, "chat-") || keys[k] {
			t.Fatalf("run started with idempotency key %q (seen before: %v)", k, keys[k])
		}
		keys[k] = true
	}
}

// turnRecordJSON reads sid's turn record from KV.
func turnRecordJSON(t *testing.T, a *app, sid string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := a.e.JetStream().KeyValue(ctx, subjects.SessionBucket(subjects.TurnStateBucket, sid))
	if err != nil {
		return nil, err
	}
	ent, err := kv.Get(ctx, sid)
	if err != nil {
		return nil, err
	}
	return ent.Value(), nil
}
