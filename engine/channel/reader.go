package channel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Suffixes of a channel's control subjects, after its data subject
// "iii.ch.<id>": the reader publishes credit and cancel on "….ack" (the
// writer subscribes), and answers credit requests on "….ping".
const (
	ackSuffix  = subjects.ChannelAckSuffix
	pingSuffix = subjects.ChannelPingSuffix
)

// openFlushTimeout bounds Open's flush when ctx has no deadline.
const openFlushTimeout = 10 * time.Second

// Reader is the receiving end of a channel. It is created by [Open], which
// subscribes before the id exists anywhere else, so no frame can be missed.
// Next must be called from one goroutine at a time; ID, TraceContext,
// Subscribe and Close are safe from any goroutine.
type Reader struct {
	e      *engine.Engine
	nc     *nats.Conn
	id     string
	subj   string
	ack    string
	window uint64
	// byteWindow is the credit window in payload bytes (WithByteWindow).
	byteWindow uint64
	idle       time.Duration
	log        *slog.Logger

	ch   chan *nats.Msg
	done chan struct{} // closed by Close
	// The bus frames in ch, counted as they arrive (onFrame) and as Next
	// takes them, and their bounds: a writer that ignores credit is cut
	// off there (overflowed), not held in memory. Local frames are not
	// counted: a local writer always honours credit.
	queued, queuedBytes       atomic.Int64
	maxQueued, maxQueuedBytes int64
	overflowed                atomic.Bool
	// smu guards bus and gone: the reader's subscriptions, made by Open
	// or, with WithLocalFirst, by Subscribe; gone once they are dropped
	// for good.
	smu  sync.Mutex
	bus  *busSubs
	gone bool
	// probes receives the server's answers to liveness probes of the
	// writer; attached is set once the writer showed up.
	probes   chan *nats.Msg
	attached atomic.Bool
	opened   time.Time
	attach   time.Duration
	// key names r among the process's readers (local.go) when its engine
	// has local calls on; lw is the local writer attached to it.
	key localKey
	lw  atomic.Pointer[Writer]

	closeOnce sync.Once
	cancelled atomic.Bool // a cancel was sent, or the writer already ended
	first     atomic.Pointer[nats.Header]
	granted   atomic.Uint64 // highest sequence number granted so far; written under mu
	// grantedBytes is the byte credit granted so far; written under mu.
	grantedBytes atomic.Uint64
	// answered is set once a ping was answered with credit: the writer
	// knows the window, so frame 1 needs no grant of its own.
	answered atomic.Bool

	// Guarded by mu (held for the whole of Next).
	mu       sync.Mutex
	next     uint64 // next expected sequence number
	consumed uint64 // payload bytes of the data frames consumed
	err      error  // sticky terminal error
	timer    *time.Timer
}

// busSubs are a reader's subscriptions on the bus.
type busSubs struct {
	sub        *nats.Subscription // frames
	ping       *nats.Subscription // credit requests
	probeSub   *nats.Subscription // answers to liveness probes
	probeInbox string
	// flushed is closed once Subscribe's flush returned; confirmed, set
	// before, says whether the server confirmed the subscriptions.
	flushed   chan struct{}
	confirmed bool
}

// Open creates a channel: a fresh id, subscribed on this engine's
// connection and flushed to the server before Open returns. Hand r.ID() to
// the writer (usually in a function call's payload), then call Next until
// it returns an error. With [WithLocalFirst] it subscribes only when
// [Reader.Subscribe] is called. Options: [WithWindow], [WithByteWindow],
// [WithIdleTimeout], [WithAttachTimeout], [WithLocalFirst].
func Open(ctx context.Context, e *engine.Engine, opts ...Option) (*Reader, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	o, err := buildOptions(e, opts)
	if err != nil {
		return nil, err
	}
	id := nuid.Next()
	subj, err := subjects.ChannelSubject(id)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "generated channel id")
	}
	r := &Reader{
		e:          e,
		nc:         e.Conn(),
		id:         id,
		subj:       subj,
		ack:        subj + ackSuffix,
		window:     uint64(o.window),
		byteWindow: uint64(o.byteWindow),
		idle:       o.idle,
		log:        e.Logger(),
		// A writer that honours credit has at most window data frames
		// (and at most byte window bytes plus one frame) and one terminal
		// frame in flight; the rest is slack for a sloppy one. A frame
		// past the bounds is dropped and shows up as a gap, never as
		// silent loss. The last place is kept for overflowMark.
		ch:     make(chan *nats.Msg, maxQueued(o.window)+1),
		done:   make(chan struct{}),
		next:   1,
		probes: make(chan *nats.Msg, 4),
		opened: time.Now(),
		attach: o.attach,
	}
	// The reader has room for a window before it consumes anything; a
	// writer learns it by asking on the ping subject.
	r.maxQueued, r.maxQueuedBytes = int64(maxQueued(o.window)), maxQueuedBytes(o.window, o.byteWindow, r.nc.MaxPayload())
	r.granted.Store(r.window)
	r.grantedBytes.Store(r.byteWindow)
	r.timer = time.NewTimer(o.idle)
	r.timer.Stop()
	r.register()
	if !o.localFirst {
		if err := r.Subscribe(ctx); err != nil {
			r.deregister()
			return nil, err
		}
	}
	return r, nil
}

