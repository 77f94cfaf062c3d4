package sandbox

import (
	"os"
	"slices"
	"strconv"
	"strings"
)

// systemDirs are the host folders of programs and libraries a sandbox
// sees, read-only. On merged-/usr systems (Debian) all but /usr are
// symlinks into it and are recreated as symlinks.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"}

// etcFiles are the only parts of /etc a sandbox sees (read-only, each
// only if it exists): who is who, name resolution, TLS roots, the
// alternatives symlinks and the dynamic linker's cache.
var etcFiles = []string{
	"/etc/passwd", "/etc/group", "/etc/hosts", "/etc/resolv.conf", "/etc/nsswitch.conf",
	"/etc/ssl/certs", "/etc/alternatives", "/etc/ld.so.cache",
}

// sandboxPath is the PATH of commands in a sandbox.
const sandboxPath = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"

// mount is one system folder of the layout: a read-only bind of the host
// folder, or a symlink with the host's target.
type mount struct {
	path   string
	target string // symlink target; "" for a bind
}

// hostLayout inspects the host's system folders: symlinks are recreated,
// folders bound read-only, missing ones skipped.
func hostLayout() []mount {
	var out []mount
	for _, p := range systemDirs {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				continue
			}
			out = append(out, mount{path: p, target: t})
		case fi.IsDir():
			out = append(out, mount{path: p})
		}
	}
	return out
}

// bwrapSpec is everything one bubblewrap command line depends on.
type bwrapSpec struct {
	layout   []mount
	workdir  string
	network  bool
	uid, gid int
	tmpBytes int64    // size of the private /tmp
	env      []string // NAME=value, in order
	argv     []string // the command
}

// bwrapArgs builds bubblewrap's arguments (without the program name): new
// user, mount, pid, ipc, uts, cgroup and (unless network) net namespaces;
// an unprivileged uid/gid, no capabilities, no nested user namespaces; a
// fresh, read-only root holding only the system folders (read-only), a
// few /etc files (read-only), a private /proc (read-only), /dev
// (read-only but for its devices and a private /dev/shm) and /tmp, and
// the workdir (the one writable place that lasts) at its own host path,
// which is also the working directory. The environment is exactly env. /proc is read-only: the
// files of /proc/sys are root's, and were the sandbox's user root on the
// host (bubblewrap run as root) they would be writable (core_pattern!).
func bwrapArgs(s bwrapSpec) []string {
	a := make([]string, 0, 64+3*len(s.env)+len(s.argv))
	a = append(a, "--unshare-all")
	if s.network {
		a = append(a, "--share-net")
	}
	a = append(a,
		"--unshare-user", "--disable-userns",
		"--die-with-parent", "--new-session",
		"--uid", strconv.Itoa(s.uid), "--gid", strconv.Itoa(s.gid),
		"--hostname", "sandbox",
		"--cap-drop", "ALL",
		"--clearenv",
	)
	for _, kv := range s.env {
		k, v, _ := cutEnv(kv)
		a = append(a, "--setenv", k, v)
	}
	for _, m := range s.layout {
		if m.target != "" {
			a = append(a, "--symlink", m.target, m.path)
		} else {
			a = append(a, "--ro-bind", m.path, m.path)
		}
	}
	for _, f := range etcFiles {
		a = append(a, "--ro-bind-try", f, f)
	}
	size := func(a []string) []string {
		if s.tmpBytes > 0 {
			return append(a, "--size", strconv.FormatInt(s.tmpBytes, 10))
		}
		return a
	}
	a = append(a, "--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev")
	a = append(size(a), "--tmpfs", "/dev/shm", "--remount-ro", "/dev")
	a = append(size(a), "--tmpfs", "/tmp")
	a = append(a, "--bind", s.workdir, s.workdir, "--remount-ro", "/", "--chdir", s.workdir, "--")
	return append(a, s.argv...)
}

func cutEnv(kv string) (k, v string, ok bool) { return strings.Cut(kv, "=") }

// baseEnv is the environment every command starts with; an exec's env
// adds to it and may override it.
func baseEnv(workdir string) []string {
	return []string{
		"PATH=" + sandboxPath,
		"HOME=" + workdir,
		"TMPDIR=/tmp",
		"LANG=C.UTF-8",
	}
}

// mergeEnv returns base with extra applied: a name in extra replaces the
// base's value in place, new names follow in sorted order.
func mergeEnv(base []string, extra map[string]string) []string {
	if len(extra) == 0 {
		return base
	}
	out := make([]string, 0, len(base)+len(extra))
	seen := make(map[string]bool, len(extra))
	for _, kv := range base {
		k, _, _ := cutEnv(kv)
		if v, ok := extra[k]; ok {
			out = append(out, k+"="+v)
			seen[k] = true
			continue
		}
		out = append(out, kv)
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if !seen[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+extra[k])
	}
	return out
}
