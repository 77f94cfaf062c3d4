package fstool

import (
	"context"
	"io"
	"io/fs"
	"slices"
	"strings"
)

// walker walks directories below the root for fs::ls, fs::glob and
// fs::grep. It never follows a symlink (an entry's type comes from the
// directory, as Lstat sees it), skips the configured directory names, and
// stops after budget entries, marking the walk truncated.
type walker struct {
	w         *workdir
	skip      map[string]bool
	budget    int
	truncated bool
}

func newWalker(w *workdir, o *options) *walker {
	return &walker{w: w, skip: o.skipDirs, budget: o.maxWalk}
}

// readDir reads the entries of the directory rel, at most the walker's
// remaining budget, sorted so that a depth-first walk visits paths in
// byte order: a directory sorts as its name plus '/', where its
// descendants' paths sort. It returns ctx's error, and no entries, once
// ctx ends: it looks between batches, since a directory of the whole
// budget takes long to read and sort.
func (k *walker) readDir(ctx context.Context, rel string) ([]fs.DirEntry, error) {
	f, err := k.w.root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []fs.DirEntry
	for k.budget > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		batch, err := f.ReadDir(min(k.budget, readDirBatch))
		all = append(all, batch...)
		k.budget -= len(batch)
		if err == io.EOF || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return all, err
		}
	}
	if k.budget <= 0 {
		// Whether more entries were left is unknown; say so.
		k.truncated = true
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b fs.DirEntry) int { return strings.Compare(sortKey(a), sortKey(b)) })
	return all, nil
}

func sortKey(d fs.DirEntry) string {
	if d.IsDir() {
		return d.Name() + "/"
	}
	return d.Name()
}

// readDirBatch is how many entries readDir reads between looks at its
// context.
const readDirBatch = 1024

// walkCtxEvery is how many entries of a directory a walk visits between
// looks at its context.
const walkCtxEvery = 64

// visitFunc sees one entry at the root-relative path rel, with the state
// its parent directory was given. It returns the state for the entry's
// children, whether to descend (only asked of directories), and whether
// to stop the whole walk.
type visitFunc[S any] func(rel string, d fs.DirEntry, parent S) (child S, descend, stop bool)

// walk visits the tree below the directory dir (root-relative, already
// checked) depth first in path order, skipping symlinked directories
// (they are entries, never descended) and the skip names. Directories it
// cannot read are skipped. It returns the context's error if ctx ends.
func walk[S any](ctx context.Context, k *walker, dir string, st S, visit visitFunc[S]) error {
	_, err := walkDir(ctx, k, dir, st, visit)
	return err
}

func walkDir[S any](ctx context.Context, k *walker, dir string, st S, visit visitFunc[S]) (stop bool, err error) {
	entries, err := k.readDir(ctx, dir)
	if cerr := ctx.Err(); cerr != nil {
		return true, cerr
	}
	if err != nil && len(entries) == 0 {
		return false, nil
	}
	for i, d := range entries {
		// One directory may hold the whole walk budget, and a glob step
		// costs up to its pattern's size: look at the clock inside it too.
		if i%walkCtxEvery == walkCtxEvery-1 {
			if err := ctx.Err(); err != nil {
				return true, err
			}
		}
		rel := d.Name()
		if dir != "." {
			rel = dir + "/" + d.Name()
		}
		isDir := d.IsDir() // false for a symlink, whatever it points at
		if isDir && k.skip[d.Name()] {
			continue
		}
		child, descend, stop := visit(rel, d, st)
		if stop {
			return true, nil
		}
		if isDir && descend {
			if stop, err := walkDir(ctx, k, rel, child, visit); stop || err != nil {
				return true, err
			}
		}
	}
	return false, nil
}
