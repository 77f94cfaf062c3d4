package sandbox

import (
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sandbox/internal/fit"
)

// capWriter keeps the first max bytes written to it and counts the rest,
// which it discards: a command's output flood costs time, never memory.
type capWriter struct {
	buf   []byte
	max   int
	total int64
}

// Write never fails, so the copy from the pipe drains it to the end.
func (w *capWriter) Write(p []byte) (int, error) {
	w.total += int64(len(p))
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// truncated reports whether anything was discarded.
func (w *capWriter) truncated() bool { return w.total > int64(len(w.buf)) }

// text is what was kept, less the start of a rune the cap cut in two
// (which a JSON caller would get as U+FFFD).
func (w *capWriter) text() string {
	b := w.buf
	if w.truncated() {
		for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
			if utf8.RuneStart(b[len(b)-i]) {
				if !utf8.FullRune(b[len(b)-i:]) {
					b = b[:len(b)-i]
				}
				break
			}
		}
	}
	return string(b)
}

// fitSlack covers what an output's encoding alone does not: the longer
// string headers of msgpack, rounding.
const fitSlack = 64

// fitResult encodes res in the caller's codec within limit bytes. The
// output cap counts raw bytes, but a JSON caller gets each control
// character and each byte that is not UTF-8 as a six-byte escape, and the
// server's max payload may be smaller than two caps: an answer that does
// not fit would fail after the command ran (and an exec is not
// idempotent). So when the whole answer does not fit, stdout and stderr
// are cut further, at rune boundaries, each to half the room (what one
// does not need goes to the other), and truncated says so;
// stdout_bytes and stderr_bytes still count everything.
func fitResult(res Result, codec wire.Codec, limit int64) (engine.Raw, error) {
	body, err := codec.Marshal(res)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode the result")
	}
	if int64(len(body)) <= limit {
		return body, nil
	}
	out, errOut := res.Stdout, res.Stderr
	res.Stdout, res.Stderr, res.Truncated = "", "", true
	base, err := codec.Marshal(res)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode the result")
	}
	room := limit - int64(len(base)) - 2*fitSlack
	if room < 0 {
		return nil, wire.Errorf(wire.CodeInternal, "the result does not fit the server's max payload even without output")
	}
	size := fit.StringSize(codec)
	half := room / 2
	outRoom, errRoom := half, room-half
	if n := size(out); n < outRoom {
		outRoom, errRoom = n, room-n
	} else if n := size(errOut); n < errRoom {
		outRoom, errRoom = room-n, n
	}
	res.Stdout = fit.Prefix(out, outRoom, size)
	res.Stderr = fit.Prefix(errOut, errRoom, size)
	body, err = codec.Marshal(res)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode the result")
	}
	return body, nil
}
