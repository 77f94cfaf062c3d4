package sandbox

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sandbox/fstool"
)

// scanWorkdir returns the disk space the files under dir take, in bytes
// (allocated blocks, so a sparse file counts what it really uses), and,
// when uid >= 0, gives every entry owned by someone else to uid:gid (the
// files the fs tools wrote as root become the sandbox's). It never
// follows symlinks (Lchown changes a link itself) and skips entries it
// cannot read. Hard links cannot bring outside files in: the workdir is
// its own mount inside the sandbox, and link(2) does not cross mounts.
func scanWorkdir(dir string, uid, gid int) int64 {
	total, _ := walkWorkdir(context.Background(), dir, uid, gid, nil)
	return total
}

// Quota watch: while an exec runs, its workdir is measured every
// quotaWatchMin, or quotaWatchFactor times the last measurement's
// duration when that is longer, so the walks take at most a twentieth of
// one core whatever the size of the tree.
const (
	quotaWatchMin    = 500 * time.Millisecond
	quotaWatchFactor = 20
)

// watchQuota measures dir while an exec runs (see quotaWatchMin) and
// closes over as soon as it takes more than quota bytes; it returns
// then, or when ctx ends (a walk in progress stops at its next entry).
func watchQuota(ctx context.Context, dir string, quota int64, over chan<- struct{}) {
	t := time.NewTimer(quotaWatchMin)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		began := time.Now()
		used, _ := walkWorkdir(ctx, dir, -1, -1, nil)
		if ctx.Err() != nil {
			return
		}
		if used > quota {
			close(over)
			return
		}
		t.Reset(max(quotaWatchMin, quotaWatchFactor*time.Since(began)))
	}
}

// fsQuota is the fs tools' [fstool.Quota]: a write that would take the
// caller's workdir past its disk_mb is refused with forbidden
// (ErrDiskQuota; details used_bytes, limit_bytes and write_bytes), as
// the next exec would be, and nothing is written. It measures the
// workdir as the check after each exec does, and the fs tools ask only
// about writes that grow it.
func (m *manager) fsQuota(ctx context.Context, root string, grow int64) error {
	sid, _ := engine.SessionFromContext(ctx)
	if sid == "" {
		return errNoSession
	}
	if err := validateSessionID(sid); err != nil {
		return wire.Wrap(wire.CodeNotFound, fmt.Errorf("%w for session %q: %w", ErrNoSandbox, sid, err), "")
	}
	lv, err := m.resolve(ctx, "", sid)
	if err != nil {
		return err
	}
	rec := lv.snapshot()
	if filepath.Clean(rec.Workdir) != root {
		// Destroyed and made again since the call resolved its root.
		return wire.Errorf(wire.CodeUnavailable, "sandbox %s changed during the call; retry", rec.SandboxID)
	}
	quota := int64(rec.Limits.DiskMB) << 20
	if used := scanWorkdir(root, -1, -1); used+grow > quota {
		return wire.Wrap(wire.CodeForbidden, fmt.Errorf("%w: sandbox %s's workdir uses %d KiB of its %d MiB (disk_mb) and the write needs %d KiB more; remove files or write less",
			ErrDiskQuota, rec.SandboxID, used>>10, rec.Limits.DiskMB, (grow+1023)>>10), "").
			WithDetails(map[string]any{"used_bytes": used, "limit_bytes": quota, "write_bytes": grow})
	}
	return nil
}

// tempGrace is how old a temporary file of the fs tools must be before
// [manager.sweepWorkdir] removes it: a write in progress (in another
// process sharing the root, say) is never that slow.
const tempGrace = time.Minute

// sweepWorkdir is [scanWorkdir] that also removes the temporary files of
// fs::write and fs::edit ([fstool.IsTempFile]) last modified more than
// [tempGrace] ago: a kill -9 between their creation and their rename
// leaves them, and they count toward disk_mb. It runs when a sandbox is
// adopted (after a restart, the only time such leftovers appear) in the
// walk adoption makes anyway to fix file owners: an lstat per entry, the
// cost of the disk_mb check after every exec, plus an unlink per
// leftover. Removal goes through an os.Root of dir, so a folder swapped
// for a symlink meanwhile cannot lead it outside. It returns the disk
// space the files left take (0 when dir cannot be opened).
func (m *manager) sweepWorkdir(dir string, uid, gid int) (used int64) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		m.logger.Warn("sandbox workdir not swept", slog.String("workdir", dir), slog.Any("error", err))
		return 0
	}
	defer root.Close()
	cutoff := time.Now().Add(-tempGrace) // file times are the real clock's
	used, removed := walkWorkdir(context.Background(), dir, uid, gid, func(rel string, info fs.FileInfo) bool {
		if !info.Mode().IsRegular() || !fstool.IsTempFile(info.Name()) || !info.ModTime().Before(cutoff) {
			return false
		}
		return root.Remove(rel) == nil
	})
	if removed > 0 {
		m.logger.Info("sandbox: removed temporary files of interrupted fs writes", slog.String("workdir", dir), slog.Int("files", removed))
	}
	return used
}

// walkWorkdir walks dir as [scanWorkdir] describes; remove, when not nil,
// is asked about every entry (by its path relative to dir) and reports
// whether it removed it: a removed entry counts neither toward the total
// nor toward the owner fix. The walk stops early, its total short, when
// ctx ends.
func walkWorkdir(ctx context.Context, dir string, uid, gid int, remove func(rel string, info fs.FileInfo) bool) (total int64, removed int) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return filepath.SkipAll
		}
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if remove != nil && p != dir {
			if rel, err := filepath.Rel(dir, p); err == nil && remove(rel, info) {
				removed++
				return nil
			}
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
	return total, removed
}
