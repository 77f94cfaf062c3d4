package openai

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// fastChunk decodes data into c (reset first) in one pass when it is a
// chunk of the common shape: an object whose choices are objects with
// index, delta (content, refusal, reasoning text, tool calls), and
// finish_reason, and whose other keys hold scalars (id, model, created,
// usage: null...). It reports false for anything else (a usage object, an
// error, escaped or non-ASCII keys, keys that only match ignoring case, a
// key given twice, an unknown key holding an object or an array...), so
// that the general path decides; it also reports false for data that is
// not JSON. On true, c is what the general path of decodeChunk produces:
// the general path validates the data and then walks it again, which
// costs several times more per token.
func fastChunk(data []byte, c *chunk) bool {
	*c = chunk{Choices: c.Choices[:0]}
	p := scan{b: data}
	var seen uint8
	ok := p.object(func(key []byte) bool {
		switch string(key) { // no allocation: the compiler compares the bytes
		case "choices":
			return once(&seen, 1) && p.choices(c)
		case "usage", "error":
			return once(&seen, 2) && p.null() // a usage or an error object: the general path
		}
		return !foldsTo(key, "choices", "usage", "error") && p.skipScalar()
	})
	p.ws()
	return ok && p.i == len(p.b)
}

// once marks bit in seen and reports whether it was clear: a key given
// twice goes to the general path.
func once(seen *uint8, bit uint8) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// foldsTo reports whether key equals one of known ignoring case, as
// encoding/json (and decodeChunk's general path) would match it. Keys are
// ASCII here.
func foldsTo(key []byte, known ...string) bool {
	for _, k := range known {
		if len(k) == len(key) && bytes.EqualFold(key, []byte(k)) {
			return true
		}
	}
	return false
}

func (p *scan) choices(c *chunk) bool {
	if p.null() {
		return true
	}
	return p.array(func() bool {
		var ch chunkChoice
		if !p.choice(&ch) {
			return false
		}
		c.Choices = append(c.Choices, ch)
		return true
	})
}

func (p *scan) choice(ch *chunkChoice) bool {
	var seen uint8
	var ok bool
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "index":
			ch.Index, ok = p.integer()
			return once(&seen, 1) && ok
		case "delta":
			return once(&seen, 2) && p.delta(&ch.Delta)
		case "finish_reason":
			ch.FinishReason, ok = p.strOrNull()
			return once(&seen, 4) && ok
		case "usage":
			return once(&seen, 8) && p.null()
		}
		return !foldsTo(key, "index", "delta", "finish_reason", "usage") && p.skipScalar()
	})
}

func (p *scan) delta(d *chunkDelta) bool {
	var seen uint8
	var ok bool
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "content":
			d.Content, ok = p.strOrNull()
			return once(&seen, 1) && ok
		case "refusal":
			d.Refusal, ok = p.strOrNull()
			return once(&seen, 2) && ok
		case "reasoning_content":
			d.ReasoningContent, ok = p.strOrNull()
			return once(&seen, 4) && ok
		case "reasoning":
			d.Reasoning, ok = p.strOrNull()
			return once(&seen, 8) && ok
		case "tool_calls":
			if !once(&seen, 16) {
				return false
			}
			if p.null() {
				return true
			}
			d.ToolCalls = []chunkToolCall{} // [] is empty, not absent, as with encoding/json
			return p.array(func() bool {
				var tc chunkToolCall
				if !p.toolCall(&tc) {
					return false
				}
				d.ToolCalls = append(d.ToolCalls, tc)
				return true
			})
		}
		return !foldsTo(key, "content", "refusal", "reasoning_content", "reasoning", "tool_calls") && p.skipScalar()
	})
}

func (p *scan) toolCall(tc *chunkToolCall) bool {
	var seen uint8
	var ok bool
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "index":
			tc.Index, ok = p.integer()
			return once(&seen, 1) && ok
		case "id":
			tc.ID, ok = p.strOrNull()
			return once(&seen, 2) && ok
		case "function":
			if !once(&seen, 4) {
				return false
			}
			var fseen uint8
			return p.object(func(key []byte) bool {
				switch string(key) {
				case "name":
					tc.Function.Name, ok = p.strOrNull()
					return once(&fseen, 1) && ok
				case "arguments":
					tc.Function.Arguments, ok = p.strOrNull()
					return once(&fseen, 2) && ok
				}
				return !foldsTo(key, "name", "arguments") && p.skipScalar()
			})
		}
		return !foldsTo(key, "index", "id", "function") && p.skipScalar()
	})
}

// scan is a minimal, strict JSON reader over one event's data: what it
// accepts is valid JSON.
type scan struct {
	b []byte
	i int
}

