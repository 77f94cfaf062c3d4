package main

// What the client commands print to a terminal. Most of it is written by
// others: a model's words, function arguments and results, a worker's
// descriptions, an error a tool or provider sent, a web page a tool
// fetched. None of it may send the terminal commands.

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// safeWriter is where chat (and every client command) prints: a terminal, to which the text of a
// turn (a model's words, function arguments and results, error messages,
// ids, most of it written by a model or by a web page a tool fetched)
// must not send commands. Each write goes through [safeText], rune by
// rune, so an escape sequence cut over two deltas is shown like a whole
// one. A character cut over two deltas is U+FFFD twice, as decoding each
// delta's event (JSON) already made it.
type safeWriter struct{ w io.Writer }

func (s safeWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(s.w, safeText(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// safeError is an error whose text is shown through [safeText]; errors.Is
// and errors.As see the error it wraps.
type safeError struct{ err error }

func (e safeError) Error() string { return safeText(e.err.Error()) }
func (e safeError) Unwrap() error { return e.err }

// terminal is w behind a [safeWriter], once.
func terminal(w io.Writer) io.Writer {
	if _, ok := w.(safeWriter); ok {
		return w
	}
	return safeWriter{w}
}

// safeText is s with every character that a terminal acts on instead of
// showing it made visible: a C0 control but \n and
// \t (ESC starts CSI and OSC sequences: clipboard writes, links, titles,
// cursor moves; a bare CR overwrites the line) as \x1b or \r; DEL, a C1
// control and the bidi embeddings, overrides and isolates (U+202A-202E,
// U+2066-2069, which reorder what is shown) as \u007f, \u009b, \u202e.
// CRLF is a newline. A byte that is not UTF-8 becomes U+FFFD, as
// encoding/json decodes it: a lone 0x9b is CSI to some terminals. JSON
// holds no raw C0 control and JSON's escapes are \u ones, so JSON shown
// through safeText (arguments, results, the commands chat suggests)
// stays JSON that means the same. Text with none of these comes back
// unchanged, and safeText of its own result changes nothing.
func safeText(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || unsafeRune(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\r' && strings.HasPrefix(s[i+1:], "\n"):
			// CRLF: the newline alone, which shows the same.
		case r == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		case !unsafeRune(r):
			b.WriteString(s[i : i+size])
		case r < 0x20:
			q := strconv.QuoteRune(r) // '\x1b', '\r', '\a'
			b.WriteString(q[1 : len(q)-1])
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
		i += size
	}
	return b.String()
}

// unsafeRune reports whether r is shown by safeText as an escape.
func unsafeRune(r rune) bool {
	switch {
	case r == '\n', r == '\t':
		return false
	case r < 0x20, r == 0x7f, 0x80 <= r && r <= 0x9f:
		return true // C0, DEL, C1
	case 0x202a <= r && r <= 0x202e, 0x2066 <= r && r <= 0x2069:
		return true // bidi embeddings, overrides and isolates
	}
	return false
}
