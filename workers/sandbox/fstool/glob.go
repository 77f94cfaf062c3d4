package fstool

import (
	"path"
	"strings"
)

// Bounds of a glob pattern.
const (
	// maxAlternatives bounds the patterns one brace expansion yields.
	maxAlternatives = 64
	// maxGlobSegments bounds the names of one pattern.
	maxGlobSegments = 128
)

// glob is a compiled glob: one or more alternatives (from "{a,b}"), each a
// list of name patterns. A name pattern is path.Match syntax ('*', '?',
// '[...]', '\' escapes) matched against one name; the name pattern "**"
// matches any number of names, none included. The pattern is anchored:
// it matches a whole slash-separated path.
type glob struct {
	alts [][]string
}

// globState is where a walk stands in each alternative: for alternative
// i, the pattern positions p such that the alternative's first p names
// match the path so far. A walk computes a directory's state from its
// parent's ([glob.step]) instead of matching every path from scratch.
type globState [][]int

// compileGlob checks and compiles p. Empty names ("a//b") are dropped; a
// leading '/' is kept off (patterns are relative).
func compileGlob(p string) (*glob, error) {
	if err := checkPattern(p); err != nil {
		return nil, err
	}
	if strings.IndexByte(p, 0) >= 0 {
		return nil, invalid("pattern contains a NUL byte")
	}
	alts, err := expandBraces(p)
	if err != nil {
		return nil, err
	}
	g := &glob{}
	for _, a := range alts {
		segs := splitGlob(a)
		if len(segs) == 0 {
			return nil, invalid("pattern %.256q matches nothing", p)
		}
		if len(segs) > maxGlobSegments {
			return nil, invalid("pattern has more than %d names", maxGlobSegments)
		}
		for _, s := range segs {
			if _, err := path.Match(s, ""); err != nil {
				return nil, invalid("pattern %.256q: %v in %.64q", p, err, s)
			}
		}
		g.alts = append(g.alts, segs)
	}
	return g, nil
}

// splitGlob splits a pattern into names, dropping empty ones and ".".
func splitGlob(p string) []string {
	var segs []string
	for s := range strings.SplitSeq(p, "/") {
		if s == "" || s == "." {
			continue
		}
		// Adjacent "**" add nothing; collapsing them keeps states small.
		if s == "**" && len(segs) > 0 && segs[len(segs)-1] == "**" {
			continue
		}
		segs = append(segs, s)
	}
	return segs
}

// expandBraces expands "{a,b}" alternatives, nested or not, into at most
// maxAlternatives patterns. A '\' escapes the next byte (so "\{" is a
// literal brace, which path.Match then reads as '{'). Braces must
// balance; a group without a comma ("{a}") expands to its body ("a").
func expandBraces(p string) ([]string, error) {
	depth := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			if depth == 0 {
				return nil, invalid("pattern %.256q has an unbalanced '}'", p)
			}
			depth--
		}
	}
	if depth != 0 {
		return nil, invalid("pattern %.256q has an unbalanced '{'", p)
	}
	return expand(p)
}

// expand is expandBraces of a pattern whose braces balance.
func expand(p string) ([]string, error) {
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
			depth--
			if depth == 0 {
				return expandGroup(p, open, i)
			}
		}
	}
	return []string{p}, nil
}

// expandGroup expands p, whose first outermost group is p[open:close+1]:
// the prefix before it, then each alternative of the group, then each
// expansion of the suffix after it. The alternatives and the suffix
// expand on their own (the braces of each balance) and are combined
// after: expanding "prefix+alternative+suffix" whole would expand the
// suffix again for every alternative, which is exponential in the number
// of groups even when duplicates leave one pattern ("{a,a}{a,a}…").
func expandGroup(p string, open, close int) ([]string, error) {
	prefix, body, suffix := p[:open], p[open+1:close], p[close+1:]
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, body[start:i])
				start = i + 1
			}
		}
	}
	parts = append(parts, body[start:])
	var heads []string
	for _, part := range parts {
		more, err := expand(part)
		if err != nil {
			return nil, err
		}
		for _, m := range more {
			if !contains(heads, m) {
				heads = append(heads, m)
			}
		}
		if len(heads) > maxAlternatives {
			return nil, tooManyAlternatives()
		}
	}
	tails, err := expand(suffix)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range heads {
		for _, t := range tails {
			if m := prefix + h + t; !contains(out, m) {
				out = append(out, m)
				if len(out) > maxAlternatives {
					return nil, tooManyAlternatives()
				}
			}
		}
	}
	return out, nil
}

func tooManyAlternatives() error {
	return invalid("pattern expands to more than %d alternatives", maxAlternatives)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// start is the state before any name: every alternative at position 0,
// with the "**" that match no name skipped.
func (g *glob) start() globState {
	st := make(globState, len(g.alts))
	for i, segs := range g.alts {
		st[i] = closure(segs, []int{0})
	}
	return st
}

// closure adds, for each position at a "**", the position after it ("**"
// matching no name).
func closure(segs []string, pos []int) []int {
	for k := 0; k < len(pos); k++ {
		p := pos[k]
		if p < len(segs) && segs[p] == "**" && !containsInt(pos, p+1) {
			pos = append(pos, p+1)
		}
	}
	return pos
}

func containsInt(list []int, n int) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}

// step is the state after the name.
func (g *glob) step(st globState, name string) globState {
	next := make(globState, len(g.alts))
	for i, segs := range g.alts {
		var pos []int
		for _, p := range st[i] {
			if p >= len(segs) {
				continue
			}
			if segs[p] == "**" {
				if !containsInt(pos, p) {
					pos = append(pos, p)
				}
				continue
			}
			if ok, _ := path.Match(segs[p], name); ok && !containsInt(pos, p+1) {
				pos = append(pos, p+1)
			}
		}
		next[i] = closure(segs, pos)
	}
	return next
}

// matched reports whether a path in state st matches the glob.
func (g *glob) matched(st globState) bool {
	for i, segs := range g.alts {
		if containsInt(st[i], len(segs)) {
			return true
		}
	}
	return false
}

// alive reports whether a path below a directory in state st can still
// match, so a walk prunes what cannot.
func (g *glob) alive(st globState) bool {
	for i, segs := range g.alts {
		for _, p := range st[i] {
			if p < len(segs) {
				return true
			}
		}
	}
	return false
}

// match reports whether the slash-separated relative path name matches.
func (g *glob) match(name string) bool {
	st := g.start()
	for s := range strings.SplitSeq(name, "/") {
		if s == "" || s == "." {
			continue
		}
		st = g.step(st, s)
		if !g.alive(st) && !g.matched(st) {
			return false
		}
	}
	return g.matched(st)
}

// literalPrefix is the leading names that every alternative shares and
// that hold no pattern syntax: a walk starts there instead of at the top.
// At least one name of each alternative stays out of it.
func (g *glob) literalPrefix() []string {
	var prefix []string
	for k := 0; ; k++ {
		var name string
		for i, segs := range g.alts {
			if k >= len(segs)-1 || !isLiteral(segs[k]) || (i > 0 && segs[k] != name) {
				return prefix
			}
			name = segs[k]
		}
		prefix = append(prefix, name)
	}
}

// trim returns the glob without its first n names (a literal prefix).
func (g *glob) trim(n int) *glob {
	t := &glob{alts: make([][]string, len(g.alts))}
	for i, segs := range g.alts {
		t.alts[i] = segs[n:]
	}
	return t
}

func isLiteral(s string) bool { return !strings.ContainsAny(s, `*?[\`) && s != ".." }
