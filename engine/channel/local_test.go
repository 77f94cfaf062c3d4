package channel_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TestLocalWriterSkipsTheBus: a writer whose engine and the reader's have
// local calls on hands its frames to the reader directly: nothing on the
// channel's subjects, and with WithLocalFirst no subscription either.
func TestLocalWriterSkipsTheBus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		opts    []channel.Option
		newSubs uint32 // subscriptions the reader adds on the server
	}{
		{"subscribed", nil, 3},
		{"local-first", []channel.Option{channel.WithLocalFirst()}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ns, re, we := pairMode(t, true)
			ctx := testCtx(t)
			nc := enginetest.Connect(t, ns)
			var seen atomic.Int64
			if _, err := nc.Subscribe("iii.ch.>", func(*nats.Msg) { seen.Add(1) }); err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			before := ns.NumSubscriptions()
			r := open(t, re, append([]channel.Option{channel.WithWindow(4)}, c.opts...)...)
			if got := ns.NumSubscriptions() - before; got != c.newSubs {
				t.Fatalf("the reader added %d subscriptions, want %d", got, c.newSubs)
			}
			w := writer(t, we, r.ID(), channel.WithCodec(wire.JSON))
			buf := []byte(`{"n":0}`)
			errc := make(chan error, 1)
			go func() {
				// More frames than the window: credit flows locally.
				for i := range 20 {
					buf[5] = byte('0' + i%10)
					if err := w.Write(ctx, buf); err != nil {
						errc <- err
						return
					}
				}
				errc <- w.Close(ctx)
			}()
			for i := range 20 {
				f, err := r.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var ev event
				// The writer reuses its buffer: the frame kept a copy.
				if err := f.Decode(&ev); err != nil || ev.N != i%10 {
					t.Fatalf("frame %d = %+v, %v", i+1, ev, err)
				}
			}
			if _, err := r.Next(ctx); err != channel.ErrEnd {
				t.Fatalf("Next = %v, want ErrEnd", err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			if n := seen.Load(); n != 0 {
				t.Fatalf("%d messages on iii.ch.>, want none", n)
			}
		})
	}
}

// TestLocalFirstOverTheBus: a WithLocalFirst reader is invisible on the
// bus until Subscribe; a writer in another process (here: an engine
// without local calls) finds nobody before, and streams after.
func TestLocalFirstOverTheBus(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	re := enginetest.NewEngine(t, ns, engine.WithLocalCalls(true))
	we := enginetest.NewEngine(t, ns) // another process, as far as channels go
	ctx := testCtx(t)

	t.Run("not subscribed", func(t *testing.T) {
		r := open(t, re, channel.WithLocalFirst(), channel.WithWindow(1), channel.WithIdleTimeout(time.Second), channel.WithAttachTimeout(300*time.Millisecond))
		w := writer(t, we, r.ID(), channel.WithIdleTimeout(500*time.Millisecond))
		// Frame 1 needs no credit and goes to nobody; frame 2 waits for
		// credit, and the server says nobody answers the writer's ping.
		_ = w.Write(ctx, event{N: 1})
		if err := w.Write(ctx, event{N: 2}); !errors.Is(err, channel.ErrReaderGone) {
			t.Fatalf("Write = %v, want ErrReaderGone", err)
		}
		if _, err := r.Next(ctx); !errors.Is(err, channel.ErrWriterGone) {
			t.Fatalf("Next = %v, want ErrWriterGone (nobody attached)", err)
		}
	})

	t.Run("subscribed", func(t *testing.T) {
		r := open(t, re, channel.WithLocalFirst())
		for range 2 { // idempotent
			if err := r.Subscribe(ctx); err != nil {
				t.Fatal(err)
			}
		}
		w := writer(t, we, r.ID())
		go func() {
			for i := range 5 {
				_ = w.Write(ctx, event{N: i})
			}
			_ = w.Close(ctx)
		}()
		for i := range 5 {
			f, err := r.Next(ctx)
			var ev event
			if err != nil || f.Decode(&ev) != nil || ev.N != i {
				t.Fatalf("frame %d = %+v, %v", i+1, ev, err)
			}
		}
		if _, err := r.Next(ctx); err != channel.ErrEnd {
			t.Fatalf("Next = %v, want ErrEnd", err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Subscribe(ctx); err != nil {
			t.Fatalf("Subscribe after Close = %v", err)
		}
	})

	t.Run("subscribe after close", func(t *testing.T) {
		before := ns.NumSubscriptions()
		r := open(t, re, channel.WithLocalFirst())
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Subscribe(ctx); err != nil {
			t.Fatal(err)
		}
		if got := ns.NumSubscriptions(); got > before {
			t.Fatalf("subscriptions %d after a closed reader's Subscribe, want at most %d", got, before)
		}
	})
}

// TestLocalWriterOneOnly: a second writer on a channel that has a local
// writer attached goes over the bus (and a reader closed or done is no
// longer found by local writers).
func TestLocalWriterOneOnly(t *testing.T) {
	t.Parallel()
	_, re, we := pairMode(t, true)
	ctx := testCtx(t)
	r := open(t, re)
	w1 := writer(t, we, r.ID())
	w2 := writer(t, we, r.ID()) // on the bus: the reader is subscribed
	if err := w1.Write(ctx, event{N: 1}); err != nil {
		t.Fatal(err)
	}
	if f, err := r.Next(ctx); err != nil || f.Seq != 1 {
		t.Fatalf("Next = %+v, %v", f, err)
	}
	// w2's frame 1 repeats a sequence number: a gap, as over the bus.
	if err := w2.Write(ctx, event{N: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(ctx); !errors.Is(err, channel.ErrGap) {
		t.Fatalf("Next = %v, want ErrGap", err)
	}
	// The reader failed: a new local writer finds nobody in this process.
	w3, err := channel.NewWriter(we, r.ID(), channel.WithIdleTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Close(context.Background())
	// w3 is a bus writer. A credit answer to w2's ping may still be in
	// flight on the channel's ack subject, which w3 shares, and grant w3 a
	// few frames. Past those, nobody answers w3.
	enginetest.Eventually(t, 5*time.Second, func() error {
		if err := w3.Write(ctx, event{}); !errors.Is(err, channel.ErrReaderGone) {
			return fmt.Errorf("Write to a failed reader = %v, want ErrReaderGone", err)
		}
		return nil
	})
}
