package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/wire"
)

// A line sent to a node whose orchestrator has not registered yet (it is
// restarting; chat reconnected first) waits for it within the reconnect
// wait instead of failing with function_not_found; nothing else is
// retried.
func TestWhenServed(t *testing.T) {
	t.Parallel()
	notFound := wire.Wrap(wire.CodeFunctionNotFound, nil, "no worker is registered for this function")
	other := wire.Errorf(wire.CodeInvalidPayload, "bad")
	tests := []struct {
		name      string
		wait      time.Duration
		answers   []error // then nil
		want      error
		wantCalls int
		said      bool
	}{
		{name: "served at once", wait: time.Minute, wantCalls: 1},
		{name: "registered after a while", wait: time.Minute, answers: []error{notFound, notFound, notFound, notFound, notFound, notFound, notFound}, wantCalls: 8, said: true},
		{name: "never registered", wait: 500 * time.Millisecond, answers: []error{notFound, notFound, notFound, notFound, notFound, notFound, notFound, notFound, notFound, notFound}, want: wire.ErrFunctionNotFound, wantCalls: 4},
		{name: "no wait", wait: 0, answers: []error{notFound}, want: wire.ErrFunctionNotFound, wantCalls: 1},
		{name: "other errors are not retried", wait: time.Minute, answers: []error{other}, want: wire.ErrInvalidPayload, wantCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var notes bytes.Buffer
			calls := 0
			err := whenServed(context.Background(), tc.wait, &notes, func() error {
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
	if err := whenServed(ctx, time.Minute, &bytes.Buffer{}, func() error { return notFound }); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}
