package agent

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMatchPattern(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p, id string
		want  bool
	}{
		{"fs::read", "fs::read", true},
		{"fs::read", "fs::readx", false},
		{"fs::read", "xfs::read", false},
		{"fs::*", "fs::read", true},
		{"fs::*", "fs::", true},
		{"fs::*", "fsx::read", false},
		{"*::read", "fs::read", true},
		{"*::read", "fs::read::x", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "acb", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"**", "anything", true},
		{"a**b", "ab", true},
		{"*a*", "xax", true},
		{"*a*", "xyz", false},
		{"ab*ba", "aba", false},
		{"ab*ba", "abba", true},
	}
	for _, tt := range tests {
		if got := MatchPattern(tt.p, tt.id); got != tt.want {
			t.Errorf("MatchPattern(%q, %q) = %v, want %v", tt.p, tt.id, got, tt.want)
		}
	}
}

func TestValidatePattern(t *testing.T) {
	t.Parallel()
	// Every run of '*' alone matches every function id, as a lone "*"
	// does: "**" was accepted and approved everything.
	for _, p := range []string{"*", "**", "***", "", "a b", "x\ny"} {
		if ValidatePattern(p) == nil {
			t.Errorf("ValidatePattern(%q) accepted", p)
		}
	}
	// Kept: each misses some id ("*::*" those without "::").
	for _, p := range []string{"fs::*", "shell::exec", "*::read", "*::*", "**::**", "a*", "*a*"} {
		if err := ValidatePattern(p); err != nil {
			t.Errorf("ValidatePattern(%q) = %v", p, err)
		}
	}
	if !IsHumanOnly("approval::resolve") || IsHumanOnly("approval::list_pending") {
		t.Error("IsHumanOnly is wrong")
	}
}

// FuzzValidatePattern: a pattern ValidatePattern accepts misses some valid
// function id, so no always_allow list approves everything.
func FuzzValidatePattern(f *testing.F) {
	for _, p := range []string{"*", "**", "*::*", "a", "*a*", "fs::*"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if ValidatePattern(p) != nil {
			return
		}
		// p has a character c other than '*', which every id it matches
		// contains; an id of one other letter does not.
		c, _ := utf8.DecodeRuneInString(strings.Trim(p, "*"))
		id := "a"
		if c == 'a' {
			id = "b"
		}
		if MatchPattern(p, id) {
			t.Fatalf("ValidatePattern accepted %q, which matches %q", p, id)
		}
	})
}

func FuzzMatchPattern(f *testing.F) {
	f.Add("a*b", "axb")
	f.Add("*", "")
	f.Fuzz(func(t *testing.T, p, id string) {
		got := MatchPattern(p, id)
		if p == id && !got {
			t.Fatalf("%q does not match itself", p)
		}
		if !utf8.ValidString(p) || !utf8.ValidString(id) {
			return // the reference below takes UTF-8 only
		}
		if want := matchByRegexp(p, id); got != want {
			t.Fatalf("MatchPattern(%q, %q) = %v, the regexp of the pattern says %v", p, id, got, want)
		}
	})
}

// matchByRegexp is MatchPattern's meaning written as a regular expression:
// the parts between '*' literal, '*' any run of bytes, anchored.
func matchByRegexp(p, id string) bool {
	parts := strings.Split(p, "*")
	for i, q := range parts {
		parts[i] = regexp.QuoteMeta(q)
	}
	return regexp.MustCompile(`(?s)\A` + strings.Join(parts, ".*") + `\z`).MatchString(id)
}

func TestMatchPatternAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { MatchPattern("fs::*::x*y", "fs::read::xzy") }); n != 0 {
		t.Errorf("MatchPattern allocates %v times a call", n)
	}
}
