package main

import (
	"context"
	"errors"
	"strings"
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
// refusal is not sent again. What it prints on a failure is what it
// knows: a refusal was not recorded, a decision never answered may have
// been, and it says how to check and send it again.
func TestResolveDecisionRetries(t *testing.T) {
	t.Parallel()
	const (
		listCmd    = `iii trigger approval::list_pending '{"session_id":"s1"}'`
		resolveCmd = `iii trigger approval::resolve '{"decision":"allow","function_call_id":"c1","session_id":"s1"}'`
	)
	tests := []struct {
		name    string
		answers []string // the replies in turn; "" drops the request
		wantErr *wire.Error
		calls   int32
		say     []string // in what iii chat prints of the failure
		unsaid  []string // not in it
	}{
		{"answered", []string{`{"ok":true,"decision":"allow","decided_at":1}`}, nil, 1, nil, nil},
		{"first reply lost", []string{"", `{"ok":true,"already_decided":true,"decision":"allow","decided_at":1}`}, nil, 2, nil, nil},
		{"refused", []string{"not_pending"}, wire.ErrNotPending, 1,
			[]string{"decision not recorded", "decided otherwise or is not waiting"}, []string{"stays parked", "may or may not"}},
		{"invalid", []string{"invalid_payload"}, wire.ErrInvalidPayload, 1,
			[]string{"decision not recorded", "the call stays parked"}, []string{"may or may not"}},
		{"never answered", []string{"", "", "", "", "", "", "", ""}, wire.ErrTimeout, 0,
			[]string{"may or may not have been recorded", listCmd, resolveCmd}, []string{"stays parked", "not recorded"}},
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
				switch tc.answers[k] {
				case "not_pending":
					reply = wire.Reply(wire.Errorf(wire.CodeNotPending, "decided otherwise"), wire.JSON)
				case "invalid_payload":
					reply = wire.Reply(wire.Errorf(wire.CodeInvalidPayload, "reason is not valid UTF-8"), wire.JSON)
				default:
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
			req := map[string]string{"session_id": "s1", "function_call_id": "c1", "decision": "allow"}
			err = resolveDecision(context.Background(), e, req, 300*time.Millisecond)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				said := decisionFailed(err, req)
				for _, s := range tc.say {
					if !strings.Contains(said, s) {
						t.Errorf("prints %q, without %q", said, s)
					}
				}
				for _, s := range tc.unsaid {
					if strings.Contains(said, s) {
						t.Errorf("prints %q, with %q", said, s)
					}
				}
			}
			if tc.calls > 0 && n.Load() != tc.calls {
				t.Fatalf("%d calls, want %d", n.Load(), tc.calls)
			}
		})
	}
}
