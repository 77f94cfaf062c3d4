package fstool

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
)

func (t *tools) glob(ctx context.Context, req GlobRequest) (GlobResult, error) {
	return call(ctx, t, "glob", req.Path, func(w *workdir, base string) (GlobResult, error) {
		if info, _, err := w.lstat(base); err != nil {
			return GlobResult{}, err
		} else if !info.IsDir() {
			return GlobResult{}, invalid("path %.256q is not a directory", base)
		}
		g, start, err := t.anchor(w, base, req.Pattern)
		if err != nil {
			return GlobResult{}, err
		}
		res := GlobResult{Matches: []string{}}
		info, _, err := w.lstat(start)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return res, nil
		case err != nil:
			return GlobResult{}, err
		case !info.IsDir():
			return res, nil
		}
		k := newWalker(w, &t.o)
		size := 0
		err = walk(ctx, k, start, g.start(), func(rel string, d fs.DirEntry, st globState) (globState, bool, bool) {
			next := g.step(st, d.Name())
			if !d.IsDir() && g.matched(next) {
				name := validName(rel)
				if len(res.Matches) == t.o.maxEntries || size+len(name)+4 > t.o.maxAnswerBytes {
					res.Truncated = true
					return nil, false, true
				}
				res.Matches = append(res.Matches, name)
				size += len(name) + 4 // the quotes and comma of JSON
			}
			return next, g.alive(next), false
		})
		if err != nil {
			return GlobResult{}, err
		}
		res.Truncated = res.Truncated || k.truncated
		return res, nil
	})
}

// anchor compiles pattern taken from the directory base (root-relative)
// and returns it relative to the directory the walk starts from: base
// plus the pattern's literal leading names. An absolute pattern is taken
// from the root, like an absolute path. A pattern that leaves the root
// ("../*") is forbidden.
func (t *tools) anchor(w *workdir, base, pattern string) (*glob, string, error) {
	g, err := compileGlob(pattern)
	if err != nil {
		return nil, "", err
	}
	// Normalise every alternative as a path, so ".." and absolute forms
	// are judged like the paths of the other tools.
	for i, segs := range g.alts {
		p := strings.Join(segs, "/")
		if !strings.HasPrefix(pattern, "/") {
			p = path.Join(base, p)
		} else {
			p = "/" + p
		}
		rel, err := w.rel(p)
		if err != nil {
			return nil, "", err
		}
		g.alts[i] = splitGlob(filepath.ToSlash(rel))
		if len(g.alts[i]) == 0 {
			return nil, "", invalid("pattern %.256q names the working directory itself, not files in it", pattern)
		}
	}
	prefix := g.literalPrefix()
	start := "."
	if len(prefix) > 0 {
		start = strings.Join(prefix, "/")
	}
	return g.trim(len(prefix)), start, nil
}
