package fstool

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

// A file whose owner may not write it is not replaced, by fs::write or
// fs::edit, even by a root process (whom modes do not stop) and although
// a rename ignores the target's mode: the answer is forbidden, the file
// keeps its content and mode, and no temporary file stays. A writable
// file keeps its mode when replaced.
func TestWriteReadOnly(t *testing.T) {
	t.Parallel()
	const old = "keep me\n"
	for _, tc := range []struct {
		name string
		mode fs.FileMode
		id   string
		req  any
		code wire.Code // "" for success
	}{
		{"write 0444", 0o444, WriteFunction, WriteRequest{Path: "f", Content: "new\n"}, wire.CodeForbidden},
		{"write 0444 same content", 0o444, WriteFunction, WriteRequest{Path: "f", Content: old}, wire.CodeForbidden},
		{"write 0555", 0o555, WriteFunction, WriteRequest{Path: "f", Content: "new\n"}, wire.CodeForbidden},
		{"write 0400", 0o400, WriteFunction, WriteRequest{Path: "f", Content: "new\n"}, wire.CodeForbidden},
		{"write 0466 (owner may not)", 0o466, WriteFunction, WriteRequest{Path: "f", Content: "new\n"}, wire.CodeForbidden},
		{"edit 0444", 0o444, EditFunction, EditRequest{Path: "f", OldText: "keep", NewText: "lose"}, wire.CodeForbidden},
		{"write 0640 keeps its mode", 0o640, WriteFunction, WriteRequest{Path: "f", Content: "new\n"}, ""},
		{"write 0755 keeps its mode", 0o755, WriteFunction, WriteRequest{Path: "f", Content: "new\n"}, ""},
		{"write 0200 keeps its mode", 0o200, WriteFunction, WriteRequest{Path: "f", Content: "new\n"}, ""},
		{"edit 0600 keeps its mode", 0o600, EditFunction, EditRequest{Path: "f", OldText: "keep me", NewText: "new"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			name := filepath.Join(f.root, "f")
			mustWrite(t, name, old)
			if err := os.Chmod(name, tc.mode); err != nil {
				t.Fatal(err)
			}
			before, err := os.Lstat(name)
			if err != nil {
				t.Fatal(err)
			}
			err = f.call(t, tc.id, tc.req, nil)
			after, serr := os.Lstat(name)
			if serr != nil {
				t.Fatal(serr)
			}
			if after.Mode() != before.Mode() {
				t.Fatalf("mode %v became %v", before.Mode(), after.Mode())
			}
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				// Readable, for a test that is not root (mode 0200).
				if err := os.Chmod(name, after.Mode()|0o400); err != nil {
					t.Fatal(err)
				}
				if f.read(t, "f") != "new\n" {
					t.Fatalf("content %q", f.read(t, "f"))
				}
			} else {
				wantCode(t, err, tc.code)
				if !strings.Contains(err.Error(), "read-only") {
					t.Fatalf("message %v", err)
				}
				if f.read(t, "f") != old || !os.SameFile(before, after) {
					t.Fatal("the read-only file was replaced")
				}
			}
			noTempFiles(t, f.root)
		})
	}
}

// diskQuota is a [Quota] that holds root to limit bytes of allocated
// blocks, measured by a walk as the sandbox worker does, and records the
// growth it was asked about.
type diskQuota struct {
	limit int64
	mu    sync.Mutex
	asked []int64
}

var errOverQuota = errors.New("test: over quota")

func (q *diskQuota) check(_ context.Context, root string, grow int64) error {
	q.mu.Lock()
	q.asked = append(q.asked, grow)
	q.mu.Unlock()
	if used := usage(root); used+grow > q.limit {
		return wire.Wrap(wire.CodeForbidden, errOverQuota, "uses %d, the write needs %d more, limit %d", used, grow, q.limit)
	}
	return nil
}

func (q *diskQuota) reset() []int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.asked
	q.asked = nil
	return a
}

// usage is the allocated bytes of the files under root, the root itself
// left out.
func usage(root string) int64 {
	var total int64
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		if info, err := d.Info(); err == nil {
			total += allocated(info)
		}
		return nil
	})
	return total
}

