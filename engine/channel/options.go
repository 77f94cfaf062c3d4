package channel

import (
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Defaults of the options.
const (
	// DefaultWindow is the number of frames a writer may send ahead of the
	// reader's consumption.
	DefaultWindow = 64
	// MaxWindow bounds [WithWindow].
	MaxWindow = 1 << 16
	// DefaultByteWindow is the number of payload bytes a writer may send
	// ahead of the reader's consumption (plus one frame).
	DefaultByteWindow = 1 << 20
	// MaxByteWindow bounds [WithByteWindow].
	MaxByteWindow = 1 << 30
	// DefaultIdleTimeout is the longest silence a channel tolerates: how
	// long a reader waits for the next frame (or a busy writer's
	// keep-alive), and a writer for credit, before giving up on the other
	// side, and how long a writer that is not busy may send nothing before
	// it ends the stream itself.
	DefaultIdleTimeout = 60 * time.Second
)

// Option configures a [Reader] ([Open]) or a [Writer] ([NewWriter]). Each
// option says which side it applies to; the other side ignores it.
type Option func(*options) error

type options struct {
	window     int
	byteWindow int
	idle       time.Duration
	attach     time.Duration
	codec      wire.Codec
	// localFirst defers the reader's subscriptions to Reader.Subscribe.
	localFirst bool
}

func buildOptions(e *engine.Engine, opts []Option) (options, error) {
	o := options{window: DefaultWindow, byteWindow: DefaultByteWindow, idle: DefaultIdleTimeout}
	if e != nil {
		o.codec = e.Codec()
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	if o.codec == nil {
		o.codec = wire.Msgpack
	}
	return o, nil
}

// WithWindow sets the reader's credit window: how many data frames the
// writer may have sent beyond the last frame the reader consumed (1 to
// [MaxWindow]; default [DefaultWindow]). Reader side.
func WithWindow(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxWindow {
			return fmt.Errorf("%w: channel window %d must be 1..%d", engine.ErrInvalidOption, n, MaxWindow)
		}
		o.window = n
		return nil
	}
}

// WithByteWindow sets the reader's credit window in bytes: how many payload
// bytes of data frames the writer may have sent beyond the last frame the
// reader consumed, plus the one frame that crossed the limit (1 to
// [MaxByteWindow]; default [DefaultByteWindow]). With [WithWindow] it
// bounds what a reader buffers for a writer that honours credit: at most
// window frames and byte window bytes plus one frame; a writer that does
// not is cut off at twice that (package doc, "Protocol"). A frame larger than
// the byte window still goes, once the frames before it were consumed.
// Reader side.
func WithByteWindow(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxByteWindow {
			return fmt.Errorf("%w: channel byte window %d must be 1..%d", engine.ErrInvalidOption, n, MaxByteWindow)
		}
		o.byteWindow = n
		return nil
	}
}

// WithAttachTimeout bounds, on a reader, how long a writer may take to
// attach (ping or send its first frame) before Next fails with
// [ErrWriterGone]: a function call that starts the writer and was lost
// with its worker's node never attaches. The time runs from [Open].
// Default: none; the idle timeout bounds each wait ([ErrIdleTimeout]).
func WithAttachTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: channel attach timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.attach = d
		return nil
	}
}

// WithLocalFirst makes [Open] skip the bus: the reader subscribes only
// when [Reader.Subscribe] is called, and until then only a writer of this
// process can attach (an engine with local calls on, connected to the same
// server; package doc, "Local writers"). Use it when the call that starts
// the writer carries engine.BeforeBus(ctx, r.Subscribe): a call served
// locally then costs the channel no subscription and no round trip, and
// one that goes over the bus subscribes first. It takes a function served
// locally to write with an engine of this process that has local calls on
// (the providers write with their worker's engine): a writer that cannot
// attach finds nobody, and the reader fails with [ErrWriterGone] after its
// attach timeout. Reader side.
func WithLocalFirst() Option {
	return func(o *options) error {
		o.localFirst = true
		return nil
	}
}

// WithIdleTimeout sets the longest silence on the channel (default
// [DefaultIdleTimeout]). Both sides: a reader waits that long for a frame
// or a keep-alive before [ErrIdleTimeout]; a writer waits that long for
// credit before [ErrReaderGone]; and a writer that sends nothing for that
// long, with no call in progress and not [Writer.Busy] (its owner forgot
// to Close it, or is stuck), ends the stream with a timeout error frame
// and releases its subscription: its later calls return
// [ErrIdleTimeout]. Give both sides the same value; a writer's owner that
// may wait longer on something it bounds itself says so with
// [Writer.Busy] instead of a longer timeout (package doc, "Keep-alive").
func WithIdleTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: channel idle timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.idle = d
		return nil
	}
}

// WithCodec sets the codec a writer encodes frames with (default: the
// engine's codec). Writer side; the reader decodes each frame by its
// Content-Type.
func WithCodec(c wire.Codec) Option {
	return func(o *options) error {
		if c == nil {
			return fmt.Errorf("%w: nil channel codec", engine.ErrInvalidOption)
		}
		o.codec = c
		return nil
	}
}
