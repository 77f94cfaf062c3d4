package fstool

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// normalize never answers a path outside the root, and answers an
// absolute path inside it as the matching relative one.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"", ".", "a", "../x", "a/../../x", "/r/root", "/r/root/a", "/r/rootx", "/r/alias/b",
		"/proc/self/root/r/root/a", "a\x00b", "./a/./b/", "//r//root//a", "a/..", "..", "/", "\\..\\x", "a/b/../../.."} {
		f.Add(s)
	}
	roots := []string{"/r/root", "/r/alias"}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := normalize(roots, p)
		if err != nil {
			if rel != "" {
				t.Fatalf("error %v with a path %q", err, rel)
			}
			return
		}
		if rel != "." && !filepath.IsLocal(rel) {
			t.Fatalf("normalize(%q) = %q: not local", p, rel)
		}
		for _, r := range roots {
			j := filepath.Join(r, rel)
			if j != r && !strings.HasPrefix(j, r+"/") {
				t.Fatalf("normalize(%q) = %q: %q is outside %q", p, rel, j, r)
			}
		}
		if rel != filepath.Clean(rel) {
			t.Fatalf("normalize(%q) = %q: not clean", p, rel)
		}
		if filepath.IsAbs(p) {
			c := filepath.Clean(p)
			if filepath.Join(roots[0], rel) != c && filepath.Join(roots[1], rel) != c {
				t.Fatalf("normalize(%q) = %q names another file", p, rel)
			}
		}
	})
}

// refMatch is the obvious (exponential) definition of a segment glob
// with "**": the fuzz compares the state machine against it.
func refMatch(p, n []string) bool {
	if len(p) == 0 {
		return len(n) == 0
	}
	if p[0] == "**" {
		return refMatch(p[1:], n) || (len(n) > 0 && refMatch(p, n[1:]))
	}
	if len(n) == 0 {
		return false
	}
	ok, _ := path.Match(p[0], n[0])
	return ok && refMatch(p[1:], n[1:])
}

func splitName(n string) []string {
	var out []string
	for s := range strings.SplitSeq(n, "/") {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}

// The glob matcher agrees with refMatch on every alternative, never panics
// on any pattern, and its pruning (alive) never cuts a path that matches.
func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{
		{"**/*.go", "a/b/c.go"}, {"**", ""}, {"a/**/b/**/c", "a/b/x/b/c"}, {"*.{go,md}", "x.md"},
		{"{a,{b,c}}/d", "c/d"}, {"[a-", "a"}, {`\*`, "*"}, {"a/**", "a"}, {"**/**/x", "x"},
		{"{,a}b", "b"}, {"a{b", "ab"}, {"x/../y", "y"}, {"?", "é"}, {"[^/]", "a"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		g, err := compileGlob(pattern)
		if err != nil {
			return
		}
		if len(g.alts) == 0 || len(g.alts) > maxAlternatives {
			t.Fatalf("%q: %d alternatives", pattern, len(g.alts))
		}
		segs := splitName(name)
		if len(segs) > 12 {
			return
		}
		want := false
		for _, alt := range g.alts {
			if len(alt) > 12 {
				return // refMatch would take too long
			}
			want = want || refMatch(alt, segs)
		}
		if got := g.match(name); got != want {
			t.Fatalf("match(%q, %q) = %v, want %v (alternatives %q)", pattern, name, got, want, g.alts)
		}
		if !want {
			return
		}
		st := g.start()
		for i, s := range segs {
			if !g.alive(st) {
				t.Fatalf("%q pruned at %q before matching %q", pattern, strings.Join(segs[:i], "/"), name)
			}
			st = g.step(st, s)
		}
		if !g.matched(st) {
			t.Fatalf("%q: the walk states disagree with match on %q", pattern, name)
		}
	})
}

// readLines keeps its invariants on any content and window: never more
// lines than asked, a line count equal to the file's, and (with bounds
// large enough) exactly the file's lines.
func FuzzReadLines(f *testing.F) {
	f.Add([]byte("a\nb\n"), 0, 0)
	f.Add([]byte("a\r\nb"), 2, 1)
	f.Add([]byte(""), 1, 1)
	f.Add([]byte("\n\n\n"), 2, 5)
	f.Add(bytes.Repeat([]byte("é"), 40), 0, 0)
	f.Fuzz(func(t *testing.T, data []byte, offset, limit int) {
		if offset < 0 || limit < 0 || offset > 1<<20 || limit > 1<<20 {
			return
		}
		for _, maxLine := range []int{1 << 20, 7} {
			tl := &tools{o: options{maxLineBytes: maxLine, maxAnswerBytes: 1 << 20}}
			var res ReadResult
			err := tl.readLines(context.Background(), bytes.NewReader(data), ReadRequest{Offset: offset, Limit: limit}, &res)
			if err != nil {
				t.Fatal(err)
			}
			if res.Binary {
				return
			}
			lines := strings.Split(string(data), "\n")
			if len(data) > 0 && data[len(data)-1] == '\n' {
				lines = lines[:len(lines)-1]
			}
			if len(data) == 0 {
				lines = nil
			}
			if res.TotalLines != len(lines) {
				t.Fatalf("total %d, want %d", res.TotalLines, len(lines))
			}
			wantLimit := limit
			if wantLimit == 0 {
				wantLimit = DefaultReadLimit
			}
			if res.LinesRead > wantLimit {
				t.Fatalf("%d lines read, limit %d", res.LinesRead, wantLimit)
			}
			var shown []string
			if res.Content != "" {
				shown = strings.Split(res.Content, "\n")
			}
			if len(shown) != res.LinesRead {
				t.Fatalf("%d lines in content, lines_read %d", len(shown), res.LinesRead)
			}
			first := max(offset, 1)
			for i, s := range shown {
				n := first + i
				prefix := fmt.Sprintf("%6d\t", n)
				if !strings.HasPrefix(s, prefix) {
					t.Fatalf("line %d is %q", n, s)
				}
				if maxLine == 1<<20 && s[len(prefix):] != lines[n-1] {
					t.Fatalf("line %d is %q, want %q", n, s[len(prefix):], lines[n-1])
				}
			}
		}
	})
}
