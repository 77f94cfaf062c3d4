package hooks_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/hook"
	"github.com/iii-on-nats/iii/workers/hooks"
)

// Example asks the subscribers of a hook, here two plain NATS clients, and
// folds their replies with a merge rule.
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	w := hooks.NewWorker()
	if err := w.Start(ctx, x.Engine); err != nil {
		panic(err)
	}
	defer w.Close(ctx)

	// Two subscribers, as `nats reply 'iii.hook.audit.ping' ...` would be.
	for _, body := range []string{`{"seen_by":"a","ok":true}`, `{"seen_by":"b"}`} {
		sub, err := x.Conn.Subscribe("iii.hook.audit.ping", func(m *nats.Msg) { _ = m.Respond([]byte(body)) })
		if err != nil {
			panic(err)
		}
		defer sub.Unsubscribe()
	}
	if err := x.Conn.Flush(); err != nil {
		panic(err)
	}

	res, err := engine.Call[hook.Result](ctx, x.Engine, hooks.PublishCollectFunction, hook.Request{
		Topic: "audit::ping", Payload: map[string]any{"session_id": "demo"},
		MergeRule: hook.FieldMerge, ExpectedReplies: 2,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(res.Replies), "replies; merged ok:", res.Merged["ok"])
	// Output:
	// 2 replies; merged ok: true
}
