package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/queue"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// A consumer that stored a dead letter and died before its ack: the
// original comes back, later than the dead-letter stream's duplicate
// window, to another consumer, which must not store the dead letter a
// second time. The first consumer's user may not ack, which stops it
// exactly between the two steps.
func TestDeadLetterRedeliveredAfterDuplicateWindow(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "ok", Password: "ok"},
			{Username: "noack", Password: "noack", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.ACK.>"}},
			}},
		}
	})
	quiet := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
	connect := func(user string) *engine.Engine {
		e, err := engine.New(enginetest.Connect(t, ns, nats.UserInfo(user, user), quiet))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close(context.Background()) })
		return e
	}
	e := connect("ok")
	ctx := context.Background()
	serveFn(t, e, "test::reject", func(context.Context, job) error {
		return wire.Errorf(wire.CodeInvalidPayload, "rejected")
	})
	opts := fast(queue.WithAckWait(300*time.Millisecond), queue.WithMaxDeliver(2))

	crashing := consume(t, connect("noack"), "late", opts...)
	enqueue(t, e, "late", "test::reject", job{ID: 1})
	enginetest.Eventually(t, 5*time.Second, wantCount(1, func() int { return len(deadLetters(t, e, "late")) }))
	crashing.Stop()

	const window = 100 * time.Millisecond
	dlq, err := e.JetStream().Stream(ctx, subjects.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := dlq.CachedInfo().Config
	cfg.Duplicates = window
	if _, err := e.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * window) // the first dead letter's id is forgotten

	c := consume(t, e, "late", opts...)
	enginetest.Eventually(t, 5*time.Second, func() error {
		if st := inspect(t, e, "late"); st.Messages != 0 || c.Counters().DeadLettered != 1 {
			return fmt.Errorf("stats %+v, counters %+v", st, c.Counters())
		}
		return nil
	})
	if dls := deadLetters(t, e, "late"); len(dls) != 1 {
		t.Fatalf("%d dead letters of one message: %+v", len(dls), dls)
	}
}