// Subscribe subscribes the reader on the bus, flushed to the server, so
// that a writer in any process can attach. [Open] does it, unless
// [WithLocalFirst]: then hand Subscribe to the call that starts the writer
// as engine.BeforeBus(ctx, r.Subscribe), and it runs only when that call
// goes over the bus. It is idempotent once it succeeded, a no-op after
// Close or the stream's end, and may be retried after an error (ctx ended
// before the server confirmed the subscriptions: none are left behind). A
// call made while another one waits for the server's confirmation waits
// for it too, within its own ctx; Close does not wait for it.
func (r *Reader) Subscribe(ctx context.Context) error {
	r.smu.Lock()
	for r.bus != nil && !r.gone {
		b := r.bus
		r.smu.Unlock()
		select {
		case <-b.flushed:
			if b.confirmed {
				return nil
			}
		case <-ctx.Done():
			return wire.FromNATS(ctx.Err())
		}
		// Its flush failed and took the subscriptions with it: try again.
		r.smu.Lock()
	}
	if r.gone {
		r.smu.Unlock()
		return nil
	}
	b, err := r.subscribeLocked()
	r.smu.Unlock()
	if err != nil {
		return err
	}
	// The flush waits on the server outside smu: Close, the probes and a
	// failing Next take it, and must not wait behind a slow connection.
	fctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(ctx, openFlushTimeout)
		defer cancel()
	}
	err = r.nc.FlushWithContext(fctx)
	r.smu.Lock()
	if err != nil && r.bus == b {
		r.unsubscribeLocked()
	}
	b.confirmed = err == nil
	close(b.flushed)
	r.smu.Unlock()
	if err != nil {
		return wire.FromNATS(err)
	}
	return nil
}

// subscribeLocked makes the reader's subscriptions (not yet flushed) and
// sets r.bus. smu held.
func (r *Reader) subscribeLocked() (*busSubs, error) {
	b := &busSubs{probeInbox: r.nc.NewInbox(), flushed: make(chan struct{})}
	var err error
	if b.sub, err = r.nc.Subscribe(r.subj, r.onFrame); err != nil {
		return nil, wire.FromNATS(err)
	}
	// The client's own queue ahead of onFrame holds no more than ch may;
	// what it drops is a gap (dropped).
	if err = b.sub.SetPendingLimits(int(r.maxQueued), int(min(r.maxQueuedBytes, math.MaxInt))); err != nil {
		_ = b.sub.Unsubscribe()
		return nil, wire.FromNATS(err)
	}
	if b.ping, err = r.nc.Subscribe(r.subj+pingSuffix, r.onPing); err != nil {
		_ = b.sub.Unsubscribe()
		return nil, wire.FromNATS(err)
	}
	if b.probeSub, err = r.nc.ChanSubscribe(b.probeInbox, r.probes); err != nil {
		_ = b.sub.Unsubscribe()
		_ = b.ping.Unsubscribe()
		return nil, wire.FromNATS(err)
	}
	r.bus = b
	return b, nil
}

// frameOverhead is what a reader allows per buffered frame for its
// subject and headers, on top of the payload bytes of the windows.
const frameOverhead = 256

// maxQueued is how many bus frames a reader holds: twice the window, and
// slack for a terminal frame and a sloppy writer.
func maxQueued(window int) int { return 2*window + 16 }

// maxQueuedBytes is how many bytes of bus frames (as received: subject,
// headers, payload) a reader holds: twice the byte window and two max
// payloads (the frame that crossed the byte credit, a terminal frame),
// and the headers of maxQueued frames. A writer that honours credit
// stays below half of it.
func maxQueuedBytes(window, byteWindow int, maxPayload int64) int64 {
	return 2*int64(byteWindow) + 2*max(maxPayload, 0) + int64(maxQueued(window))*frameOverhead
}

