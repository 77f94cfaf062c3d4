package fstool

import (
	"fmt"
	"io/fs"
)

// owner is a file's user and group ids on the host; -1 leaves one as it
// is, as in chown(2).
type owner struct{ uid, gid int }

// noOwner changes no owner.
var noOwner = owner{-1, -1}

func (o owner) none() bool { return o.uid < 0 && o.gid < 0 }

// ownerFor is the owner to give a file (or a directory) fs::write or
// fs::edit writes, from a process whose effective uid is euid: old is
// the owner of the file it replaces (replaced false for a new file), def
// the owner [WithOwner] names for new files.
//
// Only root can give a file away, and only root needs to: any other
// process makes files of its own, as the sandbox's user (the same user)
// would. Root keeps a replaced file's owner, so a process of the sandbox
// that could write the file still can, and gives a new one to def, as
// the sandbox worker's owner fix before each exec would. Elsewhere (no
// euid: -1) nothing changes.
func ownerFor(euid int, old owner, replaced bool, def owner) owner {
	switch {
	case euid != 0:
		return noOwner
	case replaced:
		return old
	}
	return def
}

// dirWritable reports whether a directory of mode perm lets its owner
// create, replace and remove entries: that takes write and search
// permission. The sandbox's user owns its workdir and what is in it (the
// sandbox worker gives the files to it), so the owner's bits are the
// ones a process of the sandbox meets; root, whom modes do not stop,
// checks them itself.
func dirWritable(perm fs.FileMode) bool { return perm&0o300 == 0o300 }

// checkDir refuses to create or replace an entry of dir, a directory
// relative to the root ("." for the root), when its owner may not: a
// create or rename by root ignores dir's mode, where a process of the
// sandbox gets permission denied.
func (w *workdir) checkDir(dir string) error {
	info, err := w.root.Lstat(dir)
	if err != nil {
		return err
	}
	if perm := info.Mode().Perm(); !dirWritable(perm) {
		name := "the working directory"
		if dir != "." {
			name = fmt.Sprintf("directory %.256q", dir)
		}
		return forbidden("%s is not writable (mode %04o): permission denied; a file in it can be created or replaced once its owner may write it (chmod u+wx)", name, uint32(perm))
	}
	return nil
}
