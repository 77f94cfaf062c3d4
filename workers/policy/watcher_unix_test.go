//go:build unix

package policy

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO at the policy path is refused at once: opening one blocks until a
// writer comes, which hung the node's start (and then every poll and
// policy::reload, which wait on the same read).
func TestWatcherFIFO(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// release unblocks a reader stuck in open, so a failing run ends.
	release := func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}
	within := func(name string, fn func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			release()
			t.Fatalf("%s blocks on a FIFO", name)
			return nil
		}
	}
	err := within("NewWatcher", func() error { _, err := NewWatcher(fifo); return err })
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("NewWatcher on a FIFO: %v", err)
	}

	// A loaded file replaced by a FIFO: Reload reports it, the policy stays.
	path := filepath.Join(dir, "p.yaml")
	writeAtomic(t, path, v1)
	w, err := NewWatcher(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	fifo = path
	err = within("Reload", func() error { _, err := w.Reload(); return err })
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Reload of a FIFO: %v", err)
	}
	if st := w.Status(); st.Source != SourceFile || !strings.Contains(st.LastError, "not a regular file") {
		t.Fatalf("status after a FIFO: %+v", st)
	}
}
