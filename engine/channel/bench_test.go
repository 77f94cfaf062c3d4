package channel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// BenchmarkChannelThroughput streams b.N small frames (a ~50-byte token
// event) from a writer to a reader on separate connections over TCP
// loopback, for several credit windows.
func BenchmarkChannelThroughput(b *testing.B) {
	type token struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta string `json:"delta"`
	}
	for _, window := range []int{16, 64, 256} {
		b.Run(fmt.Sprintf("window=%d,size=50B", window), func(b *testing.B) {
			ns := enginetest.RunServer(b)
			re, we := enginetest.NewEngine(b, ns), enginetest.NewEngine(b, ns)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			r, err := channel.Open(ctx, re, channel.WithWindow(window))
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			w, err := channel.NewWriter(we, r.ID())
			if err != nil {
				b.Fatal(err)
			}
			ev := token{Type: "text_delta", Index: 0, Delta: "the quick brown fox jumps"}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			errc := make(chan error, 1)
			go func() {
				for i := 0; i < b.N; i++ {
					if err := w.Write(ctx, ev); err != nil {
						errc <- err
						return
					}
				}
				errc <- w.Close(ctx)
			}()
			var n int
			for {
				_, err := r.Next(ctx)
				if errors.Is(err, channel.ErrEnd) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			elapsed := time.Since(start)
			b.StopTimer()
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			if n != b.N {
				b.Fatalf("read %d frames of %d", n, b.N)
			}
			b.ReportMetric(float64(n)/elapsed.Seconds(), "frames/s")
		})
	}
}

// BenchmarkChannelLatency measures one frame from Write to the reader's
// Next, one frame at a time (the pace of a model's tokens).
func BenchmarkChannelLatency(b *testing.B) {
	ns := enginetest.RunServer(b)
	re, we := enginetest.NewEngine(b, ns), enginetest.NewEngine(b, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := channel.Open(ctx, re)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	w, err := channel.NewWriter(we, r.ID())
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"type":"text_delta","delta":"the quick brown fox"}`)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := w.Write(ctx, payload); err != nil {
			b.Fatal(err)
		}
		if _, err := r.Next(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/frame")
	b.StopTimer()
	_ = w.Close(ctx)
}
