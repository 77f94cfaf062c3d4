package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A workdir whose directories a process of the sandbox made read-only or
// unsearchable (chmod 0555, 0000, the workdir itself too) is still
// removed by a node that is not root, whom modes stop: without that its
// destroy failed (internal, "permission denied") on every retry and the
// sandbox stayed destroying, refusing execs, for good. A symlink in it
// is removed, never followed: the folder it points to keeps its mode.
// Run as root, the test runs itself again as the unprivileged user
// 65534, where the modes matter.
func TestRemoveWorkdirModes(t *testing.T) {
	if os.Geteuid() == 0 {
		runAsNobody(t, "TestRemoveWorkdirModes")
		return
	}
	t.Parallel()
	for _, tc := range []struct {
		name  string
		modes map[string]os.FileMode // set after the tree is made, in order of depth (deepest first)
	}{
		{name: "a read-only directory", modes: map[string]os.FileMode{"a/b": 0o555}},
		{name: "an unsearchable directory", modes: map[string]os.FileMode{"a": 0o000}},
		{name: "closed at every level", modes: map[string]os.FileMode{"a/b/c": 0o000, "a/b": 0o555, "a": 0o100, ".": 0o500}},
		{name: "a read-only workdir", modes: map[string]os.FileMode{".": 0o555}},
		{name: "write without search", modes: map[string]os.FileMode{"a": 0o600}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			dir, outside := filepath.Join(base, "wd"), filepath.Join(base, "outside")
			for _, d := range []string{filepath.Join(dir, "a", "b", "c"), outside} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range []string{"a/f", "a/b/f", "a/b/c/f"} {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o444); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(outside, 0o500); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Chmod(outside, 0o755) })
			if err := os.Symlink(outside, filepath.Join(dir, "a", "b", "out")); err != nil {
				t.Fatal(err)
			}
			for _, rel := range []string{"a/b/c", "a/b", "a", "."} {
				if mode, ok := tc.modes[rel]; ok {
					if err := os.Chmod(filepath.Join(dir, rel), mode); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Without removeWorkdir's care, the test's own clean-up
			// could not remove it either.
			t.Cleanup(func() { _ = exec.Command("chmod", "-R", "u+rwx", dir).Run() })
			if err := removeWorkdir(dir); err != nil {
				t.Fatalf("remove: %v", err)
			}
			if exists(dir) {
				t.Fatal("the workdir is still there")
			}
			if fi, err := os.Stat(outside); err != nil || fi.Mode().Perm() != 0o500 {
				t.Fatalf("the folder a symlink pointed to: %v %v", fi.Mode(), err)
			}
		})
	}
}

// runAsNobody runs the test name of this test binary again as the
// unprivileged user 65534 (only root can) and fails with its output
// unless it passes there. The binary is copied where that user can run
// it; the run gets its own temporary folder.
func runAsNobody(t *testing.T, name string) {
	t.Helper()
	const uid = 65534
	home := reachableHome(t)
	bin := filepath.Join(home, "sandbox.test")
	if err := copyFile(os.Args[0], bin, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(home, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, uid, uid); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = tmp, []string{"TMPDIR=" + tmp, "HOME=" + tmp, "PATH=/usr/bin:/bin"}, &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	err := cmd.Run()
	if err != nil || !strings.Contains(out.String(), fmt.Sprintf("--- PASS: %s ", name)) {
		t.Fatalf("%s as uid %d: %v\n%s", name, uid, err, out.String())
	}
}

func copyFile(from, to string, mode os.FileMode) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return err
	}
	return dst.Close()
}
