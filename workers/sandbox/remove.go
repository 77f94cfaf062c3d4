package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path"
)

// removeWorkdir removes a workdir and everything in it. A process of the
// sandbox may have taken its owner's write or search permission off a
// directory (chmod 0555, 0000; the workdir itself too): root ignores
// that, but a node that is not root could not empty such a directory,
// and the sandbox would stay destroying for good. So when a removal is
// denied, every directory under dir gets its owner's read, write and
// search permission back and the removal runs again. The directories are
// reached through an os.Root of dir, so a symlink cannot lead the chmods
// outside it.
func removeWorkdir(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	if fi, lerr := os.Lstat(dir); lerr == nil && fi.IsDir() {
		_ = os.Chmod(dir, fi.Mode().Perm()|0o700)
		if root, rerr := os.OpenRoot(dir); rerr == nil {
			openDirs(root, ".")
			_ = root.Close()
		}
	}
	return os.RemoveAll(dir)
}

// openDirs gives the directories below rel (a directory of root, already
// open to its owner) their owner's read, write and search permission,
// best effort: what stays closed makes the removal after fail and say so.
func openDirs(root *os.Root, rel string) {
	f, err := root.Open(rel)
	if err != nil {
		return
	}
	ents, _ := f.ReadDir(-1)
	_ = f.Close()
	for _, e := range ents {
		if !e.IsDir() { // from the directory entry: a symlink is not one
			continue
		}
		sub := path.Join(rel, e.Name())
		if fi, err := root.Lstat(sub); err == nil && fi.IsDir() {
			if fi.Mode().Perm()&0o700 != 0o700 {
				_ = root.Chmod(sub, fi.Mode().Perm()|0o700)
			}
			openDirs(root, sub)
		}
	}
}