// overflowMark follows in ch the last frame a reader kept before it cut
// off a writer that overflowed its bounds: Next fails there with ErrGap.
var overflowMark = &nats.Msg{}

// onFrame queues a frame from the bus for Next, within the reader's
// bounds, counted as the frame arrives (a channel subscription would hold
// maxQueued frames of up to the max payload each). The first frame past
// them is dropped with every later one, and the subscription goes at
// once, so a flood stops reaching this client.
func (r *Reader) onFrame(m *nats.Msg) {
	if r.overflowed.Load() {
		return
	}
	n, b := r.queued.Add(1), r.queuedBytes.Add(int64(m.Size()))
	if n <= r.maxQueued && b <= r.maxQueuedBytes {
		select {
		case r.ch <- m:
			return
		default: // a local writer's frames took the room: two writers
		}
	}
	r.overflowed.Store(true)
	_ = m.Sub.Unsubscribe()
	select {
	case r.ch <- overflowMark:
	default: // Next finds the overflow when ch is empty (lost)
	}
}

// ID is the channel id to hand to the writer ([NewWriter]).
func (r *Reader) ID() string { return r.id }

// TraceContext returns ctx carrying the trace context and baggage the
// writer sent with its first frame; before the first frame arrives it
// returns ctx unchanged.
func (r *Reader) TraceContext(ctx context.Context) context.Context {
	h := r.first.Load()
	if h == nil {
		return ctx
	}
	return r.e.Extract(ctx, *h)
}

// Next returns the next data frame, in order. It returns [ErrEnd] after the
// writer's end frame; an error wrapping [ErrWriterFailed] and the writer's
// *wire.Error after an error frame; [ErrGap] when a frame is missing;
// [ErrIdleTimeout] when neither a frame nor a keep-alive of a busy writer
// ([Writer.Busy]) arrives in time; [ErrInvalidFrame] for a
// frame that does not parse; [ErrClosed] after Close; ctx's error when ctx
// ends first. All but ctx's error are final, and all final errors other than
// the writer's own end or error tell the writer to stop (as Close does).
func (r *Reader) Next(ctx context.Context) (Frame, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return Frame{}, r.err
	}
	var m *nats.Msg
	select {
	case <-r.done:
		return Frame{}, r.fail(ErrClosed)
	default:
	}
	select {
	case m = <-r.ch: // fast path: a frame is already waiting
	default:
		r.timer.Reset(r.idle)
		probe := time.NewTicker(probeInterval(r.idle))
		defer probe.Stop()
		// The attach timeout has a timer of its own: probes come every 2 s
		// at most, which would round it up.
		var attach <-chan time.Time
		if r.attach > 0 && !r.attached.Load() {
			t := time.NewTimer(max(r.attach-time.Since(r.opened), 0))
			defer t.Stop()
			attach = t.C
		}
	wait:
		for {
			select {
			case m = <-r.ch:
				r.timer.Stop()
				break wait
			case <-ctx.Done():
				r.timer.Stop()
				return Frame{}, ctx.Err()
			case <-r.done:
				r.timer.Stop()
				return Frame{}, r.fail(ErrClosed)
			case <-r.timer.C:
				if lw := r.lw.Load(); lw != nil {
					if lw.keepingAlive() {
						// A local writer whose owner is busy: as alive
						// as a keep-alive over the bus would say.
						r.timer.Reset(r.idle)
						continue
					}
					if left := lw.busyGrace(r.idle); left > 0 {
						// Its owner was busy until moments ago: the
						// silence counts from then, not from this
						// timer's last look.
						r.timer.Reset(left)
						continue
					}
				}
				if err := r.lost(); err != nil {
					return Frame{}, r.fail(err)
				}
				return Frame{}, r.fail(fmt.Errorf("%w: no frame for %v after frame %d", ErrIdleTimeout, r.idle, r.next-1))
			case <-attach:
				if !r.attached.Load() {
					r.timer.Stop()
					return Frame{}, r.fail(fmt.Errorf("%w: no writer attached within %v", ErrWriterGone, r.attach))
				}
			case <-probe.C:
				r.probe()
			case pm := <-r.probes:
				if isKeepAlive(pm.Header) {
					// The writer is alive and its owner at work: the
					// silence starts again.
					r.timer.Reset(r.idle)
					continue
				}
				if len(pm.Data) == 0 && pm.Header.Get(statusHeader) == statusNoResponders {
					// The writer's last frames came first: they are in
					// ch, or on their way to it through onFrame.
					var settled bool
					if m, settled = r.settle(); m != nil {
						r.timer.Stop()
						break wait
					}
					if !settled {
						continue // the next probe looks again
					}
					r.timer.Stop()
					if err := r.lost(); err != nil {
						// Frames were lost here, not only the writer.
						return Frame{}, r.fail(err)
					}
					return Frame{}, r.fail(fmt.Errorf("%w: no subscriber on its control subject after frame %d", ErrWriterGone, r.next-1))
				}
			}
		}
	}
	return r.frame(m)
}

