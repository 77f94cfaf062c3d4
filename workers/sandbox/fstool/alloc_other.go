//go:build !unix

package fstool

import "io/fs"

// allocated is the disk space the file info describes takes, estimated
// from its size where the system does not report blocks.
func allocated(info fs.FileInfo) int64 { return blocksFor(info.Size()) }
