package sandbox

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

const vaultSecret = "sk-ant-NEVER-SEE-THIS"

// writeVault plants a fake credential vault where the auth worker keeps
// it: <home>/auth/credentials.json, 0600 in a 0700 folder.
func writeVault(t *testing.T, home string) string {
	t.Helper()
	dir := filepath.Join(home, "auth")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "credentials.json")
	body := `{"version":1,"credentials":{"anthropic":{"type":"api_key","key":"` + vaultSecret + `"}}}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// isolationModes are the two ways bubblewrap runs on a root node: as the
// unprivileged host user (the default), and as root (host_uid=0, or the
// fallback where the former does not work). Every escape test runs in
// both.
var isolationModes = []struct {
	name  string
	owner int
	opts  []Option
}{
	{"host user", DefaultHostUID, nil},
	{"root", 0, []Option{WithHostUser(0, 0)}},
}

func forEachMode(t *testing.T, test func(t *testing.T, f *fixture)) {
	modes := isolationModes
	if os.Geteuid() != 0 {
		// A node that is not root runs bubblewrap as its own user, the
		// owner of the sandbox's files, whatever host_uid says.
		modes = modes[:0:0]
		modes = append(modes, struct {
			name  string
			owner int
			opts  []Option
		}{"node user", -1, nil})
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, mode.opts...)
			if uid, _ := f.w.FileOwner(); uid != mode.owner {
				t.Fatalf("file owner %d, want %d", uid, mode.owner)
			}
			test(t, f)
		})
	}
}

// Every attempt to read what is outside the session's workdir fails: the
// vault, the home, another session's workdir, the root's other files,
// through .., absolute paths, symlinks planted inside or from the host,
// /proc/1/root.
func TestEscapeRead(t *testing.T) {
	t.Parallel()
	forEachMode(t, escapeRead)
}

func escapeRead(t *testing.T, f *fixture) {
	vault := writeVault(t, f.home)
	a := f.create(t, CreateRequest{SessionID: "alice"})
	b := f.create(t, CreateRequest{SessionID: "bob"})
	bobFile := filepath.Join(b.Workdir, "bob-secret.txt")
	if r := f.sh(t, "bob", "echo bob-private > bob-secret.txt"); r.ExitCode != 0 {
		t.Fatalf("bob's write: %+v", r)
	}
	if err := os.WriteFile(filepath.Join(f.root, "x"), []byte("root-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A symlink planted from the host side (as a buggy tool could).
	if err := os.Symlink(vault, filepath.Join(a.Workdir, "host-link")); err != nil {
		t.Fatal(err)
	}

	attempts := map[string]string{
		"vault":                "cat " + vault,
		"vault dir":            "ls " + filepath.Dir(vault),
		"home":                 "ls -la " + f.home,
		"other session":        "cat " + bobFile,
		"other workdir":        "ls " + b.Workdir,
		"dot dot":              "cat ../x",
		"dot dot bob":          "cat ../" + b.SandboxID + "/bob-secret.txt",
		"root":                 "ls " + f.root,
		"symlink inside":       "ln -s " + vault + " v && cat v",
		"symlink from host":    "cat host-link",
		"proc 1 root":          "cat /proc/1/root" + vault,
		"proc self root":       "cat /proc/self/root" + vault,
		"proc 1 cwd":           "cat /proc/1/cwd/../" + b.SandboxID + "/bob-secret.txt",
		"root home":            "ls /root",
		"home dirs":            "ls /home",
		"work":                 "ls /work",
		"etc shadow":           "cat /etc/shadow",
		"find vault":           "find / -path /proc -prune -o -path /usr -prune -o -name credentials.json -print 2>/dev/null | xargs -r cat",
		"grep secret":          "grep -rs --exclude-dir=usr --exclude-dir=proc " + vaultSecret + " /",
		"mount":                "mount --bind / /tmp/x 2>&1; cat /tmp/x" + vault,
		"nested user ns":       "unshare -Ur cat " + vault,
		"host proc via sysrq":  "cat /proc/sysrq-trigger",
		"dev disk":             "ls /dev/sd* /dev/vd* /dev/nvme* 2>&1",
		"chroot":               "chroot / cat " + vault,
		"python open":          "python3 -c 'print(open(\"" + vault + "\").read())'",
		"read bob by proc cwd": "cat /proc/*/cwd/bob-secret.txt",
	}
	for name, cmd := range attempts {
		t.Run(name, func(t *testing.T) {
			r := f.sh(t, "alice", cmd)
			out := r.Stdout + r.Stderr
			if strings.Contains(out, vaultSecret) || strings.Contains(out, "bob-private") || strings.Contains(out, "root-file") {
				t.Fatalf("escaped with %q: %+v", cmd, r)
			}
		})
	}
	// Bob still sees his own file: the attempts failed for isolation, not
	// for a broken sandbox.
	if r := f.sh(t, "bob", "cat bob-secret.txt"); strings.TrimSpace(r.Stdout) != "bob-private" {
		t.Fatalf("bob's read: %+v", r)
	}
}

// Writes outside the workdir fail or land in the sandbox's private /tmp;
// nothing appears on the host, no kernel setting changes.
func TestEscapeWrite(t *testing.T) {
	t.Parallel()
	forEachMode(t, escapeWrite)
}

func escapeWrite(t *testing.T, f *fixture) {
	f.create(t, CreateRequest{SessionID: "w"})
	hostTmp := filepath.Join(os.TempDir(), fmt.Sprintf("iii-escape-%d", os.Getpid()))
	homeFile := filepath.Join(f.home, "pwned")
	rootFile := filepath.Join(f.root, "pwned")
	corePattern, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	// The test's home is under /tmp: inside, its path is in the sandbox's
	// private /tmp, where a write may succeed and vanish with the exec.
	// What counts is that nothing appears on the host (checked below).
	for _, cmd := range []string{"echo x > " + homeFile, "echo x > ../pwned", "echo x > " + rootFile} {
		f.sh(t, "w", cmd)
	}
	// Every one of these fails: the sandbox's root, /dev and /proc are
	// read-only too, not only the host's folders (which are not there).
	attempts := map[string]string{
		"usr":       "echo x > /usr/pwned",
		"usr bin":   "cp /bin/sh /usr/bin/pwned",
		"etc":       "echo x > /etc/passwd",
		"mkdir etc": "mkdir -p /etc/cron.d && echo x > /etc/cron.d/pwned",
		"slash":     "echo x > /pwned",
		"dev":       "echo x > /dev/pwned",
		// Writing the current value back changes nothing even if it
		// succeeded, but it must not: a writable core_pattern runs any
		// program as root on the host.
		"sysctl core_pattern": "cat /proc/sys/kernel/core_pattern > /tmp/cp && cat /tmp/cp > /proc/sys/kernel/core_pattern",
		"sysctl drop caches":  "echo 1 > /proc/sys/vm/drop_caches",
		"proc self":           "echo 0 > /proc/self/oom_score_adj",
	}
	for name, cmd := range attempts {
		t.Run(name, func(t *testing.T) {
			if r := f.sh(t, "w", cmd); r.ExitCode == 0 {
				t.Fatalf("%q succeeded: %+v", cmd, r)
			}
		})
	}
	// The sandbox's /tmp is its own.
	if r := f.sh(t, "w", "echo x > "+hostTmp); r.ExitCode != 0 {
		t.Fatalf("private /tmp: %+v", r)
	}
	if b, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(b) != string(corePattern) {
		t.Fatalf("core_pattern changed to %q", b)
	}
	for _, p := range []string{"/usr/pwned", "/usr/bin/pwned", hostTmp, homeFile, rootFile, "/etc/cron.d/pwned", "/pwned", "/dev/pwned"} {
		if exists(p) {
			_ = os.Remove(p)
			t.Errorf("%s was written on the host", p)
		}
	}
	if b, _ := os.ReadFile("/etc/passwd"); strings.HasPrefix(string(b), "x\n") {
		t.Fatal("/etc/passwd was overwritten")
	}
	// The workdir is writable, /tmp and /dev/shm are private to one exec.
	if r := f.sh(t, "w", "echo ok > here && cat here && echo t > /tmp/t && cat /tmp/t && echo s > /dev/shm/s && cat /dev/shm/s"); r.Stdout != "ok\nt\ns\n" {
		t.Fatalf("workdir/tmp: %+v", r)
	}
	if r := f.sh(t, "w", "cat /tmp/t"); r.ExitCode == 0 {
		t.Fatalf("/tmp outlived its exec: %+v", r)
	}
}

// Without network the sandbox has only a loopback of its own: the host's
// 127.0.0.1 is unreachable. With network:true the same attempt connects
// (which proves the attempt would notice).
func TestEscapeNetwork(t *testing.T) {
	t.Parallel()
	forEachMode(t, escapeNetwork)
}

func escapeNetwork(t *testing.T, f *fixture) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("reached"))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	host, port := u.Hostname(), u.Port()

	off := f.create(t, CreateRequest{SessionID: "off"})
	if off.Network {
		t.Fatal("network on by default")
	}
	if r := f.sh(t, "off", "cat /proc/net/dev"); strings.Contains(r.Stdout, "eth") || !strings.Contains(r.Stdout, "lo:") {
		t.Fatalf("interfaces: %+v", r)
	}
	probe := fmt.Sprintf(`exec 3<>/dev/tcp/%s/%s && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && cat <&3`, host, port)
	args := []string{"/bin/bash", "-c", probe}
	if !exists("/bin/bash") {
		args = []string{"python3", "-c", fmt.Sprintf("import urllib.request;print(urllib.request.urlopen('%s').read())", srv.URL)}
	}
	r := f.shell(t, "off", Command{Argv: args})
	if r.ExitCode == 0 || strings.Contains(r.Stdout, "reached") || hits.Load() != 0 {
		t.Fatalf("reached the host with network off: %+v (hits %d)", r, hits.Load())
	}

	f.create(t, CreateRequest{SessionID: "on", Network: true})
	r = f.shell(t, "on", Command{Argv: args})
	if !strings.Contains(r.Stdout, "reached") || hits.Load() != 1 {
		t.Fatalf("network on did not connect: %+v (hits %d)", r, hits.Load())
	}
}

// The host's environment (where API keys live) never reaches a command.
func TestEscapeEnvironment(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.create(t, CreateRequest{SessionID: "env"})
	r := f.shell(t, "env", Command{Command: "env | sort", Env: map[string]string{"EXTRA": "1", "PATH": "/usr/bin:/bin"}})
	got := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	var names []string
	for _, kv := range got {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	if strings.Join(names, ",") != "EXTRA,HOME,LANG,PATH,PWD,TMPDIR" {
		t.Fatalf("environment %q", got)
	}
	if !strings.Contains(r.Stdout, "PATH=/usr/bin:/bin\n") {
		t.Fatalf("PATH not overridden: %q", r.Stdout)
	}
}
