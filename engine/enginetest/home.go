package enginetest

import (
	"os"
	"path/filepath"
	"testing"
)

// NodeHome is a temporary node home (t.TempDir()) that the sandbox's
// unprivileged host user may pass through. The testing package makes a
// test's folders 0700, so a node running as root with such a home would
// keep its sandboxes under /var/lib/iii/sandboxes instead (see the
// sandbox worker's doc), where a node the test kills leaves its root
// behind; with this home they stay inside the test's temp dir, as they
// do for production nodes whose home others can pass through.
func NodeHome(t testing.TB) string {
	t.Helper()
	home := t.TempDir()
	Reachable(t, home)
	return home
}

// Reachable makes dir and its parent passable by other users (0711), for
// a home a test made with t.TempDir() itself; see [NodeHome].
func Reachable(t testing.TB, dir string) {
	t.Helper()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
}
