package channel_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// settled waits until the goroutines (unless goroutines < 0: parallel
// tests run beside) and the server's subscriptions are back to what they
// were before a scenario: nothing it started outlives it.
func settled(t *testing.T, ns *server.Server, goroutines int, subs uint32) {
	t.Helper()
	enginetest.Eventually(t, 5*time.Second, func() error {
		if n := runtime.NumGoroutine(); goroutines >= 0 && n > goroutines {
			return fmt.Errorf("%d goroutines, want at most %d", n, goroutines)
		}
		if n := ns.NumSubscriptions(); n > subs {
			return fmt.Errorf("%d subscriptions on the server, want at most %d", n, subs)
		}
		return nil
	})
}

// TestProcessDeath: one side's connection closes abruptly (kill -9: no
// end frame, no cancel). The other side ends within a bounded time with its
// coded error, and nothing either side started is left behind. Not
// parallel: it counts goroutines.
func TestProcessDeath(t *testing.T) {
	tests := []struct {
		name string
		// run kills one side with kill() and checks the other side's
		// error and how long it took.
		run func(t *testing.T, ctx context.Context, r *channel.Reader, w *channel.Writer, kill func())
	}{
		{"writer dies mid-stream", func(t *testing.T, ctx context.Context, r *channel.Reader, w *channel.Writer, kill func()) {
			for i := range 2 { // the window
				if err := w.Write(ctx, event{N: i}); err != nil {
					t.Fatal(err)
				}
			}
			kill()
			start := time.Now()
			for i := range 2 { // what was sent is still read
				if _, err := r.Next(ctx); err != nil {
					t.Fatalf("frame %d: %v", i+1, err)
				}
			}
			if _, err := r.Next(ctx); !errors.Is(err, channel.ErrWriterGone) {
				t.Fatalf("Next = %v, want ErrWriterGone", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("ErrWriterGone after %v", d)
			}
		}},
		{"writer dies before its first frame", func(t *testing.T, ctx context.Context, r *channel.Reader, w *channel.Writer, kill func()) {
			kill() // after NewWriter's ping: the writer attached
			start := time.Now()
			if _, err := r.Next(ctx); !errors.Is(err, channel.ErrWriterGone) {
				t.Fatalf("Next = %v, want ErrWriterGone", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("ErrWriterGone after %v", d)
			}
		}},
		{"reader dies while the writer waits for credit", func(t *testing.T, ctx context.Context, r *channel.Reader, w *channel.Writer, kill func()) {
			for i := range 2 { // the window
				if err := w.Write(ctx, event{N: i}); err != nil {
					t.Fatal(err)
				}
			}
			errc := make(chan error, 1)
			go func() { errc <- w.Write(ctx, event{N: 2}) }()
			kill()
			start := time.Now()
			if err := <-errc; !errors.Is(err, channel.ErrReaderGone) {
				t.Fatalf("Write = %v, want ErrReaderGone", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("ErrReaderGone after %v", d)
			}
			if err := w.Close(ctx); !errors.Is(err, channel.ErrReaderGone) {
				t.Fatalf("Close = %v, want ErrReaderGone", err)
			}
		}},
		{"reader dies while the writer sleeps", func(t *testing.T, ctx context.Context, r *channel.Reader, w *channel.Writer, kill func()) {
			kill()
			start := time.Now()
			if err := w.Sleep(ctx, time.Minute); !errors.Is(err, channel.ErrReaderGone) {
				t.Fatalf("Sleep = %v, want ErrReaderGone", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("ErrReaderGone after %v", d)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := enginetest.RunServer(t)
			ctx := testCtx(t)
			// Both sides on connections of their own; the test kills one.
			rc, wc := enginetest.Connect(t, ns), enginetest.Connect(t, ns)
			re, err := engine.New(rc)
			if err != nil {
				t.Fatal(err)
			}
			we, err := engine.New(wc)
			if err != nil {
				t.Fatal(err)
			}
			goroutines, subs := runtime.NumGoroutine(), ns.NumSubscriptions()
			r, err := channel.Open(ctx, re, channel.WithWindow(2)) // default idle timeout: 60 s
			if err != nil {
				t.Fatal(err)
			}
			w, err := channel.NewWriter(we, r.ID())
			if err != nil {
				t.Fatal(err)
			}
			kill := wc.Close
			if tt.name[:6] == "reader" {
				kill = rc.Close
			}
			// Let the writer's ping be answered: it attached.
			enginetest.Eventually(t, 5*time.Second, func() error {
				if ns.NumSubscriptions() < subs+4 {
					return fmt.Errorf("%d subscriptions", ns.NumSubscriptions())
				}
				return nil
			})
			if err := w.Sleep(ctx, 50*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			tt.run(t, ctx, r, w, kill)
			_ = r.Close()
			_ = w.Close(ctx)
			rc.Close()
			wc.Close()
			settled(t, ns, goroutines, subs)
		})
	}
}

// TestCloseReleasesBlockedWrite: Close or Fail from another goroutine
// while a Write waits for credit (the reader is alive but does not read)
// ends the stream at once: the blocked Write returns ErrClosed having sent
// nothing, the reader reads what was sent and then the terminal frame,
// and the writer's subscription is gone, even when Close's ctx has ended.
func TestCloseReleasesBlockedWrite(t *testing.T) {
	forModes(t, func(t *testing.T, local bool) {
		ns, re, we := pairMode(t, local)
		tests := []struct {
			name string
			end  func(ctx context.Context, w *channel.Writer) error
			want error // the reader's error after frame 1
		}{
			{"close", func(ctx context.Context, w *channel.Writer) error { return w.Close(ctx) }, channel.ErrEnd},
			{"fail", func(ctx context.Context, w *channel.Writer) error {
				return w.Fail(ctx, wire.Errorf(wire.CodeUnavailable, "upstream gone"))
			}, wire.ErrUnavailable},
			{"close with an ended ctx", func(ctx context.Context, w *channel.Writer) error {
				done, cancel := context.WithCancel(ctx)
				cancel()
				return w.Close(done)
			}, channel.ErrEnd},
			{"fail with an ended ctx", func(ctx context.Context, w *channel.Writer) error {
				done, cancel := context.WithCancel(ctx)
				cancel()
				return w.Fail(done, wire.Errorf(wire.CodeUnavailable, "upstream gone"))
			}, wire.ErrUnavailable},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				subs := ns.NumSubscriptions()
				r := open(t, re, channel.WithWindow(1))
				w := writer(t, we, r.ID()) // default idle timeout: 60 s
				if err := w.Write(ctx, event{N: 1}); err != nil {
					t.Fatal(err)
				}
				blocked := make(chan error, 1)
				go func() { blocked <- w.Write(ctx, event{N: 2}) }() // no credit
				select {
				case err := <-blocked:
					t.Fatalf("Write beyond the window returned %v, want it blocked", err)
				case <-time.After(100 * time.Millisecond):
				}
				start := time.Now()
				if err := tt.end(ctx, w); err != nil {
					t.Fatalf("ending the stream = %v", err)
				}
				if d := time.Since(start); d > 3*time.Second {
					t.Fatalf("ending the stream took %v", d)
				}
				if err := <-blocked; !errors.Is(err, channel.ErrClosed) {
					t.Fatalf("blocked Write = %v, want ErrClosed", err)
				}
				if err := w.Close(ctx); err != nil {
					t.Fatalf("second Close = %v", err)
				}
				if f, err := r.Next(ctx); err != nil || f.Seq != 1 {
					t.Fatalf("Next = %+v, %v; want frame 1", f, err)
				}
				if _, err := r.Next(ctx); !errors.Is(err, tt.want) {
					t.Fatalf("Next = %v, want %v", err, tt.want)
				}
				settled(t, ns, -1, subs)
			})
		}
	})
}

// TestSubscribeAfterContextError: a Subscribe whose ctx ended (the call
// that would start the writer was cancelled) can be retried; the reader is
// not left unable to subscribe.
func TestSubscribeAfterContextError(t *testing.T) {
	t.Parallel()
	_, re, we := pair(t)
	ctx := testCtx(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	// The flush in Subscribe races the server's answer against the ended
	// ctx: when its goroutine is descheduled long enough for the answer
	// to arrive (a loaded machine), either may win, and a Subscribe the
	// server confirmed succeeds. Such a reader is subscribed and of no
	// use here: take another until one fails.
	var r *channel.Reader
	for attempt := 1; r == nil; attempt++ {
		r = open(t, re, channel.WithLocalFirst())
		switch err := r.Subscribe(done); {
		case err == nil && attempt < 20:
			r = nil
		case !errors.Is(err, context.Canceled) && !errors.Is(err, wire.ErrCanceled):
			t.Fatalf("Subscribe(cancelled) = %v, want canceled", err)
		}
	}
	if err := r.Subscribe(ctx); err != nil {
		t.Fatalf("Subscribe after a cancelled Subscribe = %v", err)
	}
	w := writer(t, we, r.ID())
	go func() {
		for i := range 3 {
			_ = w.Write(ctx, event{N: i})
		}
		_ = w.Close(ctx)
	}()
	for i := range 3 {
		f, err := r.Next(ctx)
		var ev event
		if err != nil || f.Decode(&ev) != nil || ev.N != i {
			t.Fatalf("frame %d = %+v, %v", i+1, ev, err)
		}
	}
	if _, err := r.Next(ctx); err != channel.ErrEnd {
		t.Fatalf("Next = %v, want ErrEnd", err)
	}
}

// TestAttachTimeoutIsPrompt: the attach timeout bounds the wait for a
// writer by itself, not rounded up to the next liveness probe (every 2 s
// with a long idle timeout).
func TestAttachTimeoutIsPrompt(t *testing.T) {
	t.Parallel()
	_, re, _ := pair(t)
	for _, c := range []struct {
		name string
		opts []channel.Option
	}{
		{"subscribed", nil},
		{"local-first", []channel.Option{channel.WithLocalFirst()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const attach = 300 * time.Millisecond
			start := time.Now() // the attach timeout runs from Open
			r := open(t, re, append([]channel.Option{channel.WithIdleTimeout(time.Minute), channel.WithAttachTimeout(attach)}, c.opts...)...)
			if _, err := r.Next(testCtx(t)); !errors.Is(err, channel.ErrWriterGone) {
				t.Fatalf("Next = %v, want ErrWriterGone", err)
			}
			if d := time.Since(start); d < attach || d > attach+time.Second {
				t.Fatalf("ErrWriterGone after %v, want about %v", d, attach)
			}
		})
	}
}

// TestCloseRacesWrites: Close while several goroutines write. Every Write
// either sent its frame or returned ErrClosed having sent nothing; the
// reader reads every sent frame once, in order, then the end.
func TestCloseRacesWrites(t *testing.T) {
	forModes(t, func(t *testing.T, local bool) {
		_, re, we := pairMode(t, local)
		ctx := testCtx(t)
		r := open(t, re, channel.WithWindow(4))
		w := writer(t, we, r.ID())
		const goroutines = 4
		var (
			sent atomic.Int64
			wg   sync.WaitGroup
		)
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					err := w.Write(ctx, event{N: g*1000 + i})
					if errors.Is(err, channel.ErrClosed) {
						return
					}
					if err != nil {
						t.Errorf("Write = %v, want nil or ErrClosed", err)
						return
					}
					sent.Add(1)
				}
			}()
		}
		var read int64
		for read < 20 { // let them run into the window a few times
			if _, err := r.Next(ctx); err != nil {
				t.Fatal(err)
			}
			read++
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for {
			f, err := r.Next(ctx)
			if err == channel.ErrEnd {
				break
			}
			if err != nil {
				t.Fatalf("after %d frames: %v", read, err)
			}
			read++
			if f.Seq != uint64(read) {
				t.Fatalf("frame %d has sequence %d", read, f.Seq)
			}
		}
		if read != sent.Load() {
			t.Fatalf("read %d frames, %d Writes succeeded", read, sent.Load())
		}
	})
}

// TestDroppedFramesAreAGap: a writer that ignores credit overflows the
// reader's buffer (the client drops what does not fit) and then goes
// away. The reader reports the lost frames as a gap, not as a writer that
// merely left.
func TestDroppedFramesAreAGap(t *testing.T) {
	t.Parallel()
	ns, re, _ := pair(t)
	ctx := testCtx(t)
	nc := enginetest.Connect(t, ns)
	r := open(t, re, channel.WithWindow(1), channel.WithIdleTimeout(time.Minute)) // buffer: 18 frames
	subj, _ := subjects.ChannelSubject(r.ID())
	ack, err := nc.SubscribeSync(subj + ".ack") // the forged writer is attached
	if err != nil {
		t.Fatal(err)
	}
	// A message after the frames on the reader's own connection: once it
	// arrived, every frame before it was delivered or dropped.
	sentinel, err := re.Conn().SubscribeSync(nats.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	if err := re.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	const sent = 40
	for seq := 1; seq <= sent; seq++ {
		h := nats.Header{channel.HeaderSeq: {strconv.Itoa(seq)}, channel.HeaderKind: {"data"}}
		if err := nc.PublishMsg(&nats.Msg{Subject: subj, Header: h, Data: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Publish(sentinel.Subject, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sentinel.NextMsgWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ack.Unsubscribe(); err != nil { // the writer goes away
		t.Fatal(err)
	}
	for {
		f, err := r.Next(ctx)
		if err == nil {
			if f.Seq >= sent {
				t.Fatalf("read frame %d: nothing was dropped", f.Seq)
			}
			continue
		}
		if !errors.Is(err, channel.ErrGap) {
			t.Fatalf("Next after frame %d = %v, want ErrGap", f.Seq, err)
		}
		break
	}
}

// TestFloodBoundedInBytes: a writer that ignores credit is cut off by the
// bytes the reader holds for it, not only by their number. Forty frames of
// 256 KiB fit the frame buffer (2 × 16 + 16 frames) but would hold 10 MiB:
// the reader keeps about twice its byte window and two max payloads, reads
// those, then fails with a gap (the end frame never comes).
func TestFloodBoundedInBytes(t *testing.T) {
	t.Parallel()
	ns, re, _ := pair(t)
	ctx := testCtx(t)
	nc := enginetest.Connect(t, ns)
	const window, byteWindow, size, n = 16, 64 << 10, 256 << 10, 40
	r := open(t, re, channel.WithWindow(window), channel.WithByteWindow(byteWindow))
	subj, _ := subjects.ChannelSubject(r.ID())
	for seq := 1; seq <= n+1; seq++ {
		kind, data := "data", make([]byte, size)
		if seq > n {
			kind, data = "end", nil
		}
		h := nats.Header{channel.HeaderSeq: {strconv.Itoa(seq)}, channel.HeaderKind: {kind}}
		if err := nc.PublishMsg(&nats.Msg{Subject: subj, Header: h, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	delivered(t, nc, re.Conn())
	// Every frame went through the reader's bounds before it reads any.
	enginetest.Eventually(t, 5*time.Second, func() error {
		if k := channel.FramesPending(r); k > 0 {
			return fmt.Errorf("%d frames pending", k)
		}
		return nil
	})
	var read int
	for {
		_, err := r.Next(ctx)
		if err == nil {
			read++
			continue
		}
		if !errors.Is(err, channel.ErrGap) {
			t.Fatalf("Next after %d frames = %v, want ErrGap", read, err)
		}
		break
	}
	bound := 2*byteWindow + 2*int(re.Conn().MaxPayload()) + (2*window+16)*256
	if read == 0 || read*size > bound {
		t.Fatalf("read %d frames of %d bytes before the gap, want 1..%d bytes", read, size, bound)
	}
}

// TestIdleWriterEndsTheStream: a writer whose owner never calls Close or
// Fail (it forgot, or is stuck) ends the stream itself after its idle
// timeout: the reader gets a timeout error frame instead of waiting for
// its own (much longer) idle timeout, the writer's subscription goes, its
// Gone is closed, and its calls say why. A writer that keeps sending is
// never ended.
func TestIdleWriterEndsTheStream(t *testing.T) {
	const idle = 300 * time.Millisecond
	tests := []struct {
		name   string
		frames int
		// idle is the writer's idle timeout when not the default above.
		idle time.Duration
		// run checks what the reader and the writer see; subs is the
		// server's subscription count before the reader opened.
		run func(t *testing.T, ctx context.Context, ns *server.Server, subs uint32, r *channel.Reader, w *channel.Writer)
	}{
		{"forgotten after two frames", 2, 0, func(t *testing.T, ctx context.Context, ns *server.Server, subs uint32, r *channel.Reader, w *channel.Writer) {
			idleEnded(t, ctx, ns, subs, r, w, 2)
		}},
		{"never writes", 0, 0, func(t *testing.T, ctx context.Context, ns *server.Server, subs uint32, r *channel.Reader, w *channel.Writer) {
			idleEnded(t, ctx, ns, subs, r, w, 0)
		}},
		{"reader gone first", 1, 0, func(t *testing.T, ctx context.Context, ns *server.Server, subs uint32, r *channel.Reader, w *channel.Writer) {
			if _, err := r.Next(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			// Nobody closes the writer: its subscription goes all the same.
			settled(t, ns, -1, subs)
			if err := w.Write(ctx, event{}); !errors.Is(err, channel.ErrReaderGone) {
				t.Fatalf("Write = %v, want ErrReaderGone", err)
			}
			if err := w.Close(ctx); !errors.Is(err, channel.ErrReaderGone) {
				t.Fatalf("Close = %v, want ErrReaderGone", err)
			}
		}},
		// A writer of its own idle timeout, a second: a loaded machine
		// may hold its goroutine a few hundred milliseconds past a sleep.
		{"steady writer", 0, time.Second, func(t *testing.T, ctx context.Context, ns *server.Server, subs uint32, r *channel.Reader, w *channel.Writer) {
			const n = 8 // 8 × 200 ms: 1.6 idle timeouts in total
			errc := make(chan error, 1)
			go func() {
				for i := range n {
					if err := w.Sleep(ctx, time.Second/5); err != nil {
						errc <- err
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
					t.Fatalf("frame %d: %v", i+1, err)
				}
			}
			if _, err := r.Next(ctx); err != channel.ErrEnd {
				t.Fatalf("Next = %v, want ErrEnd", err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}},
	}
	enginetest.BusAndLocal(t, func(t *testing.T, local bool) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				ns, re, we := pairMode(t, local)
				ctx := testCtx(t)
				subs := ns.NumSubscriptions()
				// The reader would wait a minute: only the writer's idle
				// timeout can end the stream in time.
				r := open(t, re, channel.WithIdleTimeout(time.Minute))
				w, err := channel.NewWriter(we, r.ID(), channel.WithIdleTimeout(cmp.Or(tt.idle, idle)))
				if err != nil {
					t.Fatal(err)
				}
				for i := range tt.frames {
					if err := w.Write(ctx, event{N: i}); err != nil {
						t.Fatal(err)
					}
				}
				tt.run(t, ctx, ns, subs, r, w)
			})
		}
	})
}

// idleEnded checks a writer left alone after frames frames: the reader
// reads them, then the writer's timeout error, well before its own idle
// timeout; the writer is released.
func idleEnded(t *testing.T, ctx context.Context, ns *server.Server, subs uint32, r *channel.Reader, w *channel.Writer, frames int) {
	t.Helper()
	for i := range frames {
		if _, err := r.Next(ctx); err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
	}
	start := time.Now()
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := r.Next(short)
	if !errors.Is(err, channel.ErrWriterFailed) || !errors.Is(err, wire.ErrTimeout) {
		t.Fatalf("Next = %v, want the writer's timeout error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the stream ended after %v", d)
	}
	select {
	case <-w.Gone():
	default:
		t.Fatal("Gone is not closed")
	}
	for name, call := range map[string]func() error{
		"Write": func() error { return w.Write(ctx, event{}) },
		"Sleep": func() error { return w.Sleep(ctx, time.Minute) },
		"Fail":  func() error { return w.Fail(ctx, errors.New("late")) },
		"Close": func() error { return w.Close(ctx) },
	} {
		if err := call(); !errors.Is(err, channel.ErrIdleTimeout) {
			t.Fatalf("%s = %v, want ErrIdleTimeout", name, err)
		}
	}
	settled(t, ns, -1, subs)
}

// stallDialer dials client connections whose reads can be held: while
// stalled, what the server sent (a flush's answer) waits in the client.
// Writes are never held, so publishing and unsubscribing do not block.
type stallDialer struct {
	mu     sync.Mutex
	resume chan struct{} // nil when not stalled
}

func (d *stallDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, d: d}, nil
}

// stall holds reads until resume is called.
func (d *stallDialer) stall() (resume func()) {
	ch := make(chan struct{})
	d.mu.Lock()
	d.resume = ch
	d.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			d.resume = nil
			d.mu.Unlock()
			close(ch)
		})
	}
}

type stallConn struct {
	net.Conn
	d *stallDialer
}

// Read holds what it read while the dialer is stalled (a read already
// blocked when the stall began included).
func (c *stallConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.d.mu.Lock()
	ch := c.d.resume
	c.d.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return n, err
}

// TestSubscribeSlowFlush: Subscribe waits for the server's confirmation
// without holding the reader's lock, so a slow flush (a stalled
// connection) does not hold up Close, and a concurrent Subscribe waits
// for that confirmation within its own ctx rather than the first call's.
func TestSubscribeSlowFlush(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	d := &stallDialer{}
	e, err := engine.New(enginetest.Connect(t, ns, nats.SetCustomDialer(d)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	ctx := testCtx(t)
	subs := ns.NumSubscriptions()

	// subscribing starts a Subscribe on a stalled connection and returns
	// once the server has its subscriptions: the call is in its flush.
	subscribing := func(r *channel.Reader, have uint32) (errc chan error, resume func()) {
		resume = d.stall()
		t.Cleanup(resume)
		errc = make(chan error, 1)
		go func() {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			errc <- r.Subscribe(sctx)
		}()
		enginetest.Eventually(t, 5*time.Second, func() error {
			if n := ns.NumSubscriptions(); n < have+3 {
				return fmt.Errorf("%d subscriptions on the server, want %d", n, have+3)
			}
			return nil
		})
		return errc, resume
	}

	t.Run("close", func(t *testing.T) {
		r := open(t, e, channel.WithLocalFirst())
		errc, resume := subscribing(r, subs)
		start := time.Now()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 3*time.Second { // the flush waits 10 s
			t.Fatalf("Close took %v behind a pending flush", d)
		}
		resume()
		if err := <-errc; err != nil {
			t.Fatalf("Subscribe = %v", err)
		}
		settled(t, ns, -1, subs)
	})

	t.Run("concurrent subscribe", func(t *testing.T) {
		r := open(t, e, channel.WithLocalFirst())
		errc, resume := subscribing(r, subs)
		// Not confirmed yet: a second call must not report success.
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := r.Subscribe(short); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, wire.ErrTimeout) {
			t.Fatalf("Subscribe during a pending flush = %v, want its ctx's deadline", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("Subscribe took %v with a 200 ms ctx", d)
		}
		resume()
		if err := <-errc; err != nil {
			t.Fatalf("first Subscribe = %v", err)
		}
		if err := r.Subscribe(ctx); err != nil {
			t.Fatalf("Subscribe once confirmed = %v", err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		settled(t, ns, -1, subs)
	})
}
