package scripted_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/scripted"
)

// BenchmarkEchoStream streams an echo answer of 1,000 deltas (8,000 bytes
// at the default 8-byte delta) from the provider worker to a reader on
// another connection, through a real channel: one op is one whole model
// call (open, call, read every frame, end).
func BenchmarkEchoStream(b *testing.B) {
	for _, window := range []int{64, 256} {
		b.Run(fmt.Sprintf("deltas=1000,window=%d", window), func(b *testing.B) {
			ns := enginetest.RunServer(b)
			w := scripted.NewWorker(nil)
			if err := w.Start(context.Background(), enginetest.NewEngine(b, ns)); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = w.Close(context.Background()) })
			e := enginetest.NewEngine(b, ns)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			req := scripted.StreamRequest{
				Model:    scripted.EchoModel,
				Messages: []agent.Message{agent.UserText(strings.Repeat("abcdefgh", 1000), 1)},
			}
			events := 0
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				r, err := channel.Open(ctx, e, channel.WithWindow(window))
				if err != nil {
					b.Fatal(err)
				}
				req.Channel = r.ID()
				errc := make(chan error, 1)
				go func() { errc <- e.Trigger(ctx, scripted.StreamFunction, req, nil) }()
				for {
					f, err := r.Next(ctx)
					if errors.Is(err, channel.ErrEnd) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					var ev agent.ModelEvent
					if err := f.Decode(&ev); err != nil {
						b.Fatal(err)
					}
					events++
				}
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				_ = r.Close()
			}
			elapsed := time.Since(start)
			b.StopTimer()
			if want := b.N * 1006; events != want {
				b.Fatalf("read %d events, want %d", events, want)
			}
			b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkEvents measures laying out the same answer without NATS.
func BenchmarkEvents(b *testing.B) {
	p, err := scripted.New()
	if err != nil {
		b.Fatal(err)
	}
	req := scripted.StreamRequest{
		Model:    scripted.EchoModel,
		Messages: []agent.Message{agent.UserText(strings.Repeat("abcdefgh", 1000), 1)},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Events(req); err != nil {
			b.Fatal(err)
		}
	}
}
