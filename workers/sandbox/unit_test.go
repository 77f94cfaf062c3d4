package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers"
)

func TestBwrapArgs(t *testing.T) {
	t.Parallel()
	layout := []mount{{path: "/usr"}, {path: "/bin", target: "usr/bin"}, {path: "/lib64", target: "usr/lib64"}}
	base := bwrapSpec{
		layout: layout, workdir: "/srv/iii/sandboxes/s1_abcdefghij", uid: 1000, gid: 1000, tmpBytes: 64 << 20,
		env: []string{"PATH=/usr/bin:/bin", "HOME=/srv/iii/sandboxes/s1_abcdefghij", "X=a=b"}, argv: []string{"/bin/sh", "-c", "echo hi"},
	}
	want := "--unshare-all --unshare-user --disable-userns --die-with-parent --new-session --uid 1000 --gid 1000 --hostname sandbox --cap-drop ALL " +
		"--clearenv --setenv PATH /usr/bin:/bin --setenv HOME /srv/iii/sandboxes/s1_abcdefghij --setenv X a=b " +
		"--ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib64 /lib64 " +
		"--ro-bind-try /etc/passwd /etc/passwd --ro-bind-try /etc/group /etc/group --ro-bind-try /etc/hosts /etc/hosts " +
		"--ro-bind-try /etc/resolv.conf /etc/resolv.conf --ro-bind-try /etc/nsswitch.conf /etc/nsswitch.conf " +
		"--ro-bind-try /etc/ssl/certs /etc/ssl/certs --ro-bind-try /etc/alternatives /etc/alternatives --ro-bind-try /etc/ld.so.cache /etc/ld.so.cache " +
		"--proc /proc --remount-ro /proc --dev /dev --size 67108864 --tmpfs /dev/shm --remount-ro /dev --size 67108864 --tmpfs /tmp " +
		"--bind /srv/iii/sandboxes/s1_abcdefghij /srv/iii/sandboxes/s1_abcdefghij --remount-ro / --chdir /srv/iii/sandboxes/s1_abcdefghij " +
		"-- /bin/sh -c echo hi"
	if got := strings.Join(bwrapArgs(base), " "); got != want {
		t.Fatalf("argv\n got %s\nwant %s", got, want)
	}
	net := base
	net.network = true
	if got := bwrapArgs(net); got[0] != "--unshare-all" || got[1] != "--share-net" {
		t.Fatalf("network argv %v", got[:3])
	}
	// Nothing but the system folders, /etc files and the workdir is bound.
	for i, a := range bwrapArgs(base) {
		if a == "--bind" || a == "--ro-bind" || a == "--ro-bind-try" || a == "--dev-bind" {
			src := bwrapArgs(base)[i+1]
			if src != "/usr" && src != base.workdir && !strings.HasPrefix(src, "/etc/") {
				t.Fatalf("binds %s", src)
			}
		}
	}
}

func TestShimArgs(t *testing.T) {
	t.Parallel()
	got := shimArgs(shimLimits{cpuSeconds: 60, fsizeBytes: 1 << 20, vmemBytes: 0}, []string{"/cg/pids/x/cgroup.procs"}, []string{"/usr/bin/bwrap", "--", "sh"})
	if got[0] != shell || got[1] != "-c" || got[2] != shimScript || got[3] != shimName {
		t.Fatalf("shim %q", got[:4])
	}
	if strings.Join(got[4:], " ") != "60 2048 0 /cg/pids/x/cgroup.procs -- /usr/bin/bwrap -- sh" {
		t.Fatalf("shim args %q", got[4:])
	}
	if !isShimFailure(125, "iii-sandbox: cannot set rlimits\n") || isShimFailure(125, "mine\n") || isShimFailure(1, "iii-sandbox: x") {
		t.Fatal("isShimFailure")
	}
}