// probeInterval is how often a waiting reader checks that an attached
// writer still exists: a quarter of the idle timeout, within 250 ms..2 s.
func probeInterval(idle time.Duration) time.Duration {
	return min(max(idle/4, 250*time.Millisecond), 2*time.Second)
}

// lost is the gap error of frames dropped past the reader's bounds, by
// onFrame or by the client ahead of it, or nil.
func (r *Reader) lost() error {
	if r.overflowed.Load() {
		return r.overflowErr()
	}
	r.smu.Lock()
	defer r.smu.Unlock()
	if r.bus == nil {
		return nil
	}
	if n, err := r.bus.sub.Dropped(); err == nil && n > 0 {
		return fmt.Errorf("%w: %d frames dropped by the client after frame %d", ErrGap, n, r.next-1)
	}
	return nil
}

func (r *Reader) overflowErr() error {
	return fmt.Errorf("%w: frames dropped after frame %d: the writer went past the reader's buffer (%d frames, %d bytes) without credit", ErrGap, r.next-1, r.maxQueued, r.maxQueuedBytes)
}

// settleTimeout bounds how long settle waits for onFrame to catch up.
const settleTimeout = 50 * time.Millisecond

// settle returns a frame from ch once the messages the client received on
// the frame subscription before now went through onFrame; settled is
// false when they did not within settleTimeout (a starved goroutine).
// Lock held.
func (r *Reader) settle() (m *nats.Msg, settled bool) {
	r.smu.Lock()
	b := r.bus
	r.smu.Unlock()
	deadline := time.Now().Add(settleTimeout)
	for wait := 10 * time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
		select {
		case m := <-r.ch:
			return m, true
		default:
		}
		if b == nil {
			return nil, true
		}
		// Pending counts a message until onFrame has returned from it.
		if n, _, err := b.sub.Pending(); err != nil || n == 0 {
			select {
			case m := <-r.ch:
				return m, true
			default:
				return nil, true
			}
		}
		if time.Now().After(deadline) {
			return nil, false
		}
		time.Sleep(wait)
	}
}

// probe sends the writer a credit grant (harmless: credit is cumulative)
// with a reply subject; when the writer's subscription is gone the server
// answers "no responders" there. Probing starts once the writer attached
// (its ping or first frame), since before that nobody listens by design.
// A local writer is not probed: it lives in this process.
func (r *Reader) probe() {
	if !r.attached.Load() || r.cancelled.Load() || r.lw.Load() != nil {
		return
	}
	r.smu.Lock()
	b := r.bus
	r.smu.Unlock()
	if b == nil {
		return
	}
	_ = r.nc.PublishMsg(&nats.Msg{Subject: r.ack, Reply: b.probeInbox, Header: controlHeader(KindCredit, r.granted.Load(), r.grantedBytes.Load())})
}

// frame checks and consumes one message. Lock held.
func (r *Reader) frame(m *nats.Msg) (Frame, error) {
	if m == overflowMark {
		return Frame{}, r.fail(r.overflowErr())
	}
	if m.Sub != nil { // from the bus (onFrame)
		r.queued.Add(-1)
		r.queuedBytes.Add(-int64(m.Size()))
	}
	seq, kind, err := parseFrame(m.Header)
	if err != nil {
		return Frame{}, r.fail(err)
	}
	if seq != r.next {
		return Frame{}, r.fail(fmt.Errorf("%w: expected frame %d, got %d", ErrGap, r.next, seq))
	}
	r.next++
	r.attached.Store(true)
	if seq == 1 {
		h := m.Header
		r.first.Store(&h)
	}
	switch kind {
	case KindEnd:
		r.finish(ErrEnd)
		return Frame{}, ErrEnd
	case KindError:
		werr := wire.Decode(m)
		if werr == nil {
			werr = wire.Errorf(wire.CodeInternal, "writer sent an error frame without an error")
		}
		err := fmt.Errorf("%w: %w", ErrWriterFailed, werr)
		r.finish(err)
		return Frame{}, err
	}
	r.consumed += uint64(len(m.Data))
	r.grant(seq)
	return Frame{
		Seq:   seq,
		Kind:  KindData,
		Data:  m.Data,
		Codec: wire.ForContentType(headerFirst(m.Header, wire.HeaderContentType)),
	}, nil
}