func noTempFiles(t *testing.T, root string) {
	t.Helper()
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && IsTempFile(d.Name()) {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}

// fs::write and fs::edit ask the quota before a write that grows the
// root and write nothing when it refuses: the old file stays, no
// temporary file or parent directory is left. A write that does not grow
// the root is not asked about, so a root over its quota can be cleaned.
func TestWriteQuota(t *testing.T) {
	t.Parallel()
	const kib = 1 << 10
	q := &diskQuota{}
	f := newFixture(t, WithQuota(q.check))
	q.limit = usage(f.root) + 16*kib // 4 blocks
	for _, tc := range []struct {
		name  string
		id    string
		req   any
		code  wire.Code // "" for success
		asked []int64   // the growth the quota was asked about
		want  map[string]string
		gone  []string
	}{
		{"new file that fits", WriteFunction, WriteRequest{Path: "one", Content: strings.Repeat("a", 5*kib)}, "", []int64{8 * kib},
			map[string]string{"one": strings.Repeat("a", 5*kib)}, nil},
		{"new file that does not", WriteFunction, WriteRequest{Path: "two", Content: strings.Repeat("b", 9*kib)}, wire.CodeForbidden, []int64{12 * kib},
			nil, []string{"two"}},
		{"new directories count", WriteFunction, WriteRequest{Path: "d1/d2/d3/x", Content: strings.Repeat("c", 4*kib)}, wire.CodeForbidden, []int64{16 * kib},
			nil, []string{"d1"}},
		{"growing overwrite that does not fit", WriteFunction, WriteRequest{Path: "one", Content: strings.Repeat("d", 17*kib)}, wire.CodeForbidden, []int64{12 * kib},
			map[string]string{"one": strings.Repeat("a", 5*kib)}, nil},
		{"growing edit that does not fit", EditFunction, EditRequest{Path: "one", OldText: "a", NewText: "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", ReplaceAll: true}, wire.CodeForbidden, []int64{164 * kib},
			map[string]string{"one": strings.Repeat("a", 5*kib)}, nil},
		{"overwrite in the same blocks is not asked", WriteFunction, WriteRequest{Path: "one", Content: strings.Repeat("f", 8*kib)}, "", nil,
			map[string]string{"one": strings.Repeat("f", 8*kib)}, nil},
		{"shrinking edit is not asked", EditFunction, EditRequest{Path: "one", OldText: "ff", NewText: "g", ReplaceAll: true}, "", nil,
			map[string]string{"one": strings.Repeat("g", 4*kib)}, nil},
		{"growing edit that fits", EditFunction, EditRequest{Path: "one", OldText: strings.Repeat("g", 4*kib), NewText: strings.Repeat("g", 8*kib)}, "", []int64{4 * kib},
			map[string]string{"one": strings.Repeat("g", 8*kib)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q.reset()
			err := f.call(t, tc.id, tc.req, nil)
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				wantCode(t, err, tc.code)
				if !errors.Is(err, errOverQuota) {
					t.Fatalf("the quota's error did not pass through: %v", err)
				}
			}
			if asked := q.reset(); !slicesEqual(asked, tc.asked) {
				t.Fatalf("asked about %v, want %v", asked, tc.asked)
			}
			for name, content := range tc.want {
				if got := f.read(t, name); got != content {
					t.Fatalf("%s holds %d bytes %.10q…", name, len(got), got)
				}
			}
			for _, name := range tc.gone {
				if _, err := os.Lstat(filepath.Join(f.root, name)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("%s exists: %v", name, err)
				}
			}
			noTempFiles(t, f.root)
		})
	}
	// Over the quota (a file came from elsewhere), a growing write is
	// refused and a shrinking one, which cleans up, is not.
	mustWrite(t, filepath.Join(f.root, "elsewhere"), strings.Repeat("h", 32*kib))
	err := f.call(t, WriteFunction, WriteRequest{Path: "more", Content: "i"}, nil)
	wantCode(t, err, wire.CodeForbidden)
	if err := f.call(t, WriteFunction, WriteRequest{Path: "elsewhere", Content: "h\n"}, nil); err != nil {
		t.Fatalf("shrink over the quota: %v", err)
	}
	if err := f.call(t, WriteFunction, WriteRequest{Path: "more", Content: "i"}, nil); err != nil {
		t.Fatalf("a write that fits again: %v", err)
	}
	noTempFiles(t, f.root)
}

// Growing writes of one root are serialised from the quota's question to
// the rename: of many concurrent writes only those that fit land.
func TestWriteQuotaConcurrent(t *testing.T) {
	t.Parallel()
	q := &diskQuota{}
	f := newFixture(t, WithQuota(q.check))
	q.limit = usage(f.root) + 5*8192
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.call(t, WriteFunction, WriteRequest{Path: "w" + string(rune('a'+i)), Content: strings.Repeat("x", 8192)}, nil)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else {
			wantCode(t, err, wire.CodeForbidden)
		}
	}
	if used := usage(f.root); ok != 5 || used > q.limit {
		t.Fatalf("%d writes landed, %d bytes used of %d", ok, used, q.limit)
	}
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
