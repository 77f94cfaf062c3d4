//go:build !unix

package fstool

import "io/fs"

// ownerOf is who owns the file info describes: unknown where files have
// no uid and gid (nor does the process, so nothing is ever chowned).
func ownerOf(fs.FileInfo) owner { return noOwner }
