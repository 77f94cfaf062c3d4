package compaction

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// renderMessage writes m as the summarizer reads it: a header line naming
// the role (and, for a result, the function and call), then its blocks.
// A function result whose text is larger than pruneBytes becomes the
// marker "[output of <function_id> pruned: N bytes]"; call arguments and
// thinking larger than that are pruned the same way; images are named,
// never inlined.
func renderMessage(b *strings.Builder, m agent.Message, pruneBytes int) {
	switch m.Role {
	case agent.RoleFunctionResult:
		b.WriteString("[function_result ")
		b.WriteString(m.FunctionID)
		b.WriteString(" (")
		b.WriteString(m.FunctionCallID)
		b.WriteString(")")
		if m.IsError {
			b.WriteString(" error")
		}
		b.WriteString("]\n")
		size := 0
		for _, c := range m.Content {
			if c.Type != agent.ContentImage {
				size += len(c.Text)
			}
		}
		if size > pruneBytes {
			b.WriteString("[output of ")
			b.WriteString(m.FunctionID)
			b.WriteString(" pruned: ")
			b.WriteString(strconv.Itoa(size))
			b.WriteString(" bytes]\n")
			for _, c := range m.Content {
				if c.Type == agent.ContentImage {
					writeImage(b, c)
				}
			}
			return
		}
	default:
		b.WriteString("[")
		b.WriteString(string(m.Role))
		b.WriteString("]\n")
	}
	for _, c := range m.Content {
		switch c.Type {
		case agent.ContentText:
			b.WriteString(c.Text)
			if !strings.HasSuffix(c.Text, "\n") {
				b.WriteByte('\n')
			}
		case agent.ContentThinking:
			if c.Text == "" {
				continue // opaque thinking: nothing to read
			}
			if len(c.Text) > pruneBytes {
				b.WriteString("(thinking pruned: " + strconv.Itoa(len(c.Text)) + " bytes)\n")
				continue
			}
			b.WriteString("(thinking) ")
			b.WriteString(c.Text)
			b.WriteByte('\n')
		case agent.ContentFunctionCall:
			b.WriteString("[call ")
			b.WriteString(c.FunctionID)
			b.WriteString(" (")
			b.WriteString(c.ID)
			b.WriteString(")] ")
			args, err := wire.MarshalJSON(c.Arguments) // the summarizing model reads it: markup as it is
			switch {
			case err != nil:
				b.WriteString("(arguments not encodable)")
			case len(args) > pruneBytes:
				b.WriteString("[arguments of " + c.FunctionID + " pruned: " + strconv.Itoa(len(args)) + " bytes]")
			default:
				b.Write(args)
			}
			b.WriteByte('\n')
		case agent.ContentImage:
			writeImage(b, c)
		}
	}
}

func writeImage(b *strings.Builder, c agent.Content) {
	b.WriteString("[image ")
	b.WriteString(c.Mime)
	b.WriteString("]\n")
}

// renderMessages renders each message of msgs on its own, followed by a
// blank line.
func renderMessages(msgs []agent.Message, pruneBytes int) []string {
	out := make([]string, len(msgs))
	var b strings.Builder
	for i := range msgs {
		b.Reset()
		renderMessage(&b, msgs[i], pruneBytes)
		b.WriteByte('\n')
		out[i] = b.String()
	}
	return out
}

// shorten cuts s to at most n bytes by dropping its middle, which a
// marker replaces; it never splits a UTF-8 character. n below the
// marker's size keeps only the marker's start.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	marker := "\n[… " + strconv.Itoa(len(s)) + " bytes, middle omitted …]\n"
	if n <= len(marker) {
		return validPrefix(marker, max(n, 0))
	}
	room := n - len(marker)
	head := validPrefix(s, room/2)
	tail := validSuffix(s, room-len(head))
	return head + marker + tail
}

// validPrefix is the longest prefix of s of at most n bytes that ends on
// a character boundary.
func validPrefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// validSuffix is the longest suffix of s of at most n bytes that starts
// on a character boundary.
func validSuffix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
