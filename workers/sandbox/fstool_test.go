package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sandbox/fstool"
)

// fs::write and fs::edit hold the workdir to disk_mb when they write, not
// only the next exec: a write that would pass it is refused (forbidden,
// details used_bytes, limit_bytes and write_bytes) and writes nothing —
// the old file stays, no temporary file is left — and one that shrinks
// the workdir is let through, so it can be cleaned up with the fs tools.
func TestFSQuota(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "fsq"
	sb := f.create(t, CreateRequest{SessionID: sid, Limits: Limits{DiskMB: 1}})
	// Half the quota is taken by a file a command wrote.
	if r := f.sh(t, sid, "head -c 500000 /dev/zero > z"); r.ExitCode != 0 || r.OverQuota {
		t.Fatalf("setup: %+v", r)
	}
	ctx := engine.WithSession(context.Background(), sid, "m1")
	write := func(path string, n int) error {
		_, err := engine.Call[fstool.WriteResult](ctx, f.e, fstool.WriteFunction, fstool.WriteRequest{Path: path, Content: strings.Repeat("x", n)})
		return err
	}
	edit := func(path, old, new string) error {
		_, err := engine.Call[fstool.EditResult](ctx, f.e, fstool.EditFunction, fstool.EditRequest{Path: path, OldText: old, NewText: new, ReplaceAll: true})
		return err
	}
	size := func(path string) int64 {
		fi, err := os.Stat(filepath.Join(sb.Workdir, path))
		if errors.Is(err, os.ErrNotExist) {
			return -1
		}
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	for _, tc := range []struct {
		name string
		do   func() error
		ok   bool
		want map[string]int64 // file sizes after, -1 for none
	}{
		{"a write that fits", func() error { return write("a", 200_000) }, true, map[string]int64{"a": 200_000}},
		{"a new file past disk_mb", func() error { return write("b", 400_000) }, false, map[string]int64{"a": 200_000, "b": -1}},
		{"a new file in new folders past disk_mb", func() error { return write("d/e/b", 400_000) }, false, map[string]int64{"d": -1}},
		{"an overwrite past disk_mb", func() error { return write("a", 600_000) }, false, map[string]int64{"a": 200_000}},
		{"an edit past disk_mb", func() error { return edit("a", "x", "xxx") }, false, map[string]int64{"a": 200_000}},
		{"a shrinking write", func() error { return write("a", 100_000) }, true, map[string]int64{"a": 100_000}},
		{"a write that fits again", func() error { return write("b", 400_000) }, true, map[string]int64{"a": 100_000, "b": 400_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if tc.ok && err != nil {
				t.Fatal(err)
			}
			if !tc.ok {
				wantCode(t, err, wire.CodeForbidden)
				var we *wire.Error
				if !errors.As(err, &we) || !strings.Contains(we.Message, "disk_mb") || we.Details["limit_bytes"] == nil || we.Details["used_bytes"] == nil || we.Details["write_bytes"] == nil {
					t.Fatalf("error %+v", err)
				}
			}
			for path, want := range tc.want {
				if got := size(path); got != want {
					t.Fatalf("%s is %d bytes, want %d", path, got, want)
				}
			}
			ents, _ := os.ReadDir(sb.Workdir)
			for _, e := range ents {
				if fstool.IsTempFile(e.Name()) {
					t.Fatalf("temporary file left: %s", e.Name())
				}
			}
		})
	}
	// The workdir stayed within disk_mb: the next exec is not refused.
	if r := f.sh(t, sid, "echo ok"); r.Stdout != "ok\n" || r.OverQuota {
		t.Fatalf("exec after the writes: %+v", r)
	}
}

// A file the sandbox made read-only is not replaced by fs::write: as in
// the sandbox, where the write fails with permission denied.
func TestFSWriteReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "fsro"
	sb := f.create(t, CreateRequest{SessionID: sid})
	if r := f.sh(t, sid, "echo keep > ro && chmod 0444 ro && { (echo x > ro) 2>/dev/null && echo wrote || echo denied; }"); r.Stdout != "denied\n" {
		t.Fatalf("setup: %+v", r)
	}
	ctx := engine.WithSession(context.Background(), sid, "m1")
	_, err := engine.Call[fstool.WriteResult](ctx, f.e, fstool.WriteFunction, fstool.WriteRequest{Path: "ro", Content: "lost\n"})
	wantCode(t, err, wire.CodeForbidden)
	b, rerr := os.ReadFile(filepath.Join(sb.Workdir, "ro"))
	fi, serr := os.Stat(filepath.Join(sb.Workdir, "ro"))
	if rerr != nil || serr != nil || string(b) != "keep\n" || fi.Mode().Perm() != 0o444 {
		t.Fatalf("ro: %q %v %v %v", b, fi, rerr, serr)
	}
}

