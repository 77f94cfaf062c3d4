package fstool

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// The name of a temporary file of fs::write and fs::edit is
// "." + up to tempBaseMax bytes of the target's name + tempInfix +
// tempRandLen characters of rand.Text (base32: A-Z, 2-7) + tempSuffix.
const (
	tempBaseMax = 128
	tempInfix   = ".fstool-"
	tempRandLen = 12
	tempSuffix  = ".tmp"
)

// tempName is a fresh name for a temporary file beside rel.
func tempName(rel string) string {
	dir, base := path.Split(rel)
	if len(base) > tempBaseMax {
		base = base[:tempBaseMax]
	}
	return dir + "." + base + tempInfix + rand.Text()[:tempRandLen] + tempSuffix
}

// IsTempFile reports whether name, a file's base name, is one that
// fs::write and fs::edit give their temporary files
// (".<name>.fstool-<12 characters>.tmp"). Each write renames its own
// away or removes it, but a process killed between its creation and the
// rename leaves it behind: the sandbox worker removes old ones when it
// adopts a workdir after a restart.
func IsTempFile(name string) bool {
	rest, ok := strings.CutSuffix(name, tempSuffix)
	if !ok || len(rest) < 1+1+len(tempInfix)+tempRandLen || rest[0] != '.' {
		return false
	}
	random := rest[len(rest)-tempRandLen:]
	for i := 0; i < len(random); i++ {
		if c := random[i]; !(c >= 'A' && c <= 'Z' || c >= '2' && c <= '7') {
			return false
		}
	}
	base, ok := strings.CutSuffix(rest[1:len(rest)-tempRandLen], tempInfix)
	return ok && len(base) >= 1 && len(base) <= tempBaseMax && !strings.Contains(base, "/")
}

// newFileMode is the mode of a file fs::write creates; a replaced file
// keeps its own.
const newFileMode = 0o644

func (t *tools) write(ctx context.Context, req WriteRequest) (WriteResult, error) {
	if len(req.Content) > t.o.maxWriteBytes {
		return WriteResult{}, invalid("content is %d bytes, more than the %d allowed", len(req.Content), t.o.maxWriteBytes)
	}
	return call(ctx, t, "write", req.Path, func(w *workdir, rel string) (WriteResult, error) {
		if rel == "." {
			return WriteResult{}, invalid("the path is the working directory itself, not a file")
		}
		unlock := t.lock(w, rel)
		defer unlock()
		info, missing, err := w.lstat(rel)
		parts := strings.Split(rel, "/")
		dirs := 0 // parent directories to create
		// The directory the write adds an entry to: the file's, or the
		// one its first missing parent goes in.
		parent := path.Dir(rel)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			dirs = len(parts) - 1 - missing
			if parent = "."; missing > 0 {
				parent = strings.Join(parts[:missing], "/")
			}
		case err != nil:
			return WriteResult{}, err
		case !info.Mode().IsRegular():
			if info.IsDir() {
				return WriteResult{}, invalid("%.256q is a directory", rel)
			}
			return WriteResult{}, invalid("%.256q is not a regular file", rel)
		}
		res := WriteResult{Path: rel, Bytes: len(req.Content), Created: info == nil}
		mode := fs.FileMode(newFileMode)
		grow := blocksFor(int64(len(req.Content))) + int64(dirs)*blockBytes
		own := ownerFor(t.euid, noOwner, false, t.o.owner)
		if err := w.checkDir(parent); err != nil {
			return WriteResult{}, err
		}
		if info != nil {
			if err := writable(rel, info); err != nil {
				return WriteResult{}, err
			}
			mode = info.Mode().Perm()
			own = ownerFor(t.euid, ownerOf(info), true, t.o.owner)
			grow -= allocated(info)
			if info.Size() == int64(len(req.Content)) {
				same, err := w.sameContent(rel, info, req.Content)
				if err != nil {
					return WriteResult{}, err
				}
				if same {
					return res, nil // nothing to do: the call is idempotent
				}
			}
		}
		release, err := t.reserve(ctx, w, grow)
		if err != nil {
			return WriteResult{}, err
		}
		defer release()
		if dirs > 0 {
			if err := w.mkdirs(parts[:len(parts)-1], missing, own); err != nil {
				return WriteResult{}, err
			}
		}
		if err := w.writeAtomic(rel, []byte(req.Content), mode, own); err != nil {
			return WriteResult{}, err
		}
		return res, nil
	})
}

// mkdirs creates the directories dir[from:] (dir is a path split at
// "/", dir[:from] exists) and gives them to own.
func (w *workdir) mkdirs(dir []string, from int, own owner) error {
	if err := w.root.MkdirAll(strings.Join(dir, "/"), 0o755); err != nil {
		return err
	}
	if own.none() {
		return nil
	}
	for i := from; i < len(dir); i++ {
		// Lchown: never through a symlink swapped in; best effort, as
		// the sandbox worker's owner fix.
		_ = w.root.Lchown(strings.Join(dir[:i+1], "/"), own.uid, own.gid)
	}
	return nil
}

