package wire_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestFromNATSReconnecting: while a connection's server is away, a
// publish over its reconnect buffer fails; that is unavailable,
// which callers retry, not internal, which they take as for good. A
// handler's call of another function (engine.Trigger) or its channel
// frame (a publish) meets these errors during a server restart.
func TestFromNATSReconnecting(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	big := bytes.Repeat([]byte("x"), 4<<10)
	conn := func() *nats.Conn {
		return enginetest.Connect(t, ns, nats.ReconnectBufSize(1<<10), nats.ReconnectWait(time.Hour))
	}
	pubConn, callConn := conn(), conn()
	e, err := engine.New(callConn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	ns.Shutdown()
	ns.WaitForShutdown()
	enginetest.Eventually(t, 5*time.Second, func() error {
		for _, nc := range []*nats.Conn{pubConn, callConn} {
			if !nc.IsReconnecting() {
				return errors.New("not reconnecting yet")
			}
		}
		return nil
	})
	// A publish goes to the reconnect buffer while it is under its limit:
	// these fill it.
	for _, nc := range []*nats.Conn{pubConn, callConn} {
		if err := nc.Publish("iii.test", big); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		do   func() error
		want error // the nats.go error the case provokes
	}{
		{"publish over the reconnect buffer", func() error { return pubConn.Publish("iii.test", big) }, nats.ErrReconnectBufExceeded},
		{"trigger over the reconnect buffer", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return e.Trigger(ctx, "t::far", engine.Raw(big), nil)
		}, nats.ErrReconnectBufExceeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if we := wire.FromNATS(err); we.Code != wire.CodeUnavailable || !we.Retryable {
				t.Fatalf("FromNATS(%v) = %v, want unavailable", err, we)
			}
		})
	}
}

// TestFromNATSSubscriptionErrors: a subscription that dropped messages
// (slow consumer) or was closed under its reader (bad subscription)
// fails this attempt, not every one: unavailable, which callers retry,
// not internal, which they take as for good.
func TestFromNATSSubscriptionErrors(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	// The slow consumer is reported to the error handler as well; it is
	// expected here.
	nc := enginetest.Connect(t, ns, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	cases := []struct {
		name string
		do   func(t *testing.T) error
		want error // the nats.go error the case provokes
	}{
		{"slow consumer", func(t *testing.T) error {
			sub, err := nc.SubscribeSync("iii.test.slow")
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.SetPendingLimits(1, -1); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := nc.Publish("iii.test.slow", []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			enginetest.Eventually(t, 5*time.Second, func() error {
				if n, _ := sub.Dropped(); n == 0 {
					return errors.New("nothing dropped yet")
				}
				return nil
			})
			_, err = sub.NextMsg(time.Second)
			return err
		}, nats.ErrSlowConsumer},
		{"next message of a closed subscription", func(t *testing.T) error {
			sub, err := nc.SubscribeSync("iii.test.closed")
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Unsubscribe(); err != nil {
				t.Fatal(err)
			}
			_, err = sub.NextMsg(time.Second)
			return err
		}, nats.ErrBadSubscription},
		{"unsubscribe twice", func(t *testing.T) error {
			sub, err := nc.Subscribe("iii.test.twice", func(*nats.Msg) {})
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Unsubscribe(); err != nil {
				t.Fatal(err)
			}
			return fmt.Errorf("unsubscribe: %w", sub.Unsubscribe())
		}, nats.ErrBadSubscription},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.do(t)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			we := wire.FromNATS(err)
			if we.Code != wire.CodeUnavailable || !we.Retryable {
				t.Fatalf("FromNATS(%v) = %v, want unavailable", err, we)
			}
			if !errors.Is(we, c.want) {
				t.Fatalf("FromNATS(%v) lost its cause", err)
			}
		})
	}
}