func TestMergeEnv(t *testing.T) {
	t.Parallel()
	base := []string{"PATH=/bin", "HOME=/w"}
	got := mergeEnv(base, map[string]string{"Z": "1", "PATH": "/x", "A": "2=3"})
	if strings.Join(got, " ") != "PATH=/x HOME=/w A=2=3 Z=1" {
		t.Fatalf("env %q", got)
	}
	if got := mergeEnv(base, nil); len(got) != 2 {
		t.Fatalf("env %q", got)
	}
}

func TestSandboxID(t *testing.T) {
	t.Parallel()
	// A session homed in a region ("<region>.<name>") keeps its dot: a
	// sandbox id is a file and cgroup name and a KV key part, never a
	// subject token.
	for _, sid := range []string{"s1", "a_b_c", "x-y", strings.Repeat("z", 128), "eu.s1", "eu-west_2.chat-42", "r.x_y"} {
		id := newSandboxID(sid)
		got, err := parseSandboxID(id)
		if err != nil || got != sid {
			t.Fatalf("%s: %q %v", id, got, err)
		}
		if newSandboxID(sid) == id {
			t.Fatal("ids repeat")
		}
	}
	for _, bad := range []string{"", "_", "s1", "s1_", "s1_abc", "s1_ABCDEFGHIJ", "_abcdefghij", "a/b_abcdefghij", "s1_abcdefghij_", "../x_abcdefghij", "s 1_abcdefghij",
		"eu.s1.x_abcdefghij", ".s1_abcdefghij", "eu._abcdefghij", "eu..s1_abcdefghij", "a/b.c_abcdefghij", "._abcdefghij", ".._abcdefghij"} {
		if _, err := parseSandboxID(bad); !errors.Is(err, ErrInvalidID) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

func TestLimitsResolve(t *testing.T) {
	t.Parallel()
	got, err := Limits{MemoryMB: 100}.resolve(DefaultLimits, MaxLimits)
	if err != nil || got.MemoryMB != 100 || got.Pids != DefaultLimits.Pids {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []Limits{{Pids: 7}, {Pids: MaxLimits.Pids + 1}, {MemoryMB: -1}, {WallMs: 99}, {CPUSeconds: -5}, {DiskMB: MaxLimits.DiskMB + 1}} {
		if _, err := bad.resolve(DefaultLimits, MaxLimits); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}

func TestSettings(t *testing.T) {
	t.Parallel()
	opts, err := parseSettings(map[string]string{
		"root": "sb", "node": "n9", "allow_unsandboxed": "true", "bwrap": "/opt/bwrap", "cgroup_root": "off",
		"uid": "2000", "gid": "2001", "max_output_bytes": "4096", "kill_grace": "1s", "idle_ttl": "10m",
		"max_age": "2h", "reap_interval": "0", "orphan_after": "90s", "default_memory_mb": "2048", "max_memory_mb": "4096", "max_pids": "64", "default_pids": "32",
	}, "/home/iii")
	if err != nil {
		t.Fatal(err)
	}
	o, err := buildOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	if o.root != "/home/iii/sb" || o.node != "n9" || !o.allowUnsandboxed || o.bwrap != "/opt/bwrap" || o.cgroupRoot != "" ||
		o.uid != 2000 || o.gid != 2001 || o.maxOutput != 4096 || o.killGrace != time.Second || o.idleTTL != 10*time.Minute ||
		o.maxAge != 2*time.Hour || o.reapInterval != 0 || o.orphanAfter != 90*time.Second || o.defaults.MemoryMB != 2048 || o.max.MemoryMB != 4096 ||
		o.max.Pids != 64 || o.defaults.Pids != 32 || o.defaults.CPUSeconds != DefaultLimits.CPUSeconds {
		t.Fatalf("options %+v", o)
	}
	bad := []map[string]string{
		{"nope": "1"},
		{"root": ""},
		{"allow_unsandboxed": "maybe"},
		{"uid": "0"},
		{"uid": "x"},
		{"max_output_bytes": "999999999"},
		{"idle_ttl": "soon"},
		{"idle_ttl": "0"},
		{"kill_grace": "1h"},
		{"orphan_after": "0"},
		{"orphan_after": "500ms"},
		{"orphan_after": "-5m"},
		{"orphan_after": "later"},
		{"default_pids": "-1"},
		{"default_pids": "4"},
		{"max_memory_mb": "100"}, // below the default
		{"cgroup_root": "relative"},
		{"node": ""},
	}
	for _, s := range bad {
		opts, err := parseSettings(s, "/home/iii")
		if err == nil {
			_, err = buildOptions(opts)
		}
		if !errors.Is(err, engine.ErrInvalidOption) {
			t.Fatalf("%v: %v", s, err)
		}
	}
	// Provision checks them the same way, before Start.
	for _, s := range []map[string]string{{"orphan_after": "0"}, {"orphan_after": "soon"}, {"nope": "1"}} {
		err := NewWorker().Provision(context.Background(), workers.Env{Home: "/home/iii", Settings: map[string]map[string]string{WorkerName: s}})
		if !errors.Is(err, engine.ErrInvalidOption) {
			t.Fatalf("Provision %v: %v", s, err)
		}
	}
	if err := NewWorker().Provision(context.Background(), workers.Env{Home: "/home/iii", Settings: map[string]map[string]string{WorkerName: {"orphan_after": "10m"}}}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if _, err := parseSettings(map[string]string{"root": "rel"}, ""); err == nil {
		t.Fatal("relative root without home accepted")
	}
}

// Not parallel: AllocsPerRun refuses parallel tests.
func TestCapWriter(t *testing.T) {
	w := &capWriter{max: 10}
	chunk := []byte("0123456")
	allocs := testing.AllocsPerRun(100, func() { _, _ = w.Write(chunk) })
	if len(w.buf) != 10 || string(w.buf) != "0123456012" || !w.truncated() || allocs > 0 {
		t.Fatalf("buf %q total %d allocs %v", w.buf, w.total, allocs)
	}
	small := &capWriter{max: 10}
	_, _ = small.Write([]byte("abc"))
	if small.truncated() || small.total != 3 {
		t.Fatal("small write")
	}
}

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	line := "1234 (a (weird) name) S 77 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615"
	st, err := parseProcStat([]byte(line))
	if err != nil || st.state != 'S' || st.ppid != 77 || st.start != 987654 {
		t.Fatalf("%+v %v", st, err)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S", "1 (x) S notanumber 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 1 0 5", "1 (x) SS 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 1 0 5"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}

func TestCommandValidate(t *testing.T) {
	t.Parallel()
	ok := []Command{
		{Command: "true"},
		{Argv: []string{"ls", "-l"}},
		{Command: "x", Env: map[string]string{"_A1": "v", "PATH": "/bin"}, Stdin: "in", TimeoutMs: 5},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	}
	bad := []Command{
		{},
		{Command: "a", Argv: []string{"b"}},
		{Argv: []string{""}},
		{Argv: []string{"a", "b\x00"}},
		{Command: "a\x00"},
		{Command: "a", Env: map[string]string{"": "x"}},
		{Command: "a", Env: map[string]string{"A-B": "x"}},
		{Command: "a", Env: map[string]string{strings.Repeat("A", MaxEnvNameBytes+1): "x"}},
		{Command: "a", Env: map[string]string{"A": strings.Repeat("x", MaxEnvValue+1)}},
		{Command: "a", TimeoutMs: -1},
		{Command: "a", Stdin: strings.Repeat("x", MaxStdinBytes+1)},
		{Argv: make([]string, MaxArgv+1)},
		{Argv: []string{"a", strings.Repeat("x", MaxArgvBytes)}},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Fatalf("%.80v accepted", c)
		}
	}
}
