package fstool

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/engine/wire"
)

// MaxPathBytes bounds a path or pattern in a request.
const MaxPathBytes = 4096

// checkPath is the payload check of a path: no NUL, not too long.
func checkPath(field, p string, required bool) error {
	switch {
	case p == "" && required:
		return invalid("%s is required", field)
	case len(p) > MaxPathBytes:
		return invalid("%s is %d bytes, more than %d", field, len(p), MaxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return invalid("%s contains a NUL byte", field)
	case !utf8.ValidString(p):
		return invalid("%s is not valid UTF-8", field)
	}
	return nil
}

// validName is a file name or path read from the disk as an answer can
// carry it: a msgpack or JSON string must be valid UTF-8, so each invalid
// byte becomes U+FFFD. Such a name cannot be named back in a request.
func validName(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// workdir is one call's view of the root: the directory opened as an
// os.Root, which refuses every name that resolves outside it, and the
// root's names for recognising absolute paths inside it.
type workdir struct {
	root  *os.Root
	names []string // cleaned absolute root, then its symlink-free form if different
}

// open resolves the caller's root and opens it.
func open(ctx context.Context, resolve Resolver) (*workdir, error) {
	dir, err := resolve(ctx)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			return nil, we
		}
		return nil, wire.Wrap(wire.CodeNotFound, err, "no working directory for this call")
	}
	if !filepath.IsAbs(dir) {
		return nil, wire.Errorf(wire.CodeInternal, "the resolver returned a relative root %q", dir)
	}
	dir = filepath.Clean(dir)
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, wire.Errorf(wire.CodeNotFound, "the working directory is not available: %s", stripPath(err))
	}
	w := &workdir{root: r, names: []string{dir}}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		w.names = append(w.names, real)
	}
	return w, nil
}

func (w *workdir) close() { _ = w.root.Close() }

// rel maps a request path onto a clean, slash-separated path relative to
// the root ("." for the root itself); see [normalize].
func (w *workdir) rel(p string) (string, error) { return normalize(w.names, p) }

// normalize maps p onto a clean path relative to the root named by roots
// (equivalent absolute names of one directory). A relative p is taken
// from the root; an absolute p must be the root or inside it. A path
// that leaves the root lexically (".." past it, an absolute path
// elsewhere) is forbidden; the empty path is the root. The result is "."
// or a local path (filepath.IsLocal): it never names anything outside the
// root, whatever the symlinks, because the caller resolves it with
// os.Root.
func normalize(roots []string, p string) (string, error) {
	if err := checkPath("path", p, false); err != nil {
		return "", err
	}
	if p == "" {
		return ".", nil
	}
	c := filepath.Clean(p)
	if filepath.IsAbs(c) {
		inside := false
		for _, r := range roots {
			if c == r {
				return ".", nil
			}
			prefix := r
			if !strings.HasSuffix(prefix, "/") {
				prefix += "/"
			}
			if rest, ok := strings.CutPrefix(c, prefix); ok {
				c, inside = rest, true
				break
			}
		}
		if !inside {
			return "", forbidden("%.256q is outside the working directory", p)
		}
	}
	if c == "." {
		return ".", nil
	}
	if !filepath.IsLocal(c) {
		return "", forbidden("%.256q leaves the working directory", p)
	}
	return c, nil
}

// lstat checks every component of rel with Lstat, from the root down: a
// symlink anywhere is forbidden (the tools never follow one, even inside
// the root), and a component that is not a directory is invalid. It
// returns the info of rel itself, or an error wrapping fs.ErrNotExist
// with the index of the first missing component in missing (so a writer
// knows what to create).
//
// The walk is a policy check, not the confinement: a symlink planted
// between it and the use is still resolved by os.Root, which never leaves
// the root.
func (w *workdir) lstat(rel string) (info fs.FileInfo, missing int, err error) {
	if rel == "." {
		info, err := w.root.Lstat(".")
		return info, -1, err
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		info, err = w.root.Lstat(sub)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, i, err
			}
			return nil, -1, err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return nil, -1, forbidden("%.256q is a symlink; the file tools do not follow symlinks", sub)
		}
		if i < len(parts)-1 && !info.IsDir() {
			return nil, -1, invalid("%.256q is not a directory", sub)
		}
	}
	return info, -1, nil
}

// openRegular opens rel, whose Lstat info is want, for reading. It opens
// without blocking (a FIFO swapped in cannot hang the call) and checks
// that it opened the very file it checked, so a symlink swapped in after
// the check is not read through.
func (w *workdir) openRegular(rel string, want fs.FileInfo) (*os.File, error) {
	if !want.Mode().IsRegular() {
		if want.IsDir() {
			return nil, invalid("%.256q is a directory", rel)
		}
		return nil, invalid("%.256q is not a regular file", rel)
	}
	f, err := w.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	got, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if !got.Mode().IsRegular() || !os.SameFile(got, want) {
		_ = f.Close()
		return nil, forbidden("%.256q changed while it was opened", rel)
	}
	return f, nil
}
