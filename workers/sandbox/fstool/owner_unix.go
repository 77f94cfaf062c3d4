//go:build unix

package fstool

import (
	"io/fs"
	"syscall"
)

// ownerOf is who owns the file info describes.
func ownerOf(info fs.FileInfo) owner {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return owner{int(st.Uid), int(st.Gid)}
	}
	return noOwner
}
