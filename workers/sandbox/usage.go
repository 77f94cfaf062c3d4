package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// scanWorkdir returns the disk space the files under dir take, in bytes
// (allocated blocks, so a sparse file counts what it really uses), and,
// when uid >= 0, gives every entry owned by someone else to uid:gid (the
// files the fs tools wrote as root become the sandbox's). It never
// follows symlinks (Lchown changes a link itself) and skips entries it
// cannot read. Hard links cannot bring outside files in: the workdir is
// its own mount inside the sandbox, and link(2) does not cross mounts.
func scanWorkdir(dir string, uid, gid int) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			total += info.Size()
			return nil
		}
		total += int64(st.Blocks) * 512
		if uid >= 0 && (int(st.Uid) != uid || int(st.Gid) != gid) {
			_ = os.Lchown(p, uid, gid)
		}
		return nil
	})
	return total
}
