//go:build unix

package fstool

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }

// A FIFO (or any file that is not regular) is refused by name and skipped
// by a walk; opening never blocks.
func TestReadNotRegular(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	fifo := filepath.Join(f.root, "fifo")
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	wantCode(t, f.call(t, ReadFunction, ReadRequest{Path: "fifo"}, nil), wire.CodeInvalidPayload)
	wantCode(t, f.call(t, WriteFunction, WriteRequest{Path: "fifo", Content: "x"}, nil), wire.CodeInvalidPayload)
	wantCode(t, f.call(t, EditFunction, EditRequest{Path: "fifo", OldText: "x", NewText: "y"}, nil), wire.CodeInvalidPayload)
	wantCode(t, f.call(t, GrepFunction, GrepRequest{Pattern: "x", Path: "fifo"}, nil), wire.CodeInvalidPayload)
	var g GrepResult
	if err := f.call(t, GrepFunction, GrepRequest{Pattern: "x"}, &g); err != nil {
		t.Fatalf("grep over a tree with a FIFO: %v", err)
	}
}
