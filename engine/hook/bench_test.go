package hook_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/hook"
	"github.com/iii-on-nats/iii/subjects"
)

// BenchmarkPublishCollect measures a hook with nobody subscribed (the
// common case: the no-responders answer ends it), with one subscriber on a
// second connection answering {} at once (ended by the default quiescence,
// then by expected_replies=1), and a bare nc.Request round trip beside them.
func BenchmarkPublishCollect(b *testing.B) {
	ns := enginetest.RunServer(b)
	nc := enginetest.Connect(b, ns)
	payload := hook.BeforeCall{SessionID: "s1", FunctionCallID: "call-1", FunctionID: "fs::read", Args: map[string]any{"path": "/workspace/a.txt"}}
	ctx := context.Background()

	sc := enginetest.Connect(b, ns)
	subj, err := subjects.HookSubject("bench::one")
	if err != nil {
		b.Fatal(err)
	}
	reply := func(m *nats.Msg) { _ = m.Respond([]byte(`{}`)) }
	for _, s := range []string{subj, "bench.request"} {
		if _, err := sc.Subscribe(s, reply); err != nil {
			b.Fatal(err)
		}
	}
	if err := sc.Flush(); err != nil {
		b.Fatal(err)
	}

	run := func(name string, req hook.Request, want int) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := hook.PublishCollect(ctx, nc, req)
				if err != nil || len(res.Replies) != want {
					b.Fatalf("res %+v err %v", res, err)
				}
			}
		})
	}
	run("no_subscribers", hook.Request{Topic: "bench::none", Payload: payload, MergeRule: hook.FirstBlockWins}, 0)
	run("one_subscriber", hook.Request{Topic: "bench::one", Payload: payload, MergeRule: hook.FirstBlockWins}, 1)
	run("one_subscriber,expected_replies=1", hook.Request{Topic: "bench::one", Payload: payload, MergeRule: hook.FirstBlockWins, ExpectedReplies: 1}, 1)

	data := []byte(`{"session_id":"s1","function_call_id":"call-1","function_id":"fs::read","args":{"path":"/workspace/a.txt"}}`)
	b.Run("nc.Request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := nc.Request("bench.request", data, 5*time.Second); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("nc.Request,no_responders", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := nc.Request("bench.nobody", data, 5*time.Second); err != nats.ErrNoResponders {
				b.Fatal(err)
			}
		}
	})
}
