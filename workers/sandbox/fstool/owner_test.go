package fstool

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

// Who a written file belongs to: root keeps a replaced file's owner and
// gives a new one to [WithOwner]'s; any other process (and a system
// without uids, euid -1) changes nothing.
func TestOwnerFor(t *testing.T) {
	t.Parallel()
	old, def := owner{65534, 65534}, owner{1000, 1001}
	for _, tc := range []struct {
		name     string
		euid     int
		replaced bool
		def      owner
		want     owner
	}{
		{"root replaces: the old owner", 0, true, def, old},
		{"root replaces without WithOwner: the old owner", 0, true, noOwner, old},
		{"root creates: WithOwner's", 0, false, def, def},
		{"root creates, WithOwner's gid only", 0, false, owner{-1, 1001}, owner{-1, 1001}},
		{"root creates without WithOwner: root's", 0, false, noOwner, noOwner},
		{"a user replaces: its own", 1000, true, def, noOwner},
		{"a user creates: its own", 1000, false, def, noOwner},
		{"no uids", -1, false, def, noOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ownerFor(tc.euid, old, tc.replaced, tc.def); got != tc.want {
				t.Fatalf("ownerFor = %v, want %v", got, tc.want)
			}
		})
	}
}

// A directory lets its owner add entries only with write and search
// permission.
func TestDirWritable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		perm fs.FileMode
		want bool
	}{
		{0o755, true}, {0o700, true}, {0o300, true}, {0o1777, true},
		{0o555, false}, {0o500, false}, {0o000, false},
		{0o655, false}, // write without search
		{0o577, false}, // others may, the owner may not
	} {
		if got := dirWritable(tc.perm.Perm()); got != tc.want {
			t.Errorf("dirWritable(%04o) = %v, want %v", uint32(tc.perm), got, tc.want)
		}
	}
}