// grant re-grants credit once the reader has consumed a quarter of its
// window, in frames or in bytes, since the last grant, and after frame 1
// (the only frame a writer may send without credit, so a writer that
// never asks still gets going) unless a ping was answered already. Byte
// credit goes only when it is due (and after frame 1): the writer keeps
// the last one, and small frames then cost no header for it. Lock held.
func (r *Reader) grant(consumed uint64) {
	want, wantBytes := consumed+r.window, r.consumed+r.byteWindow
	first := consumed == 1 && !r.answered.Load()
	bytesDue := first || wantBytes-r.grantedBytes.Load() >= max(1, r.byteWindow/4)
	if !bytesDue && want-r.granted.Load() < max(1, r.window/4) {
		return
	}
	r.granted.Store(want)
	var nb uint64
	if bytesDue {
		r.grantedBytes.Store(wantBytes)
		nb = wantBytes
	}
	if lw := r.lw.Load(); lw != nil {
		lw.credit(want, nb)
		return
	}
	err := r.nc.PublishMsg(&nats.Msg{Subject: r.ack, Header: controlHeader(KindCredit, want, nb)})
	if err != nil {
		// The writer stalls and the idle timeout reports it; the frame in
		// hand is still good.
		r.log.Warn("channel: credit not sent", "channel", r.id, "error", err)
	}
}

// finish records the writer's own terminal frame: no cancel is needed.
// Lock held.
func (r *Reader) finish(err error) {
	r.err = err
	r.cancelled.Store(true)
	r.unsubscribe()
}

// fail records a final reader-side error and tells the writer to stop.
// Lock held.
func (r *Reader) fail(err error) error {
	r.err = err
	r.cancel()
	r.unsubscribe()
	return err
}

// unsubscribe drops the reader's subscriptions and local listing for good.
func (r *Reader) unsubscribe() {
	r.deregister()
	r.smu.Lock()
	defer r.smu.Unlock()
	r.gone = true
	r.unsubscribeLocked()
}

// unsubscribeLocked drops the bus subscriptions, returning the first
// error that matters. smu held.
func (r *Reader) unsubscribeLocked() error {
	b := r.bus
	if b == nil {
		return nil
	}
	r.bus = nil
	var err error
	for _, sub := range []*nats.Subscription{b.sub, b.ping, b.probeSub} {
		if uerr := sub.Unsubscribe(); uerr != nil && err == nil &&
			!errors.Is(uerr, nats.ErrBadSubscription) && !errors.Is(uerr, nats.ErrConnectionClosed) {
			err = wire.FromNATS(uerr)
		}
	}
	return err
}

// onPing answers a writer's credit request on its reply subject: the
// current grant, or cancel once the reader is done.
func (r *Reader) onPing(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	r.attached.Store(true)
	h := controlHeader(KindCredit, r.granted.Load(), r.grantedBytes.Load())
	cancelled := r.cancelled.Load()
	if cancelled {
		h = controlHeader(KindCancel, 0, 0)
	}
	if m.RespondMsg(&nats.Msg{Header: h}) == nil && !cancelled {
		r.answered.Store(true)
	}
}

// cancel sends the cancel signal once.
func (r *Reader) cancel() {
	if !r.cancelled.CompareAndSwap(false, true) {
		return
	}
	if lw := r.lw.Load(); lw != nil {
		lw.setGone()
		lw.signal()
		return
	}
	err := r.nc.PublishMsg(&nats.Msg{Subject: r.ack, Header: controlHeader(KindCancel, 0, 0)})
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		r.log.Warn("channel: cancel not sent", "channel", r.id, "error", err)
	}
}

// Close releases the channel. Unless the writer already ended the stream,
// it tells the writer to stop ([ErrReaderGone]). A Next blocked in another
// goroutine returns [ErrClosed]. Close is idempotent.
func (r *Reader) Close() error {
	var err error
	r.closeOnce.Do(func() {
		close(r.done)
		r.cancel()
		r.deregister()
		r.smu.Lock()
		defer r.smu.Unlock()
		r.gone = true
		err = r.unsubscribeLocked()
	})
	return err
}

// headerFirst is the first value of key, matched exactly, then
// case-insensitively.
func headerFirst(h nats.Header, key string) string {
	return engine.HeaderCarrier(h).Get(key)
}
