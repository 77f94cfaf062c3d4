//go:build unix

package fstool

import (
	"io/fs"
	"syscall"
)

// allocated is the disk space the file info describes takes: its
// allocated blocks, as the sandbox's disk_mb check counts them.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return blocksFor(info.Size())
}
