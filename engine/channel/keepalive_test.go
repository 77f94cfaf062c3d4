package channel_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/channel"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// A writer whose owner is busy (waiting on an API that bounds its own
// silence) keeps its reader waiting past both sides' idle timeouts; once
// the owner is done, silence counts again from then.
func TestBusyWriter(t *testing.T) {
	const idle = 500 * time.Millisecond
	const silence = 4 * idle
	tests := []struct {
		name string
		// readerIdle is the reader's idle timeout (the writer's is idle).
		readerIdle time.Duration
		// frames are written before the busy silence.
		frames int
		// after: "write" writes a frame and closes after the silence;
		// "nothing" leaves the writer alone.
		after string
	}{
		// Over the bus the reader's idle timeout counts from the last
		// keep-alive, up to a probe (250 ms) before the owner is done:
		// twice idle leaves a loaded machine room for the frame after
		// it, and is still half the silence.
		{name: "after a frame", readerIdle: 2 * idle, frames: 1, after: "write"},
		{name: "before the first frame", readerIdle: 2 * idle, frames: 0, after: "write"},
		// Only the writer's idle timeout can end this stream in time, and
		// only once the owner's busy section is over.
		{name: "silent once done", readerIdle: time.Minute, frames: 1, after: "nothing"},
	}
	enginetest.BusAndLocal(t, func(t *testing.T, local bool) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				_, re, we := pairMode(t, local)
				ctx := testCtx(t)
				r := open(t, re, channel.WithIdleTimeout(tt.readerIdle))
				w := writer(t, we, r.ID(), channel.WithIdleTimeout(idle))
				doneAt := make(chan time.Time, 1)
				errc := make(chan error, 1)
				go func() {
					for i := range tt.frames {
						if err := w.Write(ctx, event{N: i}); err != nil {
							errc <- err
							return
						}
					}
					done := w.Busy()
					time.Sleep(silence) // the API thinks
					done()
					done() // idempotent
					doneAt <- time.Now()
					if tt.after == "nothing" {
						errc <- nil
						return
					}
					if err := w.Write(ctx, event{N: tt.frames}); err != nil {
						errc <- err
						return
					}
					errc <- w.Close(ctx)
				}()
				for i := range tt.frames {
					if _, err := r.Next(ctx); err != nil {
						t.Fatalf("frame %d: %v", i+1, err)
					}
				}
				f, err := r.Next(ctx)
				if tt.after == "nothing" {
					if !errors.Is(err, channel.ErrWriterFailed) || !errors.Is(err, wire.ErrTimeout) {
						t.Fatalf("Next = %v, want the writer's timeout error", err)
					}
					if quiet := time.Since(<-doneAt); quiet < idle*9/10 {
						t.Fatalf("the writer ended the stream %v after its owner was done, before its idle timeout %v", quiet, idle)
					}
					if err := <-errc; err != nil {
						t.Fatal(err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Next after %v of busy silence = %v, want the frame", silence, err)
				}
				var ev event
				if err := f.Decode(&ev); err != nil || ev.N != tt.frames {
					t.Fatalf("frame %+v, %v", ev, err)
				}
				if _, err := r.Next(ctx); !errors.Is(err, channel.ErrEnd) {
					t.Fatalf("Next = %v, want ErrEnd", err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// A busy writer whose process dies is noticed by the reader's probe, as
// an idle one is: keep-alives come from the writer's connection, not from
// a promise.
func TestBusyWriterGone(t *testing.T) {
	t.Parallel()
	ns, re, _ := pair(t)
	nc := enginetest.Connect(t, ns)
	we, err := engine.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	r := open(t, re, channel.WithIdleTimeout(time.Minute))
	w, err := channel.NewWriter(we, r.ID(), channel.WithIdleTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, event{N: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Busy()()
	go func() {
		time.Sleep(3 * time.Second) // several keep-alives first
		nc.Close()
	}()
	start := time.Now()
	if _, err := r.Next(ctx); !errors.Is(err, channel.ErrWriterGone) {
		t.Fatalf("Next = %v, want ErrWriterGone", err)
	}
	if d := time.Since(start); d < 3*time.Second || d > 10*time.Second {
		t.Fatalf("noticed after %v", d)
	}
}

// The keep-alive on the wire, with the other side a plain NATS client: a
// busy Go writer answers a probe (a credit with a reply subject) with
// {Iii-Ch-Kind: keepalive}, and only while busy; a Go reader takes such an
// answer as liveness, and still times out on a writer that never answers
// (one older than keep-alives).
func TestKeepAliveWire(t *testing.T) {
	t.Parallel()
	ns, re, we := pair(t)
	ctx := testCtx(t)

	t.Run("go writer", func(t *testing.T) {
		t.Parallel()
		nc := enginetest.Connect(t, ns)
		id := "keepalive-wire"
		subj, err := subjects.ChannelSubject(id)
		if err != nil {
			t.Fatal(err)
		}
		// A reader of its own: it answers the writer's pings with credit.
		ps, err := nc.Subscribe(subj+subjects.ChannelPingSuffix, func(m *nats.Msg) {
			_ = m.RespondMsg(&nats.Msg{Header: nats.Header{channel.HeaderKind: {"credit"}, channel.HeaderCredit: {"64"}}})
		})
		if err != nil {
			t.Fatal(err)
		}
		defer ps.Unsubscribe()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		w := writer(t, we, id)
		// NewWriter does not wait for the server to take its
		// subscription (a reader probes only once the writer's ping or
		// frame came, after it on the same connection); a probe from
		// another connection could come first and find nobody.
		if err := we.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		// A probe that must go unanswered waits 300 ms; one that must be
		// answered waits as long as a loaded machine may take.
		const unanswered, answered = 300 * time.Millisecond, 10 * time.Second
		probe := func(wait time.Duration) (*nats.Msg, error) {
			return nc.RequestMsg(&nats.Msg{Subject: subj + subjects.ChannelAckSuffix,
				Header: nats.Header{channel.HeaderKind: {"credit"}, channel.HeaderCredit: {"64"}}}, wait)
		}
		if m, err := probe(unanswered); !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("probe of an idle writer = %v, %v; want no answer", m, err)
		}
		done := w.Busy()
		m, err := probe(answered)
		if err != nil || m.Header.Get(channel.HeaderKind) != "keepalive" || len(m.Data) != 0 {
			t.Fatalf("probe of a busy writer = %+v, %v; want a keep-alive", m, err)
		}
		done()
		if m, err := probe(unanswered); !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("probe once done = %v, %v; want no answer", m, err)
		}
		done = w.Busy()
		defer done()
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if m, err := probe(unanswered); err == nil {
			t.Fatalf("probe of a closed writer = %+v; want none", m)
		}
	})

	tests := []struct {
		name string
		// answer is what the plain writer answers a probe with; nil:
		// nothing.
		answer nats.Header
		// live: the reader waits past its idle timeout.
		live bool
	}{
		{"keep-alive", nats.Header{channel.HeaderKind: {"keepalive"}}, true},
		{"keep-alive in lower case", nats.Header{"iii-ch-kind": {"keepalive"}}, true},
		{"older writer", nil, false},
		{"another answer", nats.Header{channel.HeaderKind: {"credit"}, channel.HeaderCredit: {"9"}}, false},
	}
	for _, tt := range tests {
		t.Run("plain writer/"+tt.name, func(t *testing.T) {
			t.Parallel()
			// A keep-alive must come within the idle timeout of the last
			// one, at a probe every 250 ms: a second leaves room for a
			// loaded machine.
			const idle = time.Second
			nc := enginetest.Connect(t, ns)
			r := open(t, re, channel.WithIdleTimeout(idle))
			subj, err := subjects.ChannelSubject(r.ID())
			if err != nil {
				t.Fatal(err)
			}
			sub, err := nc.Subscribe(subj+subjects.ChannelAckSuffix, func(m *nats.Msg) {
				if m.Reply != "" && tt.answer != nil {
					_ = m.RespondMsg(&nats.Msg{Header: tt.answer})
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			frame := func(seq, kind string) error {
				return nc.PublishMsg(&nats.Msg{Subject: subj, Header: nats.Header{channel.HeaderSeq: {seq}, channel.HeaderKind: {kind}}, Data: []byte(`{}`)})
			}
			if err := frame("1", "data"); err != nil {
				t.Fatal(err)
			}
			delivered(t, nc, re.Conn()) // not subject to the idle timeout
			if _, err := r.Next(ctx); err != nil {
				t.Fatal(err)
			}
			end := time.AfterFunc(2*idle, func() { _ = frame("2", "end") })
			defer end.Stop()
			start := time.Now()
			_, err = r.Next(ctx)
			if tt.live {
				if !errors.Is(err, channel.ErrEnd) {
					t.Fatalf("Next = %v, want ErrEnd after %v", err, 2*idle)
				}
				return
			}
			if !errors.Is(err, channel.ErrIdleTimeout) {
				t.Fatalf("Next = %v, want ErrIdleTimeout", err)
			}
			if d := time.Since(start); d > 3*idle {
				t.Fatalf("timed out after %v", d)
			}
		})
	}
}

// A busy writer still learns at once that its reader left: being busy
// keeps a reader waiting, not a writer writing.
func TestBusyWriterReaderCloses(t *testing.T) {
	forModes(t, func(t *testing.T, local bool) {
		_, re, we := pairMode(t, local)
		ctx := testCtx(t)
		r := open(t, re, channel.WithIdleTimeout(time.Second))
		w := writer(t, we, r.ID(), channel.WithIdleTimeout(time.Second))
		done := w.Busy()
		defer done()
		if err := w.Write(ctx, event{N: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Next(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.Gone():
		case <-time.After(5 * time.Second):
			t.Fatal("a busy writer did not learn that its reader left")
		}
		if err := w.Write(ctx, event{N: 2}); !errors.Is(err, channel.ErrReaderGone) {
			t.Fatalf("Write = %v, want ErrReaderGone", err)
		}
	})
}

// TestBusyEndsJustBeforeTheReaderLooks: the reader's idle timeout counts
// from the end of the owner's Busy section, whenever its own timer last
// looked. A section that ended moments before the reader's timer fired
// left a local writer no time at all for its next frame (CI hit it in
// TestBusyWriter and anthropic's TestSilentAPI).
func TestBusyEndsJustBeforeTheReaderLooks(t *testing.T) {
	const idle = time.Second
	forModes(t, func(t *testing.T, local bool) {
		_, re, we := pairMode(t, local)
		ctx := testCtx(t)
		r := open(t, re, channel.WithIdleTimeout(idle))
		w := writer(t, we, r.ID(), channel.WithIdleTimeout(idle))
		done := w.Busy()
		errc := make(chan error, 1)
		start := time.Now()
		go func() {
			// The reader's timer looks at about 1 s and 2 s; the
			// section ends just before the second look, and the frame
			// comes well within an idle timeout after it.
			time.Sleep(time.Until(start.Add(2*idle - 30*time.Millisecond)))
			done()
			time.Sleep(idle / 3)
			if err := w.Write(ctx, event{N: 7}); err != nil {
				errc <- err
				return
			}
			errc <- w.Close(ctx)
		}()
		f, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("Next = %v, want the frame written %v after the busy section", err, idle/3)
		}
		var ev event
		if err := f.Decode(&ev); err != nil || ev.N != 7 {
			t.Fatalf("frame %+v, %v", ev, err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}
