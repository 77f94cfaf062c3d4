package httpbody

import (
	"fmt"
	"io"
)

// EventTooLargeError is the error of an [Events] body whose server-sent
// event proved longer than its limit. It matches [ErrTooLarge].
type EventTooLargeError struct {
	// Limit is the most one event may hold, in bytes.
	Limit int64
}

func (e *EventTooLargeError) Error() string {
	return fmt.Sprintf("a server-sent event is larger than %s (the limit)", size(e.Limit))
}

// Is reports whether target is [ErrTooLarge].
func (e *EventTooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Events returns rc, a text/event-stream body, failing a read with an
// [*EventTooLargeError] (and every read after it) once one event (the
// lines up to a blank line) holds more than n bytes, line ends left out.
// The SDKs' SSE decoders gather an event's data lines in memory with no
// bound but the body's end: a server that never ends an event would fill
// it. A line may end with "\n", "\r\n" or "\r" (the SSE grammar). Closing
// it closes rc.
func Events(rc io.ReadCloser, n int64) io.ReadCloser {
	return &events{rc: rc, limit: max(n, 0)}
}

type events struct {
	rc    io.ReadCloser
	limit int64
	event int64 // bytes of the event so far, line ends left out
	line  int64 // bytes of the current line
	cr    bool  // the last byte was "\r" (a "\n" after it ends no line)
	err   error
}

func (b *events) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	for i, c := range p[:n] {
		switch {
		case c == '\n' && b.cr:
			b.cr = false
		case c == '\n' || c == '\r':
			if b.line == 0 {
				b.event = 0 // a blank line ends the event
			}
			b.line, b.cr = 0, c == '\r'
		default:
			b.cr = false
			b.line++
			b.event++
			if b.event > b.limit {
				b.err = &EventTooLargeError{Limit: b.limit}
				return i, b.err
			}
		}
	}
	return n, err
}

func (b *events) Close() error { return b.rc.Close() }
