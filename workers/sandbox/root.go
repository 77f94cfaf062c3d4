package sandbox

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"
)

// The root folder's lifecycle. setup creates it; a node removes it at
// Close when it holds no workdir, and reapers remove the empty per-home
// roots under [SystemRoot] of nodes gone for good (a root node keeps one
// such folder per home, so every node started with a throwaway home
// would otherwise leave one behind). Only os.Remove is used, which fails
// on a folder that is not empty: a workdir, of a session that may be
// adopted after a restart, always keeps its root. A root removed under a
// node that starts at that moment is made again when the node needs it
// ([manager.mkdirIn]).

// rootMode is the mode of the root folder: 0711 when bubblewrap runs as
// the unprivileged host user, which must pass through it, else 0700.
func (m *manager) rootMode() os.FileMode {
	if m.cred != nil {
		return 0o711
	}
	return 0o700
}

// mkdirIn creates dir, 0700, in the root folder, first making the root
// again (with rootMode) when it is gone: another node's reaper may remove
// an empty root at the moment this node starts.
func (m *manager) mkdirIn(dir string, rootMode os.FileMode) error {
	err := os.Mkdir(dir, 0o700)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(m.o.root), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(m.o.root, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Chmod(m.o.root, rootMode); err != nil {
		return err
	}
	m.logger.Info("sandbox root made again", slog.String("root", m.o.root))
	return os.Mkdir(dir, 0o700)
}

// abandon undoes setup after a failed Start: the node's cgroup group, and
// its root folder when empty.
func (m *manager) abandon() {
	m.cg.removeGroup()
	m.removeRoot()
}

// removeRoot removes this node's root folder when it is empty. The
// caller holds the lifecycle lock (no workdir is being made).
func (m *manager) removeRoot() {
	if removeEmptyDir(m.o.root) {
		m.logger.Debug("sandbox root removed", slog.String("root", m.o.root))
	}
}

// removeEmptyDir removes dir when it is an empty folder (not a symbolic
// link: an operator's link is never removed) and reports whether it did.
// A folder that is not empty, gone, or a mount point stays quietly.
func removeEmptyDir(dir string) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return false
	}
	return os.Remove(dir) == nil
}

// perHomeRoot matches the name of a root [defaultRoot] makes under
// [SystemRoot]: 12 hex digits of the home's hash.
var perHomeRoot = regexp.MustCompile(`^[0-9a-f]{12}$`)

// goneRoot reports whether root, named by the heartbeat of a node gone
// since then, is a folder this node's reaper may remove when empty: a
// per-home root under the system root on this host, not this node's, not
// named by a live node's heartbeat, and untouched for orphan_after (a
// node starting now made or used it).
func (m *manager) goneRoot(root, host string, live map[string]bool, now time.Time) bool {
	if root == "" || host == "" || host != m.host || root != filepath.Clean(root) ||
		filepath.Dir(root) != m.o.systemRoot || !perHomeRoot.MatchString(filepath.Base(root)) ||
		root == m.o.root || live[root] {
		return false
	}
	fi, err := os.Lstat(root)
	return err == nil && fi.IsDir() && now.Sub(fi.ModTime()) > m.o.orphanAfter
}

// removeGoneRoots removes the empty roots of the gone nodes among beats
// ([manager.goneRoot]) and returns how many it removed.
func (m *manager) removeGoneRoots(beats map[string]nodeState, now time.Time) int {
	live := map[string]bool{m.o.root: true}
	for node, b := range beats {
		if node == m.o.node || now.Sub(b.last) <= m.o.orphanAfter {
			live[b.root] = true
		}
	}
	n := 0
	for node, b := range beats {
		if live[b.root] || !m.goneRoot(b.root, b.host, live, now) {
			continue
		}
		if err := os.Remove(b.root); err == nil {
			n++
			m.logger.Info("sandbox root of a gone node removed", slog.String("node", node), slog.String("root", b.root))
		} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			m.logger.Warn("sandbox root of a gone node not removed", slog.String("node", node), slog.String("root", b.root), slog.Any("error", err))
		}
	}
	return n
}
