package anthropic

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// streamEvent is one event of a Messages API stream, with only the fields
// the translator reads. The SDK's own event type (a union decoded by
// reflection) costs ~10 µs per event on a small machine, twenty times
// what reading the stream costs; this one is decoded by encoding/json, and
// the content_block_delta events that make up nearly all of a stream by
// [fastDelta].
type streamEvent struct {
	Type         string       `json:"type"`
	Index        int64        `json:"index"`
	Message      eventMessage `json:"message"`
	ContentBlock eventBlock   `json:"content_block"`
	Delta        eventDelta   `json:"delta"`
	Usage        eventUsage   `json:"usage"`
}

type eventMessage struct {
	Model string     `json:"model"`
	Usage eventUsage `json:"usage"`
}

type eventBlock struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	// Data is the encrypted thinking of a redacted_thinking block.
	Data string `json:"data"`
}

type eventDelta struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	PartialJSON string `json:"partial_json"`
	Thinking    string `json:"thinking"`
	// Signature is (a part of) a thinking block's signature.
	Signature  string `json:"signature"`
	StopReason string `json:"stop_reason"`
}

// eventUsage holds token counts; nil means the event did not say.
type eventUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
}

// decodeEvent decodes an event's data: the fast path for deltas, else
// encoding/json.
func decodeEvent(data []byte, ev *streamEvent) error {
	if fastDelta(data, ev) {
		return nil
	}
	*ev = streamEvent{}
	return json.Unmarshal(data, ev)
}

// fastDelta decodes data into ev when it is a plain object whose keys are
// type, index and delta (in any order, with any spacing) and whose delta
// holds string fields only; it reports false for anything else (escaped
// keys, a number that is not a plain integer, a string with a control
// character or invalid UTF-8, unknown keys that encoding/json would match
// case-insensitively...), so that encoding/json decides. On true, ev is
// what json.Unmarshal would have produced from a zero streamEvent.
func fastDelta(data []byte, ev *streamEvent) bool {
	p := scanner{b: data}
	*ev = streamEvent{}
	if !p.consume('{') {
		return false
	}
	first := true
	for {
		if p.consume('}') {
			break
		}
		if !first && !p.consume(',') {
			return false
		}
		first = false
		key, ok := p.key()
		if !ok {
			return false
		}
		switch string(key) { // no allocation: the compiler compares the bytes
		case "type":
			if ev.Type, ok = p.str(); !ok {
				return false
			}
		case "index":
			if ev.Index, ok = p.integer(); !ok {
				return false
			}
		case "delta":
			if !p.delta(&ev.Delta) {
				return false
			}
		default:
			if foldsToKnown(key, "message", "content_block", "usage") || !p.skip() {
				return false
			}
		}
	}
	p.ws()
	return p.i == len(p.b)
}

// interned are the values most events repeat, returned without an
// allocation.
var interned = []string{"content_block_delta", "text_delta", "input_json_delta", "thinking_delta", "signature_delta"}

func intern(b []byte) string {
	for _, s := range interned {
		if string(b) == s {
			return s
		}
	}
	return string(b)
}

// foldsToKnown reports whether key would match one of the known keys (or
// those of ev's fast fields) case-insensitively: encoding/json would fill
// that field, so the fast path must not guess.
func foldsToKnown(key []byte, known ...string) bool {
	for _, k := range append(known, "type", "index", "delta", "text", "partial_json", "thinking", "signature", "stop_reason") {
		if bytes.EqualFold(key, []byte(k)) {
			return true
		}
	}
	return false
}

// scanner is a minimal JSON reader over one event's data.
type scanner struct {
	b []byte
	i int
}

func (p *scanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *scanner) consume(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// key reads an object key and its colon; only plain ASCII keys are taken.
// The key aliases the data.
func (p *scanner) key() ([]byte, bool) {
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
			return nil, false // escapes, control bytes, non-ASCII: encoding/json decides
		}
	}
	p.i += end + 2
	if !p.consume(':') {
		return nil, false
	}
	return raw, true
}

// str reads a string value; one with an escape is decoded by
// encoding/json.
func (p *scanner) str() (string, bool) {
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	start := p.i
	escaped := false
	ascii := true
	for j := p.i + 1; j < len(p.b); j++ {
		c := p.b[j]
		switch {
		case c == '\\':
			escaped = true
			j++ // skip the escaped byte (an escaped quote must not end the string)
		case c == '"':
			p.i = j + 1
			raw := p.b[start+1 : j]
			if escaped {
				var s string
				if json.Unmarshal(p.b[start:j+1], &s) != nil {
					return "", false
				}
				return s, true
			}
			if !ascii && !utf8.Valid(raw) {
				return "", false // encoding/json would replace the bad bytes
			}
			return intern(raw), true
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

// integer reads a plain integer (no fraction, no exponent).
func (p *scanner) integer() (int64, bool) {
	p.ws()
	j := p.i
	if j < len(p.b) && p.b[j] == '-' {
		j++
	}
	digits := j
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		j++
	}
	if j == digits || j-digits > 1 && p.b[digits] == '0' {
		return 0, false
	}
	if j < len(p.b) && (p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(p.b[p.i:j]), 10, 64)
	if err != nil {
		return 0, false
	}
	p.i = j
	return n, true
}

// delta reads the delta object of a content_block_delta.
func (p *scanner) delta(d *eventDelta) bool {
	// Not reset: a repeated "delta" key merges into the same fields, as
	// with encoding/json.
	if !p.consume('{') {
		return false
	}
	first := true
	for {
		if p.consume('}') {
			return true
		}
		if !first && !p.consume(',') {
			return false
		}
		first = false
		key, ok := p.key()
		if !ok {
			return false
		}
		var field *string
		switch string(key) {
		case "type":
			field = &d.Type
		case "text":
			field = &d.Text
		case "partial_json":
			field = &d.PartialJSON
		case "thinking":
			field = &d.Thinking
		case "signature":
			field = &d.Signature
		case "stop_reason":
			field = &d.StopReason
		default:
			if foldsToKnown(key) || !p.skip() {
				return false
			}
			continue
		}
		if *field, ok = p.str(); !ok {
			return false
		}
	}
}

// skip passes over one value of a key the fast path ignores (a key of a
// later API version). Only strings are skipped; anything else (a
// citation's object) goes to encoding/json.
func (p *scanner) skip() bool {
	_, ok := p.str()
	return ok
}
