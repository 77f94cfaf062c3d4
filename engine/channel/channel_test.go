package channel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

type event struct {
	N    int    `json:"n"`
	Text string `json:"text"`
}

// pair starts a server and returns two engines on separate connections:
// one for the reader, one for the writer, as two processes would have.
func pair(t *testing.T, sopts ...enginetest.ServerOption) (ns *server.Server, re, we *engine.Engine) {
	t.Helper()
	ns = enginetest.RunServer(t, sopts...)
	return ns, enginetest.NewEngine(t, ns), enginetest.NewEngine(t, ns)
}

// pairMode is pair with local calls on both engines when local is set:
// the writer then attaches to the reader in this process (local.go).
func pairMode(t *testing.T, local bool, sopts ...enginetest.ServerOption) (ns *server.Server, re, we *engine.Engine) {
	t.Helper()
	ns = enginetest.RunServer(t, sopts...)
	return ns, enginetest.NewEngine(t, ns, engine.WithLocalCalls(local)), enginetest.NewEngine(t, ns, engine.WithLocalCalls(local))
}

// forModes runs test over the bus and with a local writer.
func forModes(t *testing.T, test func(t *testing.T, local bool)) {
	t.Parallel()
	enginetest.BusAndLocal(t, test)
}

func open(t *testing.T, e *engine.Engine, opts ...channel.Option) *channel.Reader {
	t.Helper()
	r, err := channel.Open(context.Background(), e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func writer(t *testing.T, e *engine.Engine, id string, opts ...channel.Option) *channel.Writer {
	t.Helper()
	w, err := channel.NewWriter(e, id, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

// delivered returns once what was published on from so far is in the
// buffers of to's subscriptions: the server forwarded it before it
// answered from's flush, and to's client took it off its connection, in
// order, before the answer to to's flush.
func delivered(t *testing.T, from, to *nats.Conn) {
	t.Helper()
	for _, nc := range []*nats.Conn{from, to} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTenThousandFramesInOrder(t *testing.T) {
	forModes(t, func(t *testing.T, local bool) {
		_, re, we := pairMode(t, local)
		ctx := testCtx(t)
		r := open(t, re)
		w := writer(t, we, r.ID())
		const n = 10_000
		errc := make(chan error, 1)
		go func() {
			for i := range n {
				if err := w.Write(ctx, event{N: i, Text: "tok"}); err != nil {
					errc <- fmt.Errorf("write %d: %w", i, err)
					return
				}
			}
			errc <- w.Close(ctx)
		}()
		for i := range n {
			f, err := r.Next(ctx)
			if err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			var ev event
			if err := f.Decode(&ev); err != nil {
				t.Fatal(err)
			}
			if f.Seq != uint64(i+1) || f.Kind != channel.KindData || ev.N != i || ev.Text != "tok" {
				t.Fatalf("frame %d = seq %d kind %v %+v", i, f.Seq, f.Kind, ev)
			}
			if f.Codec != wire.Msgpack {
				t.Fatalf("frame codec %v, want msgpack", f.Codec.ContentType())
			}
		}
		for range 2 { // the end is sticky
			if _, err := r.Next(ctx); err != channel.ErrEnd || !errors.Is(err, io.EOF) {
				t.Fatalf("after the last frame: %v, want ErrEnd", err)
			}
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}

// rawFrame is a frame published by a plain NATS client, to forge what a
// correct writer never sends.
type rawFrame struct {
	seq, kind string
	header    nats.Header // replaces seq and kind when set
}

func TestBadSequences(t *testing.T) {
	t.Parallel()
	ns, re, _ := pair(t)
	nc := enginetest.Connect(t, ns)
	tests := []struct {
		name   string
		frames []rawFrame
		good   int // data frames Next returns before the error
		want   error
	}{
		{"gap", []rawFrame{{seq: "1", kind: "data"}, {seq: "3", kind: "data"}}, 1, channel.ErrGap},
		{"gap before end", []rawFrame{{seq: "1", kind: "data"}, {seq: "2", kind: "data"}, {seq: "4", kind: "end"}}, 2, channel.ErrGap},
		{"first frame missing", []rawFrame{{seq: "2", kind: "data"}}, 0, channel.ErrGap},
		{"duplicate", []rawFrame{{seq: "1", kind: "data"}, {seq: "1", kind: "data"}}, 1, channel.ErrGap},
		{"reordered", []rawFrame{{seq: "1", kind: "data"}, {seq: "3", kind: "data"}, {seq: "2", kind: "data"}}, 1, channel.ErrGap},
		{"frame after the end", []rawFrame{{seq: "1", kind: "data"}, {seq: "2", kind: "end"}, {seq: "3", kind: "data"}}, 1, channel.ErrEnd},
		{"error frame without an error", []rawFrame{{seq: "1", kind: "error"}}, 0, channel.ErrWriterFailed},
		{"not a number", []rawFrame{{seq: "one", kind: "data"}}, 0, channel.ErrInvalidFrame},
		{"zero", []rawFrame{{seq: "0", kind: "data"}}, 0, channel.ErrInvalidFrame},
		{"leading zero", []rawFrame{{seq: "01", kind: "data"}}, 0, channel.ErrInvalidFrame},
		{"negative", []rawFrame{{seq: "-1", kind: "data"}}, 0, channel.ErrInvalidFrame},
		{"overflow", []rawFrame{{seq: "18446744073709551616", kind: "data"}}, 0, channel.ErrInvalidFrame},
		{"unknown kind", []rawFrame{{seq: "1", kind: "chunk"}}, 0, channel.ErrInvalidFrame},
		{"control kind on data subject", []rawFrame{{seq: "1", kind: "credit"}}, 0, channel.ErrInvalidFrame},
		{"no headers", []rawFrame{{header: nats.Header{}}}, 0, channel.ErrInvalidFrame},
		{"two seq values", []rawFrame{{header: nats.Header{channel.HeaderKind: {"data"}, channel.HeaderSeq: {"1", "2"}}}}, 0, channel.ErrInvalidFrame},
		{"lower-case names are fine", []rawFrame{
			{header: nats.Header{"iii-ch-kind": {"data"}, "iii-ch-seq": {"1"}}},
			{header: nats.Header{"iii-ch-kind": {"end"}, "iii-ch-seq": {"2"}}},
		}, 1, channel.ErrEnd},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			r := open(t, re, channel.WithIdleTimeout(5*time.Second))
			subj, _ := subjects.ChannelSubject(r.ID())
			ack, err := nc.SubscribeSync(subj + ".ack")
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range tt.frames {
				h := f.header
				if h == nil {
					h = nats.Header{channel.HeaderSeq: {f.seq}, channel.HeaderKind: {f.kind}}
				}
				if err := nc.PublishMsg(&nats.Msg{Subject: subj, Header: h, Data: []byte(`{"n":1}`)}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range tt.good {
				if _, err := r.Next(ctx); err != nil {
					t.Fatalf("frame %d: %v", i+1, err)
				}
			}
			_, err = r.Next(ctx)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Next = %v, want %v", err, tt.want)
			}
			if _, again := r.Next(ctx); again != err {
				t.Fatalf("error is not sticky: %v then %v", err, again)
			}
			if tt.want == channel.ErrEnd || tt.want == channel.ErrWriterFailed {
				return // the writer ended the stream: no cancel
			}
			// A reader that fails tells the writer to stop.
			for {
				m, err := ack.NextMsgWithContext(ctx)
				if err != nil {
					t.Fatalf("no cancel on the ack subject: %v", err)
				}
				if m.Header.Get(channel.HeaderKind) == "cancel" {
					break
				}
			}
		})
	}
}

func TestWriterError(t *testing.T) {
	forModes(t, func(t *testing.T, local bool) {
		_, re, we := pairMode(t, local, enginetest.WithMaxPayload(8<<10))
		tests := []struct {
			name    string
			err     error
			code    wire.Code
			message string
		}{
			{"coded", wire.Errorf(wire.CodeUnavailable, "rate limited"), wire.CodeUnavailable, "rate limited"},
			{"with details", wire.Errorf(wire.CodeBudgetExceeded, "over").WithDetails(map[string]any{"ceiling": 5}), wire.CodeBudgetExceeded, "over"},
			{"plain error", errors.New("boom"), wire.CodeInternal, "boom"},
			{"canceled", context.Canceled, wire.CodeCanceled, context.Canceled.Error()},
			{"nil", nil, wire.CodeInternal, "writer failed"},
			{"oversized message", wire.Errorf(wire.CodeInternal, "%s", strings.Repeat("x", 16<<10)), wire.CodeInternal, strings.Repeat("x", 1024) + "… (16384 bytes in all)"},
			{"message filling half the payload", wire.Errorf(wire.CodeInternal, "%s", strings.Repeat("y", 5<<10)), wire.CodeInternal, strings.Repeat("y", 1024) + "… (5120 bytes in all)"},
			{"message with line breaks", wire.Errorf(wire.CodeConflict, "line 1\r\nFake-Header: x\n"), wire.CodeConflict, "line 1\r\nFake-Header: x\n"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				r := open(t, re)
				w := writer(t, we, r.ID(), channel.WithCodec(wire.JSON))
				if err := w.Write(ctx, event{N: 1}); err != nil {
					t.Fatal(err)
				}
				if err := w.Fail(ctx, tt.err); err != nil {
					t.Fatal(err)
				}
				if err := w.Close(ctx); err != nil { // no-op after Fail
					t.Fatal(err)
				}
				if _, err := r.Next(ctx); err != nil {
					t.Fatal(err)
				}
				_, err := r.Next(ctx)
				var werr *wire.Error
				if !errors.Is(err, channel.ErrWriterFailed) || !errors.As(err, &werr) {
					t.Fatalf("Next = %v, want ErrWriterFailed with a wire error", err)
				}
				if werr.Code != tt.code || werr.Message != tt.message {
					t.Fatalf("wire error = %s %.40q, want %s %.40q", werr.Code, werr.Message, tt.code, tt.message)
				}
				if !errors.Is(err, &wire.Error{Code: tt.code}) {
					t.Fatalf("%v does not match the catalog sentinel of %s", err, tt.code)
				}
			})
		}
	})
}

func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	_, re, we := pair(t)
	ctx := testCtx(t)

	t.Run("silence", func(t *testing.T) {
		t.Parallel()
		r := open(t, re, channel.WithIdleTimeout(100*time.Millisecond))
		w := writer(t, we, r.ID())
		if err := w.Write(ctx, event{N: 1}); err != nil {
			t.Fatal(err)
		}
		// Frame 1 waits in the reader's buffer before Next looks: on a
		// loaded machine its trip over the bus may take longer than
		// the idle timeout, which would then fire before the silence.
		delivered(t, we.Conn(), re.Conn())
		if _, err := r.Next(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := r.Next(ctx); !errors.Is(err, channel.ErrIdleTimeout) {
			t.Fatalf("Next = %v, want ErrIdleTimeout", err)
		}
		if d := time.Since(start); d < 100*time.Millisecond || d > 3*time.Second {
			t.Fatalf("idle timeout after %v", d)
		}
		// The reader gave up, so the writer is told to stop.
		enginetest.Eventually(t, 10*time.Second, func() error {
			if err := w.Write(ctx, event{}); !errors.Is(err, channel.ErrReaderGone) {
				return fmt.Errorf("Write = %v", err)
			}
			return nil
		})
	})

	t.Run("progress resets it", func(t *testing.T) {
		t.Parallel()
		r := open(t, re, channel.WithIdleTimeout(time.Second))
		w := writer(t, we, r.ID())
		const n = 8 // 8 × 200 ms: longer than the idle timeout in total
		errc := make(chan error, 1)
		go func() {
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for i := range n {
				select {
				case <-tick.C:
				case <-w.Gone():
					errc <- fmt.Errorf("the reader left before write %d", i)
					return
				}
				if err := w.Write(ctx, event{N: i}); err != nil {
					errc <- fmt.Errorf("write %d: %w", i, err)
					return
				}
			}
			errc <- w.Close(ctx)
		}()
		for i := range n {
			if _, err := r.Next(ctx); err != nil {
				// The writer learns it from the reader's cancel and
				// stops: nothing of this test outlives it.
				t.Fatalf("frame %d: %v (writer: %v)", i, err, <-errc)
			}
		}
		if _, err := r.Next(ctx); err != channel.ErrEnd {
			t.Fatalf("Next = %v, want ErrEnd", err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("context ends first", func(t *testing.T) {
		t.Parallel()
		r := open(t, re)
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := r.Next(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next = %v, want the context's error", err)
		}
		// A context error is not final.
		w := writer(t, we, r.ID())
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Next(ctx); err != channel.ErrEnd {
			t.Fatalf("Next = %v, want ErrEnd", err)
		}
	})
}

func TestBackpressure(t *testing.T) {
	forModes(t, func(t *testing.T, local bool) {
		_, re, we := pairMode(t, local)
		ctx := testCtx(t)
		const window, n = 8, 200
		r := open(t, re, channel.WithWindow(window))
		w := writer(t, we, r.ID())

		// The writer may fill the window before the reader reads anything, and
		// then it blocks.
		for i := range window {
			if err := w.Write(ctx, event{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := w.Write(short, event{N: window}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Write beyond the window = %v, want to block until the deadline", err)
		}

		var written atomic.Int64
		written.Store(window)
		errc := make(chan error, 1)
		go func() {
			for i := window; i < n; i++ {
				if err := w.Write(ctx, event{N: i}); err != nil {
					errc <- err
					return
				}
				written.Add(1)
			}
			errc <- w.Close(ctx)
		}()
		for k := 1; k <= n; k++ {
			f, err := r.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ev event
			if err := f.Decode(&ev); err != nil || ev.N != k-1 {
				t.Fatalf("frame %d = %+v, %v (the blocked write must not have sent anything)", k, ev, err)
			}
			if got := written.Load(); got > int64(k+window) {
				t.Fatalf("writer is %d frames ahead after %d consumed, window %d", got-int64(k), k, window)
			}
			if k == window/4 {
				// The writer's ping was answered with the window, so frame 1
				// needs no grant (unless frame 1 was read before the ping was
				// answered); the grant after a quarter of the window lets the
				// writer refill it. The check above keeps it from going
				// further.
				enginetest.Eventually(t, 5*time.Second, func() error {
					if got := written.Load(); got < int64(k+window-1) {
						return fmt.Errorf("written %d, want at least %d", got, k+window-1)
					}
					return nil
				})
			}
		}
		if _, err := r.Next(ctx); err != channel.ErrEnd {
			t.Fatalf("Next = %v, want ErrEnd", err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}

// TestByteWindow: a writer of large frames is held to the reader's byte
// window as well as its frame window, so a reader buffers at most the byte
// window plus one frame, not window × max payload; a frame larger than the
// byte window still goes once the ones before it were read.
func TestByteWindow(t *testing.T) {
	tests := []struct {
		name             string
		byteWindow, size int
		ahead            int // frames written before the reader reads any
	}{
		{"1 KiB frames, 4 KiB window", 4 << 10, 1 << 10, 4},
		{"frames larger than the window", 1000, 3000, 1},
		{"frames of the window's size", 2 << 10, 2 << 10, 1},
		{"the frame window binds first", 1 << 20, 100, 16},
	}
	forModes(t, func(t *testing.T, local bool) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				_, re, we := pairMode(t, local)
				ctx := testCtx(t)
				const n = 40
				r := open(t, re, channel.WithWindow(16), channel.WithByteWindow(tt.byteWindow))
				w := writer(t, we, r.ID())
				frame := make([]byte, tt.size)

				// Before the reader reads anything, the writer fills the
				// byte window (the frame that crosses it included), then
				// blocks.
				var written atomic.Int64
				for range tt.ahead {
					if err := w.Write(ctx, frame); err != nil {
						t.Fatal(err)
					}
					written.Add(1)
				}
				short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				if err := w.Write(short, frame); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Write %d = %v, want it blocked by the byte window", tt.ahead+1, err)
				}

				errc := make(chan error, 1)
				go func() {
					for i := tt.ahead; i < n; i++ {
						if err := w.Write(ctx, frame); err != nil {
							errc <- err
							return
						}
						written.Add(1)
					}
					errc <- w.Close(ctx)
				}()
				for k := 1; k <= n; k++ {
					f, err := r.Next(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if len(f.Data) != tt.size {
						t.Fatalf("frame %d has %d bytes", k, len(f.Data))
					}
					// The byte window, and the frame that crossed it.
					ahead := (written.Load() - int64(k)) * int64(tt.size)
					if ahead >= int64(tt.byteWindow+tt.size) {
						t.Fatalf("the writer is %d bytes ahead after %d frames read, byte window %d", ahead, k, tt.byteWindow)
					}
				}
				if _, err := r.Next(ctx); err != channel.ErrEnd {
					t.Fatalf("Next = %v, want ErrEnd", err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// TestByteCreditCompat: byte credit is an optional header. A reader that
// sends none (an older one, or another client) puts no byte limit on a
// writer, and a writer that ignores it still streams to a reader that
// sends it, within the bytes the reader holds (TestFloodBoundedInBytes).
func TestByteCreditCompat(t *testing.T) {
	t.Parallel()
	ns, re, we := pair(t)
	ctx := testCtx(t)

	t.Run("reader without byte credit", func(t *testing.T) {
		t.Parallel()
		nc := enginetest.Connect(t, ns)
		const id, window = "old-reader", 8
		frames, err := nc.SubscribeSync("iii.ch." + id)
		if err != nil {
			t.Fatal(err)
		}
		// Answers pings with frame credit only, as readers did before
		// byte credit.
		if _, err := nc.Subscribe("iii.ch."+id+".ping", func(m *nats.Msg) {
			_ = m.RespondMsg(&nats.Msg{Header: nats.Header{channel.HeaderKind: {"credit"}, channel.HeaderCredit: {strconv.Itoa(window)}}})
		}); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		w := writer(t, we, id)
		big := make([]byte, 64<<10) // the window is 512 KiB: no byte limit binds
		for i := range window {
			if err := w.Write(ctx, big); err != nil {
				t.Fatalf("frame %d: %v", i+1, err)
			}
		}
		for i := range window {
			if _, err := frames.NextMsgWithContext(ctx); err != nil {
				t.Fatalf("frame %d: %v", i+1, err)
			}
		}
	})

	t.Run("writer without byte credit", func(t *testing.T) {
		t.Parallel()
		r := open(t, re, channel.WithWindow(16), channel.WithByteWindow(1<<10))
		nc := enginetest.Connect(t, ns)
		subj, _ := subjects.ChannelSubject(r.ID())
		// Ten 2 KiB frames within the frame window: twenty times the byte
		// window, all at once.
		const n = 10
		for seq := 1; seq <= n+1; seq++ {
			kind, data := "data", make([]byte, 2<<10)
			if seq > n {
				kind, data = "end", nil
			}
			h := nats.Header{channel.HeaderSeq: {strconv.Itoa(seq)}, channel.HeaderKind: {kind}}
			if err := nc.PublishMsg(&nats.Msg{Subject: subj, Header: h, Data: data}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			if _, err := r.Next(ctx); err != nil {
				t.Fatalf("frame %d: %v", i+1, err)
			}
		}
		if _, err := r.Next(ctx); err != channel.ErrEnd {
			t.Fatalf("Next = %v, want ErrEnd", err)
		}
	})
}

func TestReaderCloseStopsWriter(t *testing.T) {
	forModes(t, func(t *testing.T, local bool) {
		_, re, we := pairMode(t, local)
		ctx := testCtx(t)
		r := open(t, re, channel.WithWindow(1))
		w := writer(t, we, r.ID()) // default idle timeout: 60 s
		if err := w.Write(ctx, event{N: 0}); err != nil {
			t.Fatal(err)
		}
		blocked := make(chan error, 1)
		go func() { blocked <- w.Write(ctx, event{N: 1}) }() // no credit: blocks

		nextErr := make(chan error, 1)
		go func() {
			_, err := r.Next(ctx) // frame 0
			if err == nil {
				_, err = r.Next(ctx) // frame 1 or Close
			}
			nextErr <- err
		}()
		start := time.Now()
		// Close once the blocked write has been released by the grant or not:
		// either way the writer must learn promptly that the reader is gone.
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil { // idempotent
			t.Fatal(err)
		}
		select {
		case err := <-blocked:
			if err != nil && !errors.Is(err, channel.ErrReaderGone) {
				t.Fatalf("blocked Write = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("blocked Write did not return after the reader closed")
		}
		enginetest.Eventually(t, 3*time.Second, func() error {
			if err := w.Write(ctx, event{}); !errors.Is(err, channel.ErrReaderGone) {
				return fmt.Errorf("Write = %v", err)
			}
			return nil
		})
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("writer learned after %v", d)
		}
		if err := <-nextErr; err != nil && !errors.Is(err, channel.ErrClosed) {
			t.Fatalf("Next racing Close = %v", err)
		}
		if _, err := r.Next(ctx); !errors.Is(err, channel.ErrClosed) {
			t.Fatalf("Next after Close = %v, want ErrClosed", err)
		}
		if err := w.Close(ctx); !errors.Is(err, channel.ErrReaderGone) {
			t.Fatalf("Close after the reader left = %v, want ErrReaderGone", err)
		}
	})
}

func TestReaderCloseWhileWriterBlocked(t *testing.T) {
	forModes(t, func(t *testing.T, local bool) {
		_, re, we := pairMode(t, local)
		ctx := testCtx(t)
		// A window of one: the reader grants frame 1 only, so frame 2 waits for
		// a grant that only Next would send (with a wider window a credit
		// request could be answered before the reader closes).
		r := open(t, re, channel.WithWindow(1))
		w := writer(t, we, r.ID())
		if err := w.Write(ctx, event{N: 0}); err != nil {
			t.Fatal(err)
		}
		blocked := make(chan error, 1)
		go func() { blocked <- w.Write(ctx, event{N: 1}) }()
		start := time.Now()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-blocked:
			if !errors.Is(err, channel.ErrReaderGone) {
				t.Fatalf("blocked Write = %v, want ErrReaderGone", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("ErrReaderGone after %v", d)
			}
		case <-ctx.Done():
			t.Fatal("blocked Write did not return")
		}
	})
}

func TestCloseUnblocksNext(t *testing.T) {
	t.Parallel()
	_, re, _ := pair(t)
	ctx := testCtx(t)
	r := open(t, re)
	got := make(chan error, 1)
	go func() {
		_, err := r.Next(ctx)
		got <- err
	}()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Next = %v, want ErrClosed", err)
	}
}

func TestReaderGone(t *testing.T) {
	t.Parallel()
	ns, re, we := pair(t)
	ctx := testCtx(t)

	t.Run("nobody reads the channel", func(t *testing.T) {
		t.Parallel()
		// Default idle timeout (60 s): the server's no-responders answer to
		// the writer's credit request tells it at once.
		w := writer(t, we, "nobody-reads-this")
		enginetest.Eventually(t, 3*time.Second, func() error {
			if err := w.Write(ctx, event{}); !errors.Is(err, channel.ErrReaderGone) {
				return fmt.Errorf("Write = %v", err)
			}
			return nil
		})
	})

	t.Run("reader never reads", func(t *testing.T) {
		t.Parallel()
		r := open(t, re, channel.WithWindow(2))
		w := writer(t, we, r.ID(), channel.WithIdleTimeout(200*time.Millisecond))
		for i := range 2 {
			if err := w.Write(ctx, event{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		if err := w.Write(ctx, event{}); !errors.Is(err, channel.ErrReaderGone) {
			t.Fatalf("Write = %v, want ErrReaderGone", err)
		}
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Fatalf("gave up after %v, before the idle timeout", d)
		}
		if err := w.Write(ctx, event{}); !errors.Is(err, channel.ErrReaderGone) {
			t.Fatalf("Write = %v, want a sticky ErrReaderGone", err)
		}
	})

	t.Run("tiny idle timeout", func(t *testing.T) {
		t.Parallel()
		r := open(t, re, channel.WithWindow(2))
		w := writer(t, we, r.ID(), channel.WithIdleTimeout(time.Nanosecond))
		var err error
		for i := 0; i < 10 && err == nil; i++ {
			err = w.Write(ctx, event{N: i})
		}
		// The writer's own idle timeout may end the stream first.
		if !errors.Is(err, channel.ErrReaderGone) && !errors.Is(err, channel.ErrIdleTimeout) {
			t.Fatalf("Write = %v, want ErrReaderGone or ErrIdleTimeout", err)
		}
	})

	t.Run("reader process dies", func(t *testing.T) {
		t.Parallel()
		// The reader's connection goes away without a cancel.
		dying, err := engine.New(enginetest.Connect(t, ns))
		if err != nil {
			t.Fatal(err)
		}
		r, err := channel.Open(ctx, dying, channel.WithWindow(2))
		if err != nil {
			t.Fatal(err)
		}
		w := writer(t, we, r.ID()) // default idle timeout: 60 s
		for i := range 2 {
			if err := w.Write(ctx, event{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		dying.Conn().Close()
		start := time.Now()
		if err := w.Write(ctx, event{}); !errors.Is(err, channel.ErrReaderGone) {
			t.Fatalf("Write = %v, want ErrReaderGone", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("writer learned after %v", d)
		}
	})
}

func TestInvalidIDs(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	for _, id := range []string{"", "a.b", "a*", ">", "a b", "ü", "a/b", strings.Repeat("x", subjects.MaxIDLen+1)} {
		t.Run(fmt.Sprintf("%.12q", id), func(t *testing.T) {
			w, err := channel.NewWriter(e, id)
			if w != nil || !errors.Is(err, subjects.ErrInvalidID) || !errors.Is(err, wire.ErrInvalidPayload) {
				t.Fatalf("NewWriter(%q) = %v, %v; want invalid_payload / ErrInvalidID", id, w, err)
			}
		})
	}
	r := open(t, e)
	if err := subjects.ValidateID("channel", r.ID()); err != nil {
		t.Fatalf("Open made an invalid id: %v", err)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	tests := []struct {
		name string
		opt  channel.Option
	}{
		{"window 0", channel.WithWindow(0)},
		{"window too big", channel.WithWindow(channel.MaxWindow + 1)},
		{"byte window 0", channel.WithByteWindow(0)},
		{"byte window too big", channel.WithByteWindow(channel.MaxByteWindow + 1)},
		{"idle 0", channel.WithIdleTimeout(0)},
		{"idle negative", channel.WithIdleTimeout(-time.Second)},
		{"nil codec", channel.WithCodec(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := channel.Open(context.Background(), e, tt.opt); !errors.Is(err, engine.ErrInvalidOption) {
				t.Fatalf("Open = %v, want ErrInvalidOption", err)
			}
			if _, err := channel.NewWriter(e, "ok", tt.opt); !errors.Is(err, engine.ErrInvalidOption) {
				t.Fatalf("NewWriter = %v, want ErrInvalidOption", err)
			}
		})
	}
	if _, err := channel.Open(context.Background(), nil); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("Open(nil engine) = %v", err)
	}
	if _, err := channel.NewWriter(nil, "ok"); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("NewWriter(nil engine) = %v", err)
	}
}

func TestWriteErrors(t *testing.T) {
	forModes(t, func(t *testing.T, local bool) {
		_, re, we := pairMode(t, local, enginetest.WithMaxPayload(4<<10))
		ctx := testCtx(t)
		r := open(t, re)
		w := writer(t, we, r.ID())

		for name, data := range map[string]any{
			"oversized":     event{Text: strings.Repeat("x", 8<<10)},
			"oversized raw": []byte(strings.Repeat("x", 8<<10)),
			"unencodable":   make(chan int),
		} {
			if err := w.Write(ctx, data); !errors.Is(err, wire.ErrInvalidPayload) {
				t.Fatalf("%s: Write = %v, want invalid_payload", name, err)
			}
		}
		// Nothing was sent and no sequence number was used.
		if err := w.Write(ctx, event{N: 7}); err != nil {
			t.Fatal(err)
		}
		f, err := r.Next(ctx)
		if err != nil || f.Seq != 1 {
			t.Fatalf("Next = %+v, %v; want frame 1", f, err)
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		if err := w.Write(done, event{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Write with a done ctx = %v, want context.Canceled", err)
		}
		// A provider whose ctx has ended still ends the stream.
		if err := w.Close(done); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatalf("second Close = %v", err)
		}
		if err := w.Write(ctx, event{}); !errors.Is(err, channel.ErrClosed) {
			t.Fatalf("Write after Close = %v, want ErrClosed", err)
		}
		if _, err := r.Next(ctx); err != channel.ErrEnd {
			t.Fatalf("Next = %v, want ErrEnd", err)
		}
	})
}

func TestRawAndJSON(t *testing.T) {
	forModes(t, func(t *testing.T, local bool) {
		_, re, we := pairMode(t, local)
		ctx := testCtx(t)
		r := open(t, re)
		w := writer(t, we, r.ID(), channel.WithCodec(wire.JSON))
		errc := make(chan error, 1)
		go func() { // frame 2 waits for the credit that reading frame 1 sends
			for _, data := range []any{[]byte(`{"n":1,"text":"raw"}`), engine.Raw(`{"n":2}`), event{N: 3}} {
				if err := w.Write(ctx, data); err != nil {
					errc <- err
					return
				}
			}
			errc <- w.Close(ctx)
		}()
		for i, want := range []string{`{"n":1,"text":"raw"}`, `{"n":2}`, `{"n":3,"text":""}`} {
			f, err := r.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(f.Data) != want || f.Codec != wire.JSON {
				t.Fatalf("frame %d = %s (%s), want %s as JSON", i+1, f.Data, f.Codec.ContentType(), want)
			}
			var ev event
			if err := f.Decode(&ev); err != nil || ev.N != i+1 {
				t.Fatalf("Decode = %+v, %v", ev, err)
			}
			var wrong []int
			if err := f.Decode(&wrong); !errors.Is(err, wire.ErrInvalidPayload) {
				t.Fatalf("Decode into the wrong type = %v, want invalid_payload", err)
			}
		}
		if _, err := r.Next(ctx); err != channel.ErrEnd {
			t.Fatalf("Next = %v, want ErrEnd", err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}

// The provider side as it is used: a function on another connection gets
// the channel id in its payload and streams into it; the caller's trace
// reaches the reader through the function call and the channel.
func TestStreamingFunction(t *testing.T) {
	t.Parallel()
	for _, m := range []struct {
		name         string
		local, first bool // local calls on both engines; WithLocalFirst and BeforeBus
	}{
		{"bus", false, false},
		{"bus local-first", false, true},
		{"local", true, false},
		{"local local-first", true, true},
	} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			_, caller, provider := pairMode(t, m.local)
			ctx := testCtx(t)

			type streamReq struct {
				Channel string `json:"channel"`
				N       int    `json:"n"`
				FailAt  int    `json:"fail_at"`
			}
			wk, err := provider.Worker("provider")
			if err != nil {
				t.Fatal(err)
			}
			var stopped atomic.Bool
			err = wk.Register(engine.Function{
				ID: "test::stream",
				Handler: engine.Typed(func(ctx context.Context, req streamReq) (struct{}, error) {
					w, err := channel.NewWriter(provider, req.Channel)
					if err != nil {
						return struct{}{}, err
					}
					defer w.Close(ctx)
					for i := range req.N {
						if req.FailAt > 0 && i == req.FailAt {
							return struct{}{}, w.Fail(ctx, wire.Errorf(wire.CodeUnavailable, "provider overloaded"))
						}
						if err := w.Write(ctx, event{N: i}); err != nil {
							if errors.Is(err, channel.ErrReaderGone) {
								stopped.Store(true)
							}
							return struct{}{}, err
						}
					}
					return struct{}{}, nil
				}),
			})
			if err != nil {
				t.Fatal(err)
			}

			// With WithLocalFirst the reader subscribes only if the call goes
			// over the bus.
			openR := func(t *testing.T, opts ...channel.Option) *channel.Reader {
				if m.first {
					opts = append(opts, channel.WithLocalFirst())
				}
				return open(t, caller, opts...)
			}
			callCtx := func(ctx context.Context, r *channel.Reader) context.Context {
				if m.first {
					return engine.BeforeBus(ctx, r.Subscribe)
				}
				return ctx
			}
			trigger := func(r *channel.Reader, req streamReq) chan error {
				errc := make(chan error, 1)
				go func() { errc <- caller.Trigger(callCtx(ctx, r), "test::stream", req, nil) }()
				return errc
			}

			t.Run("stream and trace", func(t *testing.T) {
				traceID := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
				sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled})
				tctx := engine.WithSession(trace.ContextWithSpanContext(ctx, sc), "s-1", "m-1")

				r := openR(t)
				if got := r.TraceContext(context.Background()); trace.SpanContextFromContext(got).IsValid() {
					t.Fatal("trace context before the first frame")
				}
				errc := make(chan error, 1)
				go func() {
					errc <- caller.Trigger(callCtx(tctx, r), "test::stream", streamReq{Channel: r.ID(), N: 100}, nil)
				}()
				for i := range 100 {
					f, err := r.Next(ctx)
					if err != nil {
						t.Fatal(err)
					}
					var ev event
					if err := f.Decode(&ev); err != nil || ev.N != i {
						t.Fatalf("frame %d = %+v, %v", i, ev, err)
					}
				}
				if _, err := r.Next(ctx); err != channel.ErrEnd {
					t.Fatalf("Next = %v, want ErrEnd", err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				got := r.TraceContext(context.Background())
				if gsc := trace.SpanContextFromContext(got); gsc.TraceID() != traceID || !gsc.IsRemote() {
					t.Fatalf("reader's trace context %v, want trace %v", gsc, traceID)
				}
				if sid := baggage.FromContext(got).Member(engine.AttrSessionID).Value(); sid != "s-1" {
					t.Fatalf("baggage session id %q", sid)
				}
			})

			t.Run("provider error", func(t *testing.T) {
				r := openR(t)
				errc := trigger(r, streamReq{Channel: r.ID(), N: 10, FailAt: 3})
				for range 3 {
					if _, err := r.Next(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := r.Next(ctx); !errors.Is(err, channel.ErrWriterFailed) || !errors.Is(err, wire.ErrUnavailable) {
					t.Fatalf("Next = %v, want the provider's unavailable error", err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			})

			t.Run("orchestrator aborts", func(t *testing.T) {
				r := openR(t, channel.WithWindow(4))
				errc := trigger(r, streamReq{Channel: r.ID(), N: 1_000_000})
				if _, err := r.Next(ctx); err != nil {
					t.Fatal(err)
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-errc:
					// The provider's ErrReaderGone is not a wire error: internal.
					if !errors.Is(err, wire.ErrInternal) || !stopped.Load() {
						t.Fatalf("provider returned %v (stopped %v)", err, stopped.Load())
					}
				case <-ctx.Done():
					t.Fatal("provider kept streaming after the reader closed")
				}
			})

			t.Run("invalid channel id", func(t *testing.T) {
				err := caller.Trigger(ctx, "test::stream", streamReq{Channel: "no.dots", N: 1}, nil)
				if !errors.Is(err, wire.ErrInvalidPayload) {
					t.Fatalf("Trigger = %v, want invalid_payload", err)
				}
			})
		})
	}
}

func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	_, re, we := pair(t)
	ctx := testCtx(t)
	r := open(t, re)
	w := writer(t, we, r.ID())
	// Calls on one Writer from many goroutines are serialized: the reader
	// sees every frame, in sequence order.
	const goroutines, each = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := w.Write(ctx, event{N: g*each + i}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	seen := map[int]bool{}
	for i := range goroutines * each {
		f, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ev event
		if err := f.Decode(&ev); err != nil || seen[ev.N] || f.Seq != uint64(i+1) {
			t.Fatalf("frame %d = %+v, %v (seen before: %v)", f.Seq, ev, err, seen[ev.N])
		}
		seen[ev.N] = true
	}
	wg.Wait()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(ctx); err != channel.ErrEnd {
		t.Fatalf("Next = %v, want ErrEnd", err)
	}
}

// A writer whose connection dies (its process or its NATS server) is
// noticed by the probe long before the idle timeout: attached writers
// (after their ping or a frame) are checked while the reader waits.
func TestWriterGone(t *testing.T) {
	t.Parallel()
	ns, re, _ := pair(t)
	nc := enginetest.Connect(t, ns)
	we, err := engine.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := open(t, re, channel.WithIdleTimeout(time.Minute))
	w, err := channel.NewWriter(we, r.ID())
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := w.Write(ctx, event{N: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(ctx); err != nil {
		t.Fatal(err)
	}
	nc.Close() // the writer's process dies: no end frame, no cancel
	start := time.Now()
	_, err = r.Next(ctx)
	if !errors.Is(err, channel.ErrWriterGone) {
		t.Fatalf("Next after the writer died = %v, want ErrWriterGone", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("noticed after %v", d)
	}
	// A writer that ends properly is read to its end, probes or not.
	r2 := open(t, re, channel.WithIdleTimeout(2*time.Second))
	w2 := writer(t, enginetest.NewEngine(t, ns), r2.ID())
	if err := w2.Write(ctx, event{N: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // the writer is gone; what it sent is still read
	if _, err := r2.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Next(ctx); !errors.Is(err, channel.ErrEnd) {
		t.Fatalf("end = %v", err)
	}
}

// A writer that never attaches (the call that would start it was lost)
// fails the reader after the attach timeout, not the idle timeout.
func TestAttachTimeout(t *testing.T) {
	t.Parallel()
	_, re, _ := pair(t)
	r := open(t, re, channel.WithIdleTimeout(time.Minute), channel.WithAttachTimeout(500*time.Millisecond))
	start := time.Now()
	if _, err := r.Next(testCtx(t)); !errors.Is(err, channel.ErrWriterGone) {
		t.Fatalf("Next = %v, want ErrWriterGone", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
	if _, err := channel.Open(context.Background(), re, channel.WithAttachTimeout(0)); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("attach timeout 0: %v", err)
	}
}
