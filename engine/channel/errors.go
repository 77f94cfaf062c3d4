package channel

import (
	"errors"
	"fmt"
	"io"
)

// Sentinel errors. A [Reader] error other than a context error is sticky:
// once Next has returned it, every later Next returns it again.
var (
	// ErrEnd is returned by [Reader.Next] after the writer's end frame: the
	// stream is complete and nothing was lost. It wraps io.EOF, so
	// errors.Is(err, io.EOF) holds too.
	ErrEnd = fmt.Errorf("channel: end of stream: %w", io.EOF)
	// ErrGap is returned by [Reader.Next] when a frame's sequence number is
	// not the next one expected: a frame was lost (or duplicated, or a second
	// writer is on the channel). Frames are never skipped silently.
	ErrGap = errors.New("channel: sequence gap")
	// ErrIdleTimeout is returned by [Reader.Next] when neither a frame nor
	// a busy writer's keep-alive arrived within the idle timeout
	// ([WithIdleTimeout]), and by every call on a [Writer]
	// that sent nothing for its idle timeout: it ended the stream itself
	// (its reader got a timeout error frame) and released its resources.
	ErrIdleTimeout = errors.New("channel: idle timeout")
	// ErrInvalidFrame is returned by [Reader.Next] for a frame whose headers
	// do not parse (missing, malformed or out-of-range sequence number,
	// unknown kind).
	ErrInvalidFrame = errors.New("channel: invalid frame")
	// ErrWriterFailed is returned by [Reader.Next] when the writer ended the
	// stream with an error frame ([Writer.Fail]). The writer's *wire.Error is
	// wrapped too, so errors.As finds its code and message and errors.Is
	// matches the catalog's sentinels.
	ErrWriterFailed = errors.New("channel: writer failed")
	// ErrWriterGone is returned by [Reader.Next] when the writer's
	// connection is gone (its process or its NATS server died): the reader
	// probes an attached writer while it waits, and the server answers "no
	// responders" for it. Without this a reader would wait for the idle
	// timeout.
	ErrWriterGone = errors.New("channel: writer gone")
	// ErrReaderGone is returned by [Writer.Write] when the reader closed the
	// channel, or granted no credit for the idle timeout while the writer
	// waited: a provider should stop producing.
	ErrReaderGone = errors.New("channel: reader gone")
	// ErrClosed is returned by calls on a closed [Reader] and by Write on a
	// [Writer] that already sent its terminal frame.
	ErrClosed = errors.New("channel: closed")
)