// fs::write and fs::edit add no file to a directory the sandbox made
// read-only (chmod 0555), where a command gets permission denied: not a
// new file, not a replacement, not missing parents. Nothing is left.
func TestFSWriteReadOnlyDir(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "fsrodir"
	sb := f.create(t, CreateRequest{SessionID: sid})
	if r := f.sh(t, sid, "mkdir ro && echo keep > ro/f && chmod 0555 ro && { (echo x > ro/new) 2>/dev/null && echo wrote || echo denied; }"); r.Stdout != "denied\n" {
		t.Fatalf("setup: %+v", r)
	}
	ctx := engine.WithSession(context.Background(), sid, "m1")
	for _, tc := range []struct {
		name string
		id   string
		req  any
		gone string // "" when the path exists before and after
	}{
		{"new file", fstool.WriteFunction, fstool.WriteRequest{Path: "ro/new", Content: "x"}, "ro/new"},
		{"missing parents", fstool.WriteFunction, fstool.WriteRequest{Path: "ro/a/b", Content: "x"}, "ro/a"},
		{"replace", fstool.WriteFunction, fstool.WriteRequest{Path: "ro/f", Content: "lost\n"}, ""},
		{"edit", fstool.EditFunction, fstool.EditRequest{Path: "ro/f", OldText: "keep", NewText: "lost"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := engine.Call[map[string]any](ctx, f.e, tc.id, tc.req)
			wantCode(t, err, wire.CodeForbidden)
			if !strings.Contains(err.Error(), "not writable") {
				t.Fatalf("message %v", err)
			}
			if tc.gone != "" && exists(filepath.Join(sb.Workdir, tc.gone)) {
				t.Fatalf("%s was created", tc.gone)
			}
			if b, err := os.ReadFile(filepath.Join(sb.Workdir, "ro", "f")); err != nil || string(b) != "keep\n" {
				t.Fatalf("ro/f: %q %v", b, err)
			}
			ents, _ := os.ReadDir(filepath.Join(sb.Workdir, "ro"))
			for _, e := range ents {
				if fstool.IsTempFile(e.Name()) {
					t.Fatalf("temporary file left: %s", e.Name())
				}
			}
		})
	}
}

// fs::write and fs::edit reach no file below a directory the sandbox
// made unsearchable (chmod 0600), where a command gets permission denied
// on the whole path, even when the file's own directory is writable:
// not a new file, not a replacement, not an edit, not missing parents.
// Once the sandbox gives the permission back, they write again.
func TestFSWriteUnreachableDir(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "fsnxdir"
	f.create(t, CreateRequest{SessionID: sid})
	if r := f.sh(t, sid, "mkdir -p nx/w && echo keep > nx/w/f && chmod 0600 nx && { (echo x > nx/w/new) 2>/dev/null && echo wrote || echo denied; }"); r.Stdout != "denied\n" {
		t.Fatalf("setup: %+v", r)
	}
	ctx := engine.WithSession(context.Background(), sid, "m1")
	for _, tc := range []struct {
		name string
		id   string
		req  any
	}{
		{"new file", fstool.WriteFunction, fstool.WriteRequest{Path: "nx/w/new", Content: "x"}},
		{"missing parents", fstool.WriteFunction, fstool.WriteRequest{Path: "nx/w/a/b", Content: "x"}},
		{"replace", fstool.WriteFunction, fstool.WriteRequest{Path: "nx/w/f", Content: "lost\n"}},
		{"edit", fstool.EditFunction, fstool.EditRequest{Path: "nx/w/f", OldText: "keep", NewText: "lost"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := engine.Call[map[string]any](ctx, f.e, tc.id, tc.req)
			wantCode(t, err, wire.CodeForbidden)
			if !strings.Contains(err.Error(), "permission denied") {
				t.Fatalf("message %v", err)
			}
		})
	}
	if r := f.sh(t, sid, "chmod 0700 nx && ls -A nx/w && cat nx/w/f"); r.Stdout != "f\nkeep\n" {
		t.Fatalf("after the refused writes: %+v", r)
	}
	if _, err := engine.Call[fstool.WriteResult](ctx, f.e, fstool.WriteFunction, fstool.WriteRequest{Path: "nx/w/new", Content: "x"}); err != nil {
		t.Fatalf("once searchable again: %v", err)
	}
}

// A command already running in the sandbox may write what fs::write and
// fs::edit wrote meanwhile: a replaced file keeps its owner and a new
// file or folder is the sandbox user's at once, not root's until the
// next exec's owner fix.
func TestFSWriteOwner(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "fsown"
	sb := f.create(t, CreateRequest{SessionID: sid})
	if r := f.sh(t, sid, "echo a > f && echo a > g && mkdir d"); r.ExitCode != 0 {
		t.Fatalf("setup: %+v", r)
	}
	running := make(chan Result, 1)
	go func() {
		r, err := engine.Call[Result](engine.WithSession(context.Background(), sid, "m1"), f.e, ShellExecFunction, Command{
			Command: `touch started; i=0; while [ ! -e go ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
echo more >> f && echo more >> g && echo more >> d/n/new && echo x > d/n/mine && echo ok`})
		if err != nil {
			r.Stderr = err.Error()
		}
		running <- r
	}()
	enginetest.Eventually(t, 10*time.Second, func() error {
		if !exists(filepath.Join(sb.Workdir, "started")) {
			return errors.New("not started yet")
		}
		return nil
	})
	ctx := engine.WithSession(context.Background(), sid, "m1")
	for _, c := range []struct {
		id  string
		req any
	}{
		{fstool.WriteFunction, fstool.WriteRequest{Path: "f", Content: "b\n"}},
		{fstool.EditFunction, fstool.EditRequest{Path: "g", OldText: "a", NewText: "b"}},
		{fstool.WriteFunction, fstool.WriteRequest{Path: "d/n/new", Content: "b\n"}},
		{fstool.WriteFunction, fstool.WriteRequest{Path: "go", Content: ""}},
	} {
		if _, err := engine.Call[map[string]any](ctx, f.e, c.id, c.req); err != nil {
			t.Fatalf("%s %+v: %v", c.id, c.req, err)
		}
	}
	uid, gid := f.w.FileOwner()
	if uid < 0 {
		uid, gid = os.Geteuid(), os.Getegid()
	}
	for _, p := range []string{"f", "g", "d/n", "d/n/new", "go"} {
		fi, err := os.Lstat(filepath.Join(sb.Workdir, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != gid {
			t.Errorf("%s is owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
		}
	}
	select {
	case r := <-running:
		if r.Stdout != "ok\n" {
			t.Fatalf("the running command could not write the files: %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the running command did not end")
	}
}
