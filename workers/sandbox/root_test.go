package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A node removes its root folder at Close when it holds no workdir, and
// keeps it when it does (the sandbox is adopted after a restart) or when
// it is a symbolic link (the operator's). Before, every node start left
// its root behind: a root node with a throwaway home leaked one folder
// under /var/lib/iii/sandboxes per start.
func TestCloseRemovesEmptyRoot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		workdir  bool // a sandbox lives on the node at Close
		link     bool // the root is a symbolic link to a folder
		wantKept bool
	}{
		{name: "empty", wantKept: false},
		{name: "holds a workdir", workdir: true, wantKept: true},
		{name: "symbolic link", link: true, wantKept: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			home := reachableHome(t)
			var opts []Option
			root := filepath.Join(home, "sandboxes")
			if tt.link {
				target := filepath.Join(home, "target")
				if err := os.Mkdir(target, 0o700); err != nil {
					t.Fatal(err)
				}
				root = filepath.Join(home, "link")
				if err := os.Symlink(target, root); err != nil {
					t.Fatal(err)
				}
				opts = append(opts, WithRoot(root))
			}
			f := newFixtureHome(t, home, opts...)
			var workdir string
			if tt.workdir {
				workdir = f.create(t, CreateRequest{SessionID: "kept"}).Workdir
			}
			if err := f.w.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if exists(root) != tt.wantKept {
				t.Fatalf("root %s exists %v after Close, want %v", root, exists(root), tt.wantKept)
			}
			if tt.workdir && !exists(workdir) {
				t.Fatalf("workdir %s removed at Close", workdir)
			}
		})
	}
}

// A root removed under a live node (another node's reaper took it for a
// gone node's at the moment this one started) does not break the node:
// the reaper finds nothing to reap and the next sandbox makes it again.
func TestRootRemovedUnderNode(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if err := os.Remove(f.root); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.reap(context.Background()); err != nil {
		t.Fatalf("reap without a root: %v", err)
	}
	sb := f.create(t, CreateRequest{SessionID: "again"})
	if r := f.exec(t, sb.SandboxID, Command{Command: "echo ok"}); r.ExitCode != 0 || r.Stdout != "ok\n" {
		t.Fatalf("exec: %+v", r)
	}
	fi, err := os.Stat(f.root)
	if err != nil || fi.Mode().Perm() != f.m.rootMode() {
		t.Fatalf("root made again: %v %v, want mode %v", fi, err, f.m.rootMode())
	}
}

// putBeatRoot writes node's heartbeat at at, naming its root and host.
func putBeatRoot(t testing.TB, kv jetstream.KeyValue, node string, at time.Time, root, host string) {
	t.Helper()
	data, _ := json.Marshal(nodeBeat{Node: node, At: at.UnixMilli(), StartedAt: at.UnixMilli(), Root: root, Host: host})
	if _, err := kv.Put(context.Background(), beatKey(node), data); err != nil {
		t.Fatal(err)
	}
}

// The reaper removes the empty per-home root of a node gone for good
// (silent past orphan_after) on this host, and nothing else: not a live
// node's root (not even when a gone node's heartbeat names it too), not
// one that holds anything, not one on another host, outside the system
// root or named unlike a per-home root, not one touched within
// orphan_after (a node starting now), not a symbolic link.
func TestReapRemovesGoneRoots(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Now().Add(time.Hour)}
	sys := t.TempDir()
	outside := t.TempDir()
	f := newFixture(t, WithClock(c.now), withSystemRoot(sys))
	now, host := c.now(), f.m.host
	gone, live := now.Add(-time.Hour), now.Add(-time.Minute)
	tests := []struct {
		node    string
		at      time.Time
		root    string
		host    string
		setup   func(t *testing.T, root string)
		removed bool
	}{
		{node: "gone", at: gone, root: filepath.Join(sys, "00000000000a"), host: host, removed: true},
		{node: "gone-full", at: gone, root: filepath.Join(sys, "00000000000b"), host: host, setup: func(t *testing.T, root string) {
			mkdir(t, filepath.Join(root, "wd_0123456789"))
		}},
		{node: "live", at: live, root: filepath.Join(sys, "00000000000c"), host: host},
		{node: "gone-shared", at: gone, root: filepath.Join(sys, "00000000000d"), host: host},
		{node: "live-shared", at: live, root: filepath.Join(sys, "00000000000d"), host: host},
		{node: "gone-elsewhere", at: gone, root: filepath.Join(sys, "00000000000e"), host: "another-host"},
		{node: "gone-outside", at: gone, root: filepath.Join(outside, "00000000000f"), host: host},
		{node: "gone-odd-name", at: gone, root: filepath.Join(sys, "sandboxes"), host: host},
		{node: "gone-fresh", at: gone, root: filepath.Join(sys, "000000000010"), host: host, setup: func(t *testing.T, root string) {
			if err := os.Chtimes(root, now, now); err != nil {
				t.Fatal(err)
			}
		}},
		{node: "gone-link", at: gone, root: filepath.Join(sys, "000000000011"), host: host},
		{node: "gone-self", at: gone, root: f.root, host: host},
	}
	for _, tt := range tests {
		if tt.node == "gone-link" {
			target := filepath.Join(outside, "target")
			mkdir(t, target)
			if err := os.Symlink(target, tt.root); err != nil {
				t.Fatal(err)
			}
		} else {
			mkdir(t, tt.root)
		}
		if tt.setup != nil {
			tt.setup(t, tt.root)
		}
		putBeatRoot(t, f.kv, tt.node, tt.at, tt.root, tt.host)
	}
	st, err := f.m.reap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.GoneRoots != 1 {
		t.Errorf("gone roots %d, want 1", st.GoneRoots)
	}
	for _, tt := range tests {
		if exists(tt.root) == tt.removed {
			t.Errorf("%s: root %s exists %v, want removed %v", tt.node, tt.root, exists(tt.root), tt.removed)
		}
	}
	if !exists(filepath.Join(outside, "target")) {
		t.Error("a symbolic link's target removed")
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}