// fs::write and fs::edit add no entry to a directory whose owner may not
// write it (chmod 0555), where a process of the sandbox gets permission
// denied, even as root (whom modes do not stop): not a new file, not a
// replacement (a rename adds an entry), not missing parents. The answer
// is forbidden and nothing is left: no file, no directory, no temporary
// file. Below a writable directory inside a read-only one, writes work.
func TestWriteReadOnlyDir(t *testing.T) {
	t.Parallel()
	const old = "keep\n"
	for _, tc := range []struct {
		name         string
		id           string
		req          any
		ok           bool
		want         map[string]string // content after
		gone         []string          // absent after
		readOnlyRoot bool              // the root itself 0555
	}{
		{name: "new file", id: WriteFunction, req: WriteRequest{Path: "ro/new", Content: "x"},
			gone: []string{"ro/new"}},
		{name: "replace a writable file", id: WriteFunction, req: WriteRequest{Path: "ro/f", Content: "lost\n"},
			want: map[string]string{"ro/f": old}},
		{name: "same content", id: WriteFunction, req: WriteRequest{Path: "ro/f", Content: old},
			want: map[string]string{"ro/f": old}},
		{name: "edit a writable file", id: EditFunction, req: EditRequest{Path: "ro/f", OldText: "keep", NewText: "lost"},
			want: map[string]string{"ro/f": old}},
		{name: "missing parents", id: WriteFunction, req: WriteRequest{Path: "ro/a/b/new", Content: "x"},
			gone: []string{"ro/a"}},
		{name: "write without search", id: WriteFunction, req: WriteRequest{Path: "ns/new", Content: "x"},
			gone: []string{"ns/new"}},
		{name: "read-only root", id: WriteFunction, req: WriteRequest{Path: "new", Content: "x"},
			gone: []string{"new"}, readOnlyRoot: true},
		{name: "missing parents in a read-only root", id: WriteFunction, req: WriteRequest{Path: "a/new", Content: "x"},
			gone: []string{"a"}, readOnlyRoot: true},
		{name: "writable directory inside", id: WriteFunction, req: WriteRequest{Path: "ro/w/new", Content: "x"}, ok: true,
			want: map[string]string{"ro/w/new": "x"}},
		{name: "missing parents in a writable directory inside", id: WriteFunction, req: WriteRequest{Path: "ro/w/a/new", Content: "x"}, ok: true,
			want: map[string]string{"ro/w/a/new": "x"}},
		{name: "edit in a writable directory inside", id: EditFunction, req: EditRequest{Path: "ro/w/f", OldText: "keep", NewText: "kept"}, ok: true,
			want: map[string]string{"ro/w/f": "kept\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			mustWrite(t, filepath.Join(f.root, "ro", "f"), old)
			mustWrite(t, filepath.Join(f.root, "ro", "w", "f"), old)
			mustMkdir(t, filepath.Join(f.root, "ns"))
			restore := chmod(t, filepath.Join(f.root, "ro"), 0o555)
			restore = append(restore, chmod(t, filepath.Join(f.root, "ns"), 0o655)...)
			if tc.readOnlyRoot {
				restore = append(restore, chmod(t, f.root, 0o555)...)
			}
			err := f.call(t, tc.id, tc.req, nil)
			// Writable again, so that a test that is not root can look.
			for _, r := range restore {
				r()
			}
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				wantCode(t, err, wire.CodeForbidden)
				if !strings.Contains(err.Error(), "permission denied") {
					t.Fatalf("message %v", err)
				}
			}
			for name, content := range tc.want {
				if got := f.read(t, name); got != content {
					t.Fatalf("%s holds %q, want %q", name, got, content)
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
}

// chmod sets the mode of dir and returns (in a slice, to collect) what
// makes it writable again; that also runs before the test's temporary
// directory is removed, which a process that is not root could not
// empty otherwise.
func chmod(t *testing.T, dir string, mode fs.FileMode) []func() {
	t.Helper()
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	restore := func() { _ = os.Chmod(dir, 0o755) }
	t.Cleanup(restore)
	return []func(){restore}
}

// A file fs::write or fs::edit replaces keeps its owner, and a file or
// directory fs::write creates belongs to [WithOwner]'s, when the tools
// run as root: a process of the sandbox that could write the file before
// still can. A process that is not root makes files of its own whatever
// WithOwner says, and a failed chown is not an error.
func TestWriteOwner(t *testing.T) {
	t.Parallel()
	euid, egid := os.Geteuid(), os.Getegid()
	self := owner{euid, egid}
	them, other := owner{4242, 4343}, owner{5151, 5252}
	type row struct {
		name  string
		opts  []Option
		owned map[string]owner // files given an owner before the call (root only)
		id    string
		req   any
		want  map[string]owner
	}
	// Only root can give a file to another user, so the rows that need it
	// exist only when the test runs as root; as any other user the rows
	// below show that WithOwner does not stop a write.
	rows := []row{}
	if euid == 0 {
		rows = append(rows,
			row{"write keeps a replaced file's owner", []Option{WithOwner(them.uid, them.gid)}, map[string]owner{"a.txt": other},
				WriteFunction, WriteRequest{Path: "a.txt", Content: "new\n"}, map[string]owner{"a.txt": other}},
			row{"edit keeps a replaced file's owner", []Option{WithOwner(them.uid, them.gid)}, map[string]owner{"a.txt": other},
				EditFunction, EditRequest{Path: "a.txt", OldText: "hello", NewText: "bye"}, map[string]owner{"a.txt": other}},
			row{"a replaced file keeps its owner without WithOwner", nil, map[string]owner{"sub/b.go": other},
				WriteFunction, WriteRequest{Path: "sub/b.go", Content: "package b\n"}, map[string]owner{"sub/b.go": other}},
			row{"a new file is WithOwner's", []Option{WithOwner(them.uid, them.gid)}, nil,
				WriteFunction, WriteRequest{Path: "new", Content: "x"}, map[string]owner{"new": them}},
			row{"new parents are WithOwner's, existing ones unchanged", []Option{WithOwner(them.uid, them.gid)}, map[string]owner{"sub": other},
				WriteFunction, WriteRequest{Path: "sub/x/y/new", Content: "x"},
				map[string]owner{"sub": other, "sub/x": them, "sub/x/y": them, "sub/x/y/new": them}},
			row{"WithOwner's gid alone", []Option{WithOwner(-1, them.gid)}, nil,
				WriteFunction, WriteRequest{Path: "d/new", Content: "x"}, map[string]owner{"d": {self.uid, them.gid}, "d/new": {self.uid, them.gid}}},
			row{"a new file is root's without WithOwner", nil, nil,
				WriteFunction, WriteRequest{Path: "d/new", Content: "x"}, map[string]owner{"d": self, "d/new": self}},
		)
	} else {
		rows = append(rows,
			row{"a new file is the user's own despite WithOwner", []Option{WithOwner(them.uid, them.gid)}, nil,
				WriteFunction, WriteRequest{Path: "d/new", Content: "x"}, map[string]owner{"d": self, "d/new": self}},
			row{"a replaced file is the user's own", []Option{WithOwner(them.uid, them.gid)}, nil,
				EditFunction, EditRequest{Path: "a.txt", OldText: "hello", NewText: "bye"}, map[string]owner{"a.txt": self}},
		)
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tc.opts...)
			for name, o := range tc.owned {
				if err := os.Lchown(filepath.Join(f.root, name), o.uid, o.gid); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.call(t, tc.id, tc.req, nil); err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.want {
				info, err := os.Lstat(filepath.Join(f.root, name))
				if err != nil {
					t.Fatal(err)
				}
				if got := ownerOf(info); got != want {
					t.Errorf("%s is owned by %d:%d, want %d:%d", name, got.uid, got.gid, want.uid, want.gid)
				}
			}
			noTempFiles(t, f.root)
		})
	}
}

// fs::write and fs::edit check the whole path as the kernel checks it
// for a process of the sandbox: every directory from the root down must
// let its owner search it, not only the one the file goes in. A writable
// directory below one its owner may not search (chmod 0600, 0000) is
// out of reach, even for the tools run as root, whom modes do not stop;
// so is everything when the root itself may not be searched. The answer
// is forbidden, names the directory that stops the walk, and nothing is
// written. As a user that is not root, the kernel refuses the same
// writes (permission denied); the rows hold either way.
func TestWriteUnreachableDir(t *testing.T) {
	t.Parallel()
	const old = "keep\n"
	for _, tc := range []struct {
		name  string
		id    string
		req   any
		modes map[string]fs.FileMode // set after the tree is built, deepest first
		ok    bool
		want  map[string]string // content after
		gone  []string          // absent after
		names string            // in the message (as root)
	}{
		{name: "new file below an unsearchable directory", id: WriteFunction,
			req: WriteRequest{Path: "nx/w/new", Content: "x"}, modes: map[string]fs.FileMode{"nx": 0o600},
			gone: []string{"nx/w/new"}, names: `directory "nx" is not searchable`},
		{name: "replace below an unsearchable directory", id: WriteFunction,
			req: WriteRequest{Path: "nx/w/f", Content: "lost\n"}, modes: map[string]fs.FileMode{"nx": 0o600},
			want: map[string]string{"nx/w/f": old}, names: `directory "nx" is not searchable`},
		{name: "same content below an unsearchable directory", id: WriteFunction,
			req: WriteRequest{Path: "nx/w/f", Content: old}, modes: map[string]fs.FileMode{"nx": 0o600},
			want: map[string]string{"nx/w/f": old}, names: `directory "nx" is not searchable`},
		{name: "edit below an unsearchable directory", id: EditFunction,
			req: EditRequest{Path: "nx/w/f", OldText: "keep", NewText: "lost"}, modes: map[string]fs.FileMode{"nx": 0o600},
			want: map[string]string{"nx/w/f": old}, names: `directory "nx" is not searchable`},
		{name: "missing parents below an unsearchable directory", id: WriteFunction,
			req: WriteRequest{Path: "nx/w/a/b/new", Content: "x"}, modes: map[string]fs.FileMode{"nx": 0o600},
			gone: []string{"nx/w/a"}, names: `directory "nx" is not searchable`},
		{name: "two levels up, mode 0000", id: WriteFunction,
			req: WriteRequest{Path: "nx/w/d/new", Content: "x"}, modes: map[string]fs.FileMode{"nx": 0o000},
			gone: []string{"nx/w/d/new"}, names: `directory "nx" is not searchable`},
		{name: "the first directory that stops the walk is named", id: WriteFunction,
			req: WriteRequest{Path: "nx/w/d/new", Content: "x"}, modes: map[string]fs.FileMode{"nx/w/d": 0o600, "nx": 0o600},
			gone: []string{"nx/w/d/new"}, names: `directory "nx" is not searchable`},
		{name: "unsearchable root", id: WriteFunction,
			req: WriteRequest{Path: "sub/new", Content: "x"}, modes: map[string]fs.FileMode{".": 0o600},
			gone: []string{"sub/new"}, names: "the working directory is not searchable"},
		{name: "edit in an unsearchable root", id: EditFunction,
			req: EditRequest{Path: "a.txt", OldText: "hello", NewText: "bye"}, modes: map[string]fs.FileMode{".": 0o600},
			want: map[string]string{"a.txt": "hello\nworld\n"}, names: "the working directory is not searchable"},
		// Not 0100: os.Root opens every directory on a path, which takes
		// read permission as well for a user that is not root.
		{name: "no write above a writable directory", id: WriteFunction,
			req: WriteRequest{Path: "nx/w/new", Content: "x"}, modes: map[string]fs.FileMode{"nx": 0o500}, ok: true,
			want: map[string]string{"nx/w/new": "x"}},
		{name: "edit below a read-only directory", id: EditFunction,
			req: EditRequest{Path: "nx/w/f", OldText: "keep", NewText: "kept"}, modes: map[string]fs.FileMode{"nx": 0o500, ".": 0o500}, ok: true,
			want: map[string]string{"nx/w/f": "kept\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			mustWrite(t, filepath.Join(f.root, "nx", "w", "f"), old)
			mustMkdir(t, filepath.Join(f.root, "nx", "w", "d"))
			// Deepest first: a user that is not root cannot reach a
			// directory below one it has made unsearchable.
			dirs := slices.SortedFunc(maps.Keys(tc.modes), func(a, b string) int { return depth(b) - depth(a) })
			var restore []func()
			for _, d := range dirs {
				restore = append(restore, chmod(t, filepath.Join(f.root, d), tc.modes[d])...)
			}
			err := f.call(t, tc.id, tc.req, nil)
			// Shallowest first, so that a test that is not root can look.
			for i := len(restore) - 1; i >= 0; i-- {
				restore[i]()
			}
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				wantCode(t, err, wire.CodeForbidden)
				if !strings.Contains(err.Error(), "permission denied") {
					t.Fatalf("message %v", err)
				}
				if os.Geteuid() == 0 && !strings.Contains(err.Error(), tc.names) {
					t.Fatalf("message %v does not say %s", err, tc.names)
				}
			}
			for name, content := range tc.want {
				if got := f.read(t, name); got != content {
					t.Fatalf("%s holds %q, want %q", name, got, content)
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
}

// depth is how deep a root-relative directory lies: 0 for the root.
func depth(dir string) int {
	if dir == "." {
		return 0
	}
	return strings.Count(dir, "/") + 1
}
