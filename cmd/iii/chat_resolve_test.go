package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// `iii chat` sends a decision again when its answer is lost (a timeout):
// approval::resolve answers the repeat with the recorded decision, so the
// chat does not report a decision that was recorded as a failure. A
// refusal is not sent again.
func TestResolveDecisionRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		answers []string // the replies in turn; "" drops the request
		wantErr *wire.Error
		calls   int32
	}{
		{"answered", []string{`{"ok":true,"decision":"allow","decided_at":1}`}, nil, 1},
		{"first reply lost", []string{"", `{"ok":true,"already_decided":true,"decision":"allow","decided_at":1}`}, nil, 2},
		{"refused", []string{"not_pending"}, wire.ErrNotPending, 1},
		{"never answered", []string{"", "", "", "", "", "", "", ""}, wire.ErrTimeout, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			e := enginetest.NewEngine(t, ns)
			nc := enginetest.Connect(t, ns)
			var n atomic.Int32
			// The approval worker's place: answers in turn.
			sub, err := nc.Subscribe("iii.fn.approval.resolve", func(m *nats.Msg) {
				k := int(n.Add(1)) - 1
				if k >= len(tc.answers) || tc.answers[k] == "" {
					return
				}
				reply := nats.NewMsg("")
				if tc.answers[k] == "not_pending" {
					reply = wire.Reply(wire.Errorf(wire.CodeNotPending, "decided otherwise"), wire.JSON)
				} else {
					reply.Header.Set(wire.HeaderContentType, wire.ContentJSON)
					reply.Data = []byte(tc.answers[k])
				}
				_ = m.RespondMsg(reply)
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			err = resolveDecision(context.Background(), e, map[string]string{"session_id": "s1", "function_call_id": "c1", "decision": "allow"}, 300*time.Millisecond)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if tc.calls > 0 && n.Load() != tc.calls {
				t.Fatalf("%d calls, want %d", n.Load(), tc.calls)
			}
		})
	}
}
