package fstool

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"time"
)

func entryType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return TypeFile
	case m.IsDir():
		return TypeDir
	case m&fs.ModeSymlink != 0:
		return TypeSymlink
	}
	return TypeOther
}

func (t *tools) ls(ctx context.Context, req LsRequest) (LsResult, error) {
	return call(ctx, t, "ls", req.Path, func(w *workdir, rel string) (LsResult, error) {
		info, _, err := w.lstat(rel)
		if err != nil {
			return LsResult{}, err
		}
		if !info.IsDir() {
			return LsResult{}, invalid("%.256q is not a directory; read a file with fs::read", rel)
		}
		k := newWalker(w, &t.o)
		entries, err := k.readDir(ctx, rel)
		if err != nil && len(entries) == 0 {
			return LsResult{}, err
		}
		slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		res := LsResult{Path: rel, Entries: make([]Entry, 0, min(len(entries), t.o.maxEntries)), Truncated: k.truncated}
		for _, d := range entries {
			if len(res.Entries) == t.o.maxEntries {
				res.Truncated = true
				break
			}
			if e := ctxErr(ctx); e != nil {
				return LsResult{}, e
			}
			fi, err := d.Info() // Lstat: a symlink is described, not followed
			if err != nil {
				continue // removed since the directory was read
			}
			res.Entries = append(res.Entries, Entry{
				Name:    validName(d.Name()),
				Type:    entryType(fi.Mode()),
				Size:    fi.Size(),
				ModTime: fi.ModTime().UTC().Format(time.RFC3339),
			})
		}
		return res, nil
	})
}
