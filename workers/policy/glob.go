package policy

import (
	"fmt"
	"strings"

	"github.com/iii-on-nats/iii/subjects"
)

// glob is a compiled function id pattern: '*' matches any run of bytes
// (including "::" and the empty run); every other byte matches itself. The
// pattern is anchored at both ends.
type glob struct {
	pattern string
	kind    globKind
	lit     string // the literal part for the fast kinds
}

type globKind uint8

const (
	globExact  globKind = iota // no star
	globPrefix                 // "lit*"
	globAny                    // "*"
	globFull                   // anything else
)

// compileGlob validates p: not empty, no leading '!', and with each '*'
// replaced by a letter a valid function id (so no whitespace, control
// characters or empty segments).
func compileGlob(p string) (glob, error) {
	if p == "" {
		return glob{}, fmt.Errorf("empty function pattern")
	}
	if strings.HasPrefix(p, "!") {
		return glob{}, fmt.Errorf("function pattern %q starts with '!': deny with a \"!fn\" string rule or action: deny", p)
	}
	if err := subjects.ValidateFunctionID(strings.ReplaceAll(p, "*", "x")); err != nil {
		return glob{}, fmt.Errorf("function pattern %q is not a function id with '*' wildcards: %s", p, strings.TrimPrefix(err.Error(), "subjects: "))
	}
	g := glob{pattern: p, kind: globFull}
	switch n := strings.Count(p, "*"); {
	case n == 0:
		g.kind, g.lit = globExact, p
	case strings.Trim(p, "*") == "":
		g.kind = globAny
	case n == 1 && strings.HasSuffix(p, "*"):
		g.kind, g.lit = globPrefix, p[:len(p)-1]
	}
	return g, nil
}

func (g *glob) match(s string) bool {
	switch g.kind {
	case globExact:
		return s == g.lit
	case globPrefix:
		return strings.HasPrefix(s, g.lit)
	case globAny:
		return true
	}
	return wildcard(g.pattern, s)
}

// wildcard matches s against a pattern whose only metacharacter is '*',
// anchored: the classic two-pointer walk that backtracks to the last star,
// O(len(p)·len(s)) at worst.
func wildcard(p, s string) bool {
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(p) && p[pi] == s[si]:
			pi++
			si++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