// writable refuses to replace a file its owner may not write. A rename
// ignores the target's mode, and the tools often run as root, whom modes
// do not stop: without this a file the sandbox made read-only (chmod
// 0444) would be replaced, where a write in the sandbox fails.
func writable(rel string, info fs.FileInfo) error {
	if info.Mode().Perm()&0o200 == 0 {
		return forbidden("%.256q is read-only (mode %04o): permission denied; make it writable (chmod u+w) first if it is meant to change", rel, uint32(info.Mode().Perm()))
	}
	return nil
}

// blockBytes is the block the disk space of new content is counted in.
const blockBytes = 4096

// blocksFor is the disk space n bytes of content take: whole blocks.
func blocksFor(n int64) int64 { return (n + blockBytes - 1) / blockBytes * blockBytes }

// sameContent reports whether the file rel already holds content.
func (w *workdir) sameContent(rel string, info fs.FileInfo, content string) (bool, error) {
	f, err := w.openRegular(rel, info)
	if err != nil {
		return false, err
	}
	defer f.Close()
	have, err := io.ReadAll(io.LimitReader(f, int64(len(content))+1))
	if err != nil {
		return false, err
	}
	return string(have) == content, nil
}

// writeAtomic replaces rel with data: it writes a temporary file in the
// same directory (created exclusively, so it never opens an existing file
// or a symlink), gives it to own unless that is [noOwner], syncs it and
// renames it over rel. A rename replaces a symlink at rel instead of
// writing through it, and a reader sees the old content or the new, never
// a mix. On failure the temporary file is removed and rel is untouched.
func (w *workdir) writeAtomic(rel string, data []byte, mode fs.FileMode, own owner) (err error) {
	tmp := tempName(rel)
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = w.root.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if !own.none() {
		// Before the chmod: a chown may clear set-id bits. Best effort,
		// as the sandbox worker's owner fix: a failure leaves the file
		// root's until that fix, as before.
		_ = f.Chown(own.uid, own.gid)
	}
	// The umask may have narrowed the mode of the new file.
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return w.root.Rename(tmp, rel)
}

func (t *tools) edit(ctx context.Context, req EditRequest) (EditResult, error) {
	return call(ctx, t, "edit", req.Path, func(w *workdir, rel string) (EditResult, error) {
		unlock := t.lock(w, rel)
		defer unlock()
		info, _, err := w.lstat(rel)
		if err != nil {
			return EditResult{}, err
		}
		if info.Mode().IsRegular() {
			if err := w.checkDir(path.Dir(rel)); err != nil {
				return EditResult{}, err
			}
			if err := writable(rel, info); err != nil {
				return EditResult{}, err
			}
		}
		if info.Size() > int64(t.o.maxWriteBytes) {
			return EditResult{}, invalid("%.256q is %d bytes, more than the %d fs::edit handles", rel, info.Size(), t.o.maxWriteBytes)
		}
		f, err := w.openRegular(rel, info)
		if err != nil {
			return EditResult{}, err
		}
		data, err := io.ReadAll(io.LimitReader(f, int64(t.o.maxWriteBytes)+1))
		_ = f.Close()
		if err != nil {
			return EditResult{}, err
		}
		if len(data) > t.o.maxWriteBytes {
			return EditResult{}, invalid("%.256q grew over the %d bytes fs::edit handles", rel, t.o.maxWriteBytes)
		}
		head := data[:min(len(data), sniffBytes)]
		if isBinary(head, len(data) > sniffBytes) {
			return EditResult{}, invalid("%.256q is a binary file; fs::edit changes text", rel)
		}
		old := []byte(req.OldText)
		n := bytes.Count(data, old)
		switch {
		case n == 0:
			return EditResult{}, invalid("old_text not found in %.256q: it must match the file exactly, whitespace and indentation included (read the file again with fs::read)", rel).
				WithDetails(map[string]any{"matches": 0})
		case n > 1 && !req.ReplaceAll:
			return EditResult{}, invalid("old_text occurs %d times in %.256q: add surrounding lines to old_text so it is unique, or set replace_all", n, rel).
				WithDetails(map[string]any{"matches": n})
		}
		limit := 1
		if req.ReplaceAll {
			limit = -1
		}
		out := bytes.Replace(data, old, []byte(req.NewText), limit)
		if len(out) > t.o.maxWriteBytes {
			return EditResult{}, invalid("the edited file would be %d bytes, more than the %d allowed", len(out), t.o.maxWriteBytes)
		}
		release, err := t.reserve(ctx, w, blocksFor(int64(len(out)))-allocated(info))
		if err != nil {
			return EditResult{}, err
		}
		defer release()
		if err := w.writeAtomic(rel, out, info.Mode().Perm(), ownerFor(t.euid, ownerOf(info), true, t.o.owner)); err != nil {
			return EditResult{}, err
		}
		return EditResult{Path: rel, Replacements: n}, nil
	})
}
