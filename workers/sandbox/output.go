package sandbox

import (
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
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
	size := func(s string) int64 {
		b, _ := codec.Marshal(s)
		return int64(len(b))
	}
	half := room / 2
	outRoom, errRoom := half, room-half
	if n := size(out); n < outRoom {
		outRoom, errRoom = n, room-n
	} else if n := size(errOut); n < errRoom {
		outRoom, errRoom = room-n, n
	}
	res.Stdout = cutToFit(out, outRoom, size)
	res.Stderr = cutToFit(errOut, errRoom, size)
	body, err = codec.Marshal(res)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInternal, err, "encode the result")
	}
	return body, nil
}

// cutToFit is the longest prefix of s, cut at a rune boundary, whose
// encoding (size) takes at most room bytes. Encodings grow with the
// prefix, so a binary search finds it.
func cutToFit(s string, room int64, size func(string) int64) string {
	if size(s) <= room {
		return s
	}
	lo, hi := 0, len(s) // the prefix of lo bytes fits, that of hi does not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if size(s[:mid]) <= room {
			lo = mid
		} else {
			hi = mid
		}
	}
	// Back off to the start of a rune cut in two (at most UTFMax-1 bytes:
	// bytes that are not UTF-8 are cut anywhere).
	for i := 0; i < utf8.UTFMax-1 && lo > 0 && !utf8.RuneStart(s[lo]); i++ {
		lo--
	}
	return s[:lo]
}
