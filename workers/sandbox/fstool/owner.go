package fstool

import (
	"fmt"
	"io/fs"
	"strings"
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
// relative to the root ("." for the root), when its owner may not, as
// the kernel would refuse a process of the sandbox: every directory from
// the root down to dir must let its owner search it (x), and dir must
// let its owner write it too (wx). A create or rename by root ignores
// these modes, where a process of the sandbox gets permission denied.
// The first directory that stops the walk is named, as the kernel's path
// walk stops at it.
func (w *workdir) checkDir(dir string) error {
	walk := []string{"."}
	if dir != "." {
		parts := strings.Split(dir, "/")
		for i := range parts {
			walk = append(walk, strings.Join(parts[:i+1], "/"))
		}
	}
	for _, d := range walk {
		info, err := w.root.Lstat(d)
		if err != nil {
			return err
		}
		name := "the working directory"
		if d != "." {
			name = fmt.Sprintf("directory %.256q", d)
		}
		perm := info.Mode().Perm()
		switch {
		case !dirSearchable(perm):
			return forbidden("%s is not searchable (mode %04o): permission denied; nothing in it can be reached until its owner may search it (chmod u+x)", name, uint32(perm))
		case d == dir && !dirWritable(perm):
			return forbidden("%s is not writable (mode %04o): permission denied; a file in it can be created or replaced once its owner may write it (chmod u+wx)", name, uint32(perm))
		}
	}
	return nil
}

// dirSearchable reports whether a directory of mode perm lets its owner
// reach the entries in it (search, x), which every directory on a path
// must.
func dirSearchable(perm fs.FileMode) bool { return perm&0o100 != 0 }
