package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine"
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
