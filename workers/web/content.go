package web

import (
	"bytes"
	"mime"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html/charset"
	"golang.org/x/text/encoding"
)

// maxContentTypeLen bounds the content_type echoed back.
const maxContentTypeLen = 256

// mediaType is the lower-cased media type of a Content-Type value and its
// charset parameter; "" when it does not parse.
func mediaType(contentType string) (mt, cs string) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err == nil && strings.Count(mt, "/") != 1 {
		return "", ""
	}
	if err != nil {
		// A bare type with a broken parameter list still names its type.
		mt, _, _ = strings.Cut(contentType, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
		if strings.Count(mt, "/") != 1 {
			return "", ""
		}
		return mt, ""
	}
	return mt, params["charset"]
}

// textTypes are the non-text/* media types whose body is text.
var textTypes = map[string]bool{
	"application/json":                  true,
	"application/ndjson":                true,
	"application/x-ndjson":              true,
	"application/xml":                   true,
	"application/javascript":            true,
	"application/x-javascript":          true,
	"application/ecmascript":            true,
	"application/yaml":                  true,
	"application/x-yaml":                true,
	"application/toml":                  true,
	"application/sql":                   true,
	"application/graphql":               true,
	"application/x-sh":                  true,
	"application/x-tex":                 true,
	"application/x-www-form-urlencoded": true,
	"application/xhtml+xml":             true,
	"image/svg+xml":                     true,
}

// isText reports whether a body of media type mt is text.
func isText(mt string) bool {
	return strings.HasPrefix(mt, "text/") || textTypes[mt] ||
		strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml") || strings.HasSuffix(mt, "+yaml")
}

// isHTML reports whether a body of media type mt is HTML.
func isHTML(mt string) bool { return mt == "text/html" || mt == "application/xhtml+xml" }

// dropPartialRune removes an incomplete UTF-8 sequence that a cut left at
// the end of b.
func dropPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0; i++ {
		r, size := utf8.DecodeLastRune(b)
		if r != utf8.RuneError || size != 1 || b[len(b)-1] < utf8.RuneSelf {
			break
		}
		b = b[:len(b)-1]
	}
	return b
}

// decodeText converts body to valid UTF-8, best effort: a byte order mark
// wins, then the declared charset, then (for HTML) a <meta> charset; text
// with none is read as UTF-8. Bytes that do not decode become U+FFFD.
// HTML without a declaration is windows-1252 (the HTML default) only
// when it is not valid UTF-8: the charset package guesses from its first
// 1024 bytes alone, and would garble a UTF-8 page whose first non-ASCII
// character comes later.
// truncated says the body was cut, so a partial character at its end is
// dropped rather than replaced.
func decodeText(body []byte, contentType, mt, cs string, truncated bool) string {
	var (
		enc     encoding.Encoding
		name    string
		certain bool
	)
	switch {
	case isHTML(mt):
		enc, name, certain = charset.DetermineEncoding(body, contentType)
		if !certain && name == "windows-1252" && validUTF8(body, truncated) {
			enc, name = nil, "utf-8"
		}
	case hasBOM(body):
		enc, name, _ = charset.DetermineEncoding(body, "")
	case cs != "":
		enc, name = charset.Lookup(cs)
	}
	if truncated && (enc == nil || name == "utf-8") {
		body = dropPartialRune(body)
	}
	if enc != nil {
		if out, err := enc.NewDecoder().Bytes(body); err == nil {
			body = out
		}
	}
	body = bytes.TrimPrefix(body, []byte("\uFEFF"))
	return strings.ToValidUTF8(string(body), "\uFFFD")
}

// validUTF8 reports whether body is valid UTF-8, but for a partial
// character at its end when it was cut.
func validUTF8(body []byte, truncated bool) bool {
	if truncated {
		body = dropPartialRune(body)
	}
	return utf8.Valid(body)
}

var boms = [][]byte{{0xEF, 0xBB, 0xBF}, {0xFE, 0xFF}, {0xFF, 0xFE}}

func hasBOM(b []byte) bool {
	for _, bom := range boms {
		if bytes.HasPrefix(b, bom) {
			return true
		}
	}
	return false
}

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