func (p *scan) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *scan) consume(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object reads an object, calling member for each key with the reader on
// the key's value; member reads the value.
func (p *scan) object(member func(key []byte) bool) bool {
	if !p.consume('{') {
		return false
	}
	if p.consume('}') {
		return true
	}
	for {
		key, ok := p.key()
		if !ok || !member(key) {
			return false
		}
		if p.consume('}') {
			return true
		}
		if !p.consume(',') {
			return false
		}
	}
}

// array reads an array, calling elem with the reader on each element.
func (p *scan) array(elem func() bool) bool {
	if !p.consume('[') {
		return false
	}
	if p.consume(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.consume(']') {
			return true
		}
		if !p.consume(',') {
			return false
		}
	}
}

// key reads an object key and its colon; only plain ASCII keys are taken
// (escapes and other bytes go to the general path). The key aliases the
// data.
func (p *scan) key() ([]byte, bool) {
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	end := bytes.IndexByte(p.b[p.i+1:], '"')
	if end < 0 {
		return nil, false
	}
	raw := p.b[p.i+1 : p.i+1+end]
	for _, c := range raw {
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return nil, false
		}
	}
	p.i += end + 2
	if !p.consume(':') {
		return nil, false
	}
	return raw, true
}

// null reads a null.
func (p *scan) null() bool {
	p.ws()
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return true
	}
	return false
}

// strOrNull reads a string as decodeChunk's general path does (invalid
// UTF-8 replaced as encoding/json does), or a null as "".
func (p *scan) strOrNull() (string, bool) {
	if p.null() {
		return "", true
	}
	start, end, escaped, ascii, ok := p.str()
	if !ok {
		return "", false
	}
	var s string
	if escaped {
		// The general path's unescaping (gjson's), for the same result.
		s = gjson.Parse(string(p.b[start:end])).Str
	} else {
		s = string(p.b[start+1 : end-1])
		if ascii {
			return s, true
		}
	}
	if !utf8.ValidString(s) {
		s = validUTF8(s)
	}
	return s, true
}

// str reads a string literal, validating its escapes; start and end
// delimit it with its quotes. ascii reports whether it holds only ASCII.
func (p *scan) str() (start, end int, escaped, ascii, ok bool) {
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return 0, 0, false, false, false
	}
	start, ascii = p.i, true
	for j := p.i + 1; j < len(p.b); j++ {
		for j < len(p.b) && plain[p.b[j]] {
			j++
		}
		if j == len(p.b) {
			break
		}
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			return start, j + 1, escaped, ascii, true
		case c == '\\':
			escaped = true
			j++
			if j >= len(p.b) {
				return 0, 0, false, false, false
			}
			switch p.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(p.b) || !isHex(p.b[j+1]) || !isHex(p.b[j+2]) || !isHex(p.b[j+3]) || !isHex(p.b[j+4]) {
					return 0, 0, false, false, false
				}
				j += 4
			default:
				return 0, 0, false, false, false
			}
		case c < 0x20:
			return 0, 0, false, false, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return 0, 0, false, false, false
}

// plain marks the bytes a string holds as they are: ASCII but the quote,
// the backslash and control bytes.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// integer reads a plain integer (no fraction, no exponent) that fits an
// int64.
func (p *scan) integer() (int64, bool) {
	p.ws()
	end, frac := p.number()
	if end < 0 || frac {
		return 0, false
	}
	n, err := strconv.ParseInt(string(p.b[p.i:end]), 10, 64)
	if err != nil {
		return 0, false
	}
	p.i = end
	return n, true
}

// number finds the end of the JSON number at the reader's position (-1
// when there is none); frac reports a fraction or an exponent.
func (p *scan) number() (end int, frac bool) {
	b, j := p.b, p.i
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && b[j] >= '1' && b[j] <= '9':
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
	default:
		return -1, false
	}
	if j < len(b) && b[j] == '.' {
		frac = true
		j++
		d := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == d {
			return -1, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		frac = true
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		d := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == d {
			return -1, false
		}
	}
	return j, frac
}

// skipScalar passes over a string, number, true, false or null; objects
// and arrays go to the general path.
func (p *scan) skipScalar() bool {
	p.ws()
	if p.i >= len(p.b) {
		return false
	}
	switch p.b[p.i] {
	case '"':
		_, _, _, _, ok := p.str()
		return ok
	case 't':
		return p.literal("true")
	case 'f':
		return p.literal("false")
	case 'n':
		return p.literal("null")
	}
	end, _ := p.number()
	if end < 0 {
		return false
	}
	p.i = end
	return true
}

func (p *scan) literal(s string) bool {
	if bytes.HasPrefix(p.b[p.i:], []byte(s)) {
		p.i += len(s)
		return true
	}
	return false
}
