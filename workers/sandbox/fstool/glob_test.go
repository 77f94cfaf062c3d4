package fstool

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Brace expansion costs time linear in the groups of a pattern, whatever
// duplicates collapse: "{a,a}" repeated was expanded 2^n times (a
// 150-byte pattern held a core for minutes; the validation runs before
// any deadline is looked at). Expanded exponentially, each short case
// takes seconds and the longest never ends.
func TestExpandBracesLinear(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, pattern string
		alts          int // 0: invalid_payload
	}{
		{"duplicates", strings.Repeat("{a,a}", 24), 1},
		{"empty alternatives", strings.Repeat("{,}", 24), 1},
		{"nested duplicates", strings.Repeat("{{a,a},{a,a}}", 12), 1},
		{"longest", strings.Repeat("{,}", MaxPatternBytes/3), 1},
		{"too many", strings.Repeat("{a,b}", 700), 0},
		{"just fits", strings.Repeat("{a,b}", 6) + strings.Repeat("{x,x}", 3), 64},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			began := time.Now()
			alts, err := expandBraces(c.pattern)
			if took := time.Since(began); took > 2*time.Second {
				t.Fatalf("%d-byte pattern took %v", len(c.pattern), took)
			}
			if c.alts == 0 {
				var we *wire.Error
				if !errors.As(err, &we) || we.Code != wire.CodeInvalidPayload {
					t.Fatalf("err %v, want invalid_payload", err)
				}
				return
			}
			if err != nil || len(alts) != c.alts {
				t.Fatalf("%d alternatives, err %v; want %d", len(alts), err, c.alts)
			}
		})
	}
}

// The expansion gives the patterns, in the order, that expanding each
// alternative with the rest of the pattern gives (refExpand).
func TestExpandBracesAgrees(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		"a", "{a,b}", "{a,{b,c}}/d", "x{a,b}y{c,d}z", "{,a}b", "{a}", "{a,a}{a,b}", `\{a,b}`, `{a\,b,c}`,
		"{a,ab}{b,}", "{{a,b},{c,{d,e}}}{1,2}", "*.{go,md}", "{a,b", "a}", "{a,b}}", `{a,\}}`, "{}", "{,}{,}",
		"{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}", "{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}", "{aa,a}{a,aa}",
	} {
		got, gerr := expandBraces(p)
		want, werr := refExpand(p)
		if (gerr == nil) != (werr == nil) || !slices.Equal(got, want) {
			t.Errorf("expandBraces(%q) = %q, %v; want %q, %v", p, got, gerr, want, werr)
		}
	}
}

// FuzzExpandBraces checks expandBraces against refExpand on short
// patterns (refExpand is exponential).
func FuzzExpandBraces(f *testing.F) {
	for _, s := range []string{"{a,{b,c}}/d", "{,a}b", `{a\,b,c}`, "{aa,a}{a,aa}", "{a,b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if len(p) > 40 {
			return
		}
		got, gerr := expandBraces(p)
		want, werr := refExpand(p)
		if (gerr == nil) != (werr == nil) || !slices.Equal(got, want) {
			t.Fatalf("expandBraces(%q) = %q, %v; want %q, %v", p, got, gerr, want, werr)
		}
	})
}

// refExpand is the definition of brace expansion: expand the first
// outermost group by expanding each of its alternatives with the prefix
// and the suffix, whole; duplicates dropped, more than maxAlternatives
// an error.
func refExpand(p string) ([]string, error) {
	open, depth := -1, 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			if depth == 0 {
				open = i
			}
			depth++
		case '}':
			if depth == 0 {
				return nil, errors.New("unbalanced '}'")
			}
			depth--
			if depth == 0 {
				prefix, body, suffix := p[:open], p[open+1:i], p[i+1:]
				var parts []string
				d, start := 0, 0
				for j := 0; j < len(body); j++ {
					switch body[j] {
					case '\\':
						j++
					case '{':
						d++
					case '}':
						d--
					case ',':
						if d == 0 {
							parts = append(parts, body[start:j])
							start = j + 1
						}
					}
				}
				var out []string
				for _, part := range append(parts, body[start:]) {
					more, err := refExpand(prefix + part + suffix)
					if err != nil {
						return nil, err
					}
					for _, m := range more {
						if !slices.Contains(out, m) {
							out = append(out, m)
						}
					}
					if len(out) > maxAlternatives {
						return nil, errors.New("too many")
					}
				}
				return out, nil
			}
		}
	}
	if depth != 0 {
		return nil, errors.New("unbalanced '{'")
	}
	return []string{p}, nil
}
