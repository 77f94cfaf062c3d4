package redact

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// MinExcerpt is the smallest max an excerpt honors: a smaller (or negative)
// max is raised to it, so an excerpt always shows the start of the value.
const MinExcerpt = 16

// ellipsis ends an excerpt that was cut.
const ellipsis = "…"

// Excerpt returns the compact JSON of [Value](v), shortened to at most
// maxBytes bytes (at least [MinExcerpt]). Before the JSON is cut, each string and key
// longer than the max string keeps its first bytes (on a rune boundary) and
// ends with "…(+K bytes)", and each list or object keeps its first max-items
// entries (objects in key order), so one long value cannot push the rest out.
// When the JSON still does not fit, it is cut on a rune boundary and ends
// with "…"; otherwise it is valid JSON. The result is always valid UTF-8.
// Secrets are redacted before anything is clipped, so a clipped secret
// cannot leak its first bytes.
func Excerpt(v any, maxBytes int, opts ...Option) string {
	return lenient(opts).Excerpt(v, maxBytes)
}

// Excerpt is [Excerpt] with r's options.
func (r *Redactor) Excerpt(v any, maxBytes int) string {
	maxBytes = max(maxBytes, MinExcerpt)
	w := excerptWriter{r: r, limit: maxBytes, buf: make([]byte, 0, min(maxBytes+64, 4096))}
	w.value(v, 0)
	if len(w.buf) <= maxBytes {
		return string(w.buf)
	}
	cut := maxBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(w.buf[cut]) {
		cut--
	}
	return string(w.buf[:cut]) + ellipsis
}

// excerptWriter appends the redacted, clipped compact JSON of a value and
// stops writing once the buffer is past the limit (the excerpt is cut there
// anyway).
type excerptWriter struct {
	r     *Redactor
	limit int
	buf   []byte
}

func (w *excerptWriter) full() bool { return len(w.buf) > w.limit }

func (w *excerptWriter) value(v any, level int) {
	if w.full() {
		return
	}
	switch x := v.(type) {
	case nil:
		w.buf = append(w.buf, "null"...)
	case bool:
		w.buf = strconv.AppendBool(w.buf, x)
	case string:
		w.string(w.clip(w.r.redactString(x)))
	case json.Number:
		if isNumber(string(x)) {
			w.buf = append(w.buf, x...)
		} else {
			w.string(w.clip(w.r.redactString(string(x))))
		}
	case float64:
		w.float(x, 64)
	case float32:
		w.float(float64(x), 32)
	case int:
		w.buf = strconv.AppendInt(w.buf, int64(x), 10)
	case int8:
		w.buf = strconv.AppendInt(w.buf, int64(x), 10)
	case int16:
		w.buf = strconv.AppendInt(w.buf, int64(x), 10)
	case int32:
		w.buf = strconv.AppendInt(w.buf, int64(x), 10)
	case int64:
		w.buf = strconv.AppendInt(w.buf, x, 10)
	case uint:
		w.buf = strconv.AppendUint(w.buf, uint64(x), 10)
	case uint8:
		w.buf = strconv.AppendUint(w.buf, uint64(x), 10)
	case uint16:
		w.buf = strconv.AppendUint(w.buf, uint64(x), 10)
	case uint32:
		w.buf = strconv.AppendUint(w.buf, uint64(x), 10)
	case uint64:
		w.buf = strconv.AppendUint(w.buf, x, 10)
	case map[string]any:
		if x == nil {
			w.buf = append(w.buf, "null"...)
			return
		}
		if level >= w.r.o.maxDepth {
			w.string(Elided)
			return
		}
		w.object(w.r.entries(stringKeyed(x)), level)
	case map[any]any:
		if x == nil {
			w.buf = append(w.buf, "null"...)
			return
		}
		if level >= w.r.o.maxDepth {
			w.string(Elided)
			return
		}
		w.object(w.r.entries(anyKeyed(x)), level)
	case []any:
		if x == nil {
			w.buf = append(w.buf, "null"...)
			return
		}
		w.list(x, level)
	default:
		w.value(convert(v), level)
	}
}

// object appends the entries of a map, sorted by their output keys.
func (w *excerptWriter) object(es []entry, level int) {
	w.buf = append(w.buf, '{')
	pair := w.r.pairName(es)
	for i, e := range es {
		if w.full() {
			return
		}
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		if i == w.r.o.maxItems {
			w.string(ellipsis)
			w.buf = append(w.buf, ':')
			w.string("+" + strconv.Itoa(len(es)-i) + " keys")
			break
		}
		w.string(w.clip(e.out))
		w.buf = append(w.buf, ':')
		if k := pairKey(e, pair); w.r.IsSecretKey(k) {
			w.value(secretValue(k, e.value), level+1)
		} else {
			w.value(e.value, level+1)
		}
	}
	w.buf = append(w.buf, '}')
}

func (w *excerptWriter) list(x []any, level int) {
	if level >= w.r.o.maxDepth {
		w.string(Elided)
		return
	}
	w.buf = append(w.buf, '[')
	for i, e := range x {
		if w.full() {
			return
		}
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		if i == w.r.o.maxItems {
			w.string(ellipsis + "(+" + strconv.Itoa(len(x)-i) + " items)")
			break
		}
		w.value(e, level+1)
	}
	w.buf = append(w.buf, ']')
}

// clip shortens s to the max string, on a rune boundary, noting how many
// bytes were left out.
func (w *excerptWriter) clip(s string) string {
	n := w.r.o.maxString
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…(+" + strconv.Itoa(len(s)-n) + " bytes)"
}

// string appends s as a JSON string.
func (w *excerptWriter) string(s string) {
	w.buf = appendJSONString(w.buf, s)
}

// float appends f the way encoding/json does; NaN and ±Inf, which JSON
// cannot hold, become strings.
func (w *excerptWriter) float(f float64, bits int) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		w.string(strconv.FormatFloat(f, 'g', -1, bits))
		return
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b := strconv.AppendFloat(w.buf, f, format, -1, bits)
	if format == 'e' { // 1e-07 → 1e-7, as encoding/json writes it
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	w.buf = b
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: control characters escaped,
// invalid UTF-8 replaced by U+FFFD, and U+2028/U+2029 escaped, as
// encoding/json does (but '<', '>' and '&' are kept: an excerpt is read, not
// embedded in HTML).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case '\u2028':
				b = append(b, `\u2028`...)
			case '\u2029':
				b = append(b, `\u2029`...)
			default:
				b = append(b, `\ufffd`...)
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
