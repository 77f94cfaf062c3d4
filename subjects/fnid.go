package subjects

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// FunctionPrefix is the subject prefix of every function; the encoded
	// segments of the id follow it.
	FunctionPrefix = "iii.fn."
	// MaxFunctionIDLen bounds a function id in bytes.
	MaxFunctionIDLen = 256
	// fnEscape starts an escape in a function subject token.
	fnEscape = '~'
	// SegmentSep separates the segments of a function id.
	SegmentSep = "::"
)

const hexDigits = "0123456789ABCDEF"

// plain reports whether b passes through the escaping unchanged.
func plain(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-'
}

// ValidateFunctionID checks that id is a well-formed function id: 1 to
// [MaxFunctionIDLen] bytes of valid UTF-8, no whitespace or control
// characters, and no empty "::"-separated segment.
func ValidateFunctionID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidFunctionID)
	}
	if len(id) > MaxFunctionIDLen {
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalidFunctionID, MaxFunctionIDLen)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidFunctionID)
	}
	for _, r := range id {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%w: %q contains whitespace or a control character", ErrInvalidFunctionID, id)
		}
	}
	for seg := range strings.SplitSeq(id, SegmentSep) {
		if seg == "" {
			return fmt.Errorf("%w: %q has an empty segment", ErrInvalidFunctionID, id)
		}
	}
	return nil
}

// FunctionSubject maps a function id onto its NATS subject
// ("run::start" → "iii.fn.run.start"). It validates id first.
func FunctionSubject(id string) (string, error) {
	if err := ValidateFunctionID(id); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(FunctionPrefix) + len(id) + 8)
	b.WriteString(FunctionPrefix)
	first := true
	for seg := range strings.SplitSeq(id, SegmentSep) {
		if !first {
			b.WriteByte('.')
		}
		first = false
		escapeInto(&b, seg, fnEscape)
	}
	return b.String(), nil
}

// MustFunctionSubject is [FunctionSubject] for ids known at compile time; it
// panics on an invalid id and is meant for package-level variables only.
func MustFunctionSubject(id string) string {
	s, err := FunctionSubject(id)
	if err != nil {
		panic(err)
	}
	return s
}

// FunctionID maps a function subject back onto its id. It refuses subjects
// outside [FunctionPrefix], empty tokens, wildcards, malformed escapes and
// any subject other than the one [FunctionSubject] makes of the id, so
// that two subjects never name the same function.
func FunctionID(subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, FunctionPrefix)
	if !ok || rest == "" {
		return "", fmt.Errorf("%w: %q", ErrNotFunctionSubject, subject)
	}
	var b strings.Builder
	b.Grow(len(rest) + 8)
	for i, tok := range strings.Split(rest, ".") {
		if i > 0 {
			b.WriteString(SegmentSep)
		}
		if err := unescapeInto(&b, tok, fnEscape); err != nil {
			return "", fmt.Errorf("%w: %q: %v", ErrNotFunctionSubject, subject, err)
		}
	}
	id := b.String()
	if err := ValidateFunctionID(id); err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrNotFunctionSubject, subject, err)
	}
	// Canonical tokens are not enough: an escaped ':' can rebuild a "::"
	// that [FunctionSubject] would have split ("a~3A~3Ab" and "a~3A.b"
	// decode to ids whose subjects are "a.b" and "a.~3Ab"). Only the
	// subject the id maps onto names it.
	if canon, _ := FunctionSubject(id); canon != subject {
		return "", fmt.Errorf("%w: %q is not the canonical subject of %q (%q)", ErrNotFunctionSubject, subject, id, canon)
	}
	return id, nil
}

func escapeInto(b *strings.Builder, s string, esc byte) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte(esc)
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0x0f])
	}
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// unescapeInto decodes one token. Only the canonical form is accepted (upper
// case hex, escapes only for bytes that need them), so decoding is the exact
// inverse of encoding and two subjects never name the same function.
func unescapeInto(b *strings.Builder, tok string, esc byte) error {
	if tok == "" {
		return fmt.Errorf("empty token")
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		if c != esc || i+2 >= len(tok) {
			return fmt.Errorf("byte %q at %d", c, i)
		}
		hi, ok1 := unhex(tok[i+1])
		lo, ok2 := unhex(tok[i+2])
		if !ok1 || !ok2 {
			return fmt.Errorf("bad escape at %d", i)
		}
		v := hi<<4 | lo
		if plain(v) {
			return fmt.Errorf("non-canonical escape at %d", i)
		}
		b.WriteByte(v)
		i += 2
	}
	return nil
}
