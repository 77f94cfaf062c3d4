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
	// DefaultIdleTimeout is how long a reader waits for the next frame, and a
	// writer for credit, before giving up on the other side.
	DefaultIdleTimeout = 60 * time.Second
)

// Option configures a [Reader] ([Open]) or a [Writer] ([NewWriter]). Each
// option says which side it applies to; the other side ignores it.
type Option func(*options) error

type options struct {
	window int
	idle   time.Duration
	attach time.Duration
	codec  wire.Codec
	// localFirst defers the reader's subscriptions to Reader.Subscribe.
	localFirst bool
}

func buildOptions(e *engine.Engine, opts []Option) (options, error) {
	o := options{window: DefaultWindow, idle: DefaultIdleTimeout}
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

// WithIdleTimeout sets how long a reader waits for a frame before
// [ErrIdleTimeout], and how long a writer waits for credit before
// [ErrReaderGone] (default [DefaultIdleTimeout]). Both sides.
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
