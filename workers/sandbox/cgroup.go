package sandbox

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroup versions.
const (
	cgNone = iota
	cgV1
	cgV2
)

// cgroupHost is this node's share of the cgroup tree: one group folder
// (per controller hierarchy on v1) named after the workdirs' root, so
// that two nodes (or two tests) on one machine never touch each other's
// sandboxes. Below it: one cgroup per sandbox, holding its limits, and
// one leaf per exec, holding the exec's processes.
//
//	v2: <root>/<group>/<sandbox id>/e<n>
//	v1: <root>/pids/<group>/<sandbox id>/e<n> and <root>/memory/<group>/...
type cgroupHost struct {
	version int
	// v2: the group folder. v1: the group folder of each controller
	// hierarchy, "" when that controller is not usable.
	base, pids, memory string
	// hasPids and hasMemory say which limits the cgroups enforce.
	hasPids, hasMemory bool
	// why explains a missing controller or version (logged at Start).
	why string
}

// groupName is the group folder's name for a workdirs root.
func groupName(root string) string {
	h := sha256.Sum256([]byte(root))
	return "iii-sandbox-" + hex.EncodeToString(h[:6])
}

// openCgroups finds the cgroup version mounted at root and creates this
// node's group folder. A host without a writable pids or memory
// controller is not an error: the result says what is usable and why the
// rest is not; rlimits then stand in where they can.
func openCgroups(root, group string) *cgroupHost {
	if root == "" {
		return &cgroupHost{why: "cgroups are off (setting cgroup_root=off)"}
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return openV2(root, group)
	}
	return openV1(root, group)
}

func openV2(root, group string) *cgroupHost {
	h := &cgroupHost{version: cgV2, base: filepath.Join(root, group)}
	if err := os.Mkdir(h.base, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return &cgroupHost{why: fmt.Sprintf("cgroup v2 at %s is not writable: %v", root, err)}
	}
	// Delegate pids and memory to the group (the root may refuse, e.g. in
	// a container whose cgroup holds processes), then to its children.
	avail := readControllers(filepath.Join(h.base, "cgroup.controllers"))
	for _, c := range []string{"pids", "memory"} {
		if !avail[c] {
			_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+"+c), 0)
		}
	}
	avail = readControllers(filepath.Join(h.base, "cgroup.controllers"))
	var missing []string
	for _, c := range []string{"pids", "memory"} {
		ok := avail[c] && os.WriteFile(filepath.Join(h.base, "cgroup.subtree_control"), []byte("+"+c), 0) == nil
		switch {
		case ok && c == "pids":
			h.hasPids = true
		case ok:
			h.hasMemory = true
		default:
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		h.why = fmt.Sprintf("cgroup v2 at %s: controllers %s are not available to %s", root, strings.Join(missing, ", "), h.base)
	}
	return h
}

func readControllers(path string) map[string]bool {
	b, _ := os.ReadFile(path)
	out := map[string]bool{}
	for _, c := range strings.Fields(string(b)) {
		out[c] = true
	}
	return out
}

func openV1(root, group string) *cgroupHost {
	h := &cgroupHost{version: cgV1}
	var why []string
	for _, c := range []string{"pids", "memory"} {
		hier := filepath.Join(root, c)
		if _, err := os.Stat(filepath.Join(hier, "cgroup.procs")); err != nil {
			why = append(why, fmt.Sprintf("no cgroup v1 %s hierarchy at %s", c, hier))
			continue
		}
		dir := filepath.Join(hier, group)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			why = append(why, fmt.Sprintf("cgroup v1 %s at %s is not writable: %v", c, hier, err))
			continue
		}
		if c == "pids" {
			h.pids, h.hasPids = dir, true
		} else {
			// Children count against their parents (always so on new
			// kernels; the write fails harmlessly there).
			_ = os.WriteFile(filepath.Join(dir, "memory.use_hierarchy"), []byte("1"), 0)
			h.memory, h.hasMemory = dir, true
		}
	}
	if !h.hasPids && !h.hasMemory {
		return &cgroupHost{why: strings.Join(why, "; ")}
	}
	h.why = strings.Join(why, "; ")
	return h
}

// usable reports whether execs get cgroups: on v2 even without a
// controller, for tracking (every process of an exec is found, and
// killed, through its cgroup).
func (h *cgroupHost) usable() bool { return h.version != cgNone }

// removeGroup removes the group folders once no sandbox is left in them
// (an error, when some are, is ignored: they stay for the next start).
func (h *cgroupHost) removeGroup() {
	for _, g := range []string{h.base, h.pids, h.memory} {
		if g != "" {
			_ = syscall.Rmdir(g)
		}
	}
}

// sandboxDirs are the folders of sandbox id in each hierarchy in use.
func (h *cgroupHost) sandboxDirs(id string) []string {
	switch h.version {
	case cgV2:
		return []string{filepath.Join(h.base, id)}
	case cgV1:
		var out []string
		if h.hasPids {
			out = append(out, filepath.Join(h.pids, id))
		}
		if h.hasMemory {
			out = append(out, filepath.Join(h.memory, id))
		}
		return out
	}
	return nil
}

// sandboxCgroup is one sandbox's cgroup(s), where its limits are set.
type sandboxCgroup struct {
	h    *cgroupHost
	id   string
	dirs []string
}

// ensureSandbox creates (or finds) the cgroups of sandbox id and sets its
// limits. It returns nil, nil when the host has no usable cgroups.
func (h *cgroupHost) ensureSandbox(id string, l Limits) (*sandboxCgroup, error) {
	if !h.usable() {
		return nil, nil
	}
	s := &sandboxCgroup{h: h, id: id, dirs: h.sandboxDirs(id)}
	for _, d := range s.dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("sandbox: create cgroup %s: %w", d, err)
		}
	}
	mem := strconv.FormatInt(int64(l.MemoryMB)<<20, 10)
	var writes [][2]string
	switch h.version {
	case cgV2:
		d := s.dirs[0]
		if h.hasPids {
			writes = append(writes, [2]string{filepath.Join(d, "pids.max"), strconv.Itoa(l.Pids)})
		}
		if h.hasMemory {
			writes = append(writes, [2]string{filepath.Join(d, "memory.max"), mem})
			if _, err := os.Stat(filepath.Join(d, "memory.swap.max")); err == nil {
				writes = append(writes, [2]string{filepath.Join(d, "memory.swap.max"), "0"})
			}
		}
	case cgV1:
		if h.hasPids {
			writes = append(writes, [2]string{filepath.Join(h.pids, id, "pids.max"), strconv.Itoa(l.Pids)})
		}
		if h.hasMemory {
			d := filepath.Join(h.memory, id)
			writes = append(writes, [2]string{filepath.Join(d, "memory.limit_in_bytes"), mem})
			// memory+swap no larger than memory: no swapping past the limit.
			if _, err := os.Stat(filepath.Join(d, "memory.memsw.limit_in_bytes")); err == nil {
				writes = append(writes, [2]string{filepath.Join(d, "memory.memsw.limit_in_bytes"), mem})
			}
		}
	}
	for _, w := range writes {
		if err := writeCgroupFile(w[0], w[1]); err != nil {
			s.remove()
			return nil, err
		}
	}
	return s, nil
}

// writeCgroupFile writes value to a cgroup control file.
func writeCgroupFile(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("sandbox: write %s to %s: %w", value, path, err)
	}
	return nil
}

// oomKills is the number of processes the memory limit killed so far
// in the sandbox (v2: memory.events counts the whole subtree).
func (s *sandboxCgroup) oomKills() int64 {
	if s == nil || !s.h.hasMemory || s.h.version != cgV2 {
		return 0
	}
	return readOOMKills(filepath.Join(s.dirs[0], "memory.events"))
}

// readOOMKills reads the oom_kill counter of memory.events (v2) or
// memory.oom_control (v1).
func readOOMKills(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "oom_kill" {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// execCgroup is the leaf cgroup (one per hierarchy) of one exec.
type execCgroup struct {
	dirs []string
	v2   bool
	fd   int    // v2: an open descriptor of the leaf for clone3 until the start, else -1
	mem  string // v1: the leaf in the memory hierarchy, where OOM kills are counted
}

// newExec creates the leaf of exec n. On v2 the process is born into it
// (SysProcAttr.CgroupFD); on v1 the shim writes its pid into procsFiles
// before it execs anything, so they belong to uid:gid (the shim's, when
// not -1).
func (s *sandboxCgroup) newExec(n uint64, uid, gid int) (*execCgroup, error) {
	e := &execCgroup{fd: -1, v2: s.h.version == cgV2}
	name := "e" + strconv.FormatUint(n, 10)
	for _, d := range s.dirs {
		leaf := filepath.Join(d, name)
		if err := os.Mkdir(leaf, 0o755); err != nil {
			e.remove()
			return nil, fmt.Errorf("sandbox: create cgroup %s: %w", leaf, err)
		}
		e.dirs = append(e.dirs, leaf)
		if s.h.version == cgV1 && s.h.hasMemory && strings.HasPrefix(leaf, s.h.memory+"/") {
			e.mem = leaf
		}
		if s.h.version == cgV1 && uid >= 0 {
			if err := os.Chown(filepath.Join(leaf, "cgroup.procs"), uid, gid); err != nil {
				e.remove()
				return nil, fmt.Errorf("sandbox: chown cgroup %s: %w", leaf, err)
			}
		}
	}
	if s.h.version == cgV2 {
		fd, err := syscall.Open(e.dirs[0], syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			e.remove()
			return nil, fmt.Errorf("sandbox: open cgroup %s: %w", e.dirs[0], err)
		}
		e.fd = fd
	}
	return e, nil
}

// procsFiles are the cgroup.procs files the shim joins (v1 only).
func (e *execCgroup) procsFiles() []string {
	if e == nil || e.v2 {
		return nil
	}
	out := make([]string, len(e.dirs))
	for i, d := range e.dirs {
		out[i] = filepath.Join(d, "cgroup.procs")
	}
	return out
}

// oomKills is the number of the exec's processes the memory limit
// killed (v1, where kills are counted in the victim's own cgroup).
func (e *execCgroup) oomKills() int64 {
	if e == nil || e.mem == "" {
		return 0
	}
	return readOOMKills(filepath.Join(e.mem, "memory.oom_control"))
}

// members lists the processes in the leaf.
func (e *execCgroup) members() []int {
	if e == nil {
		return nil
	}
	return cgroupProcs(e.dirs...)
}

// cgroupProcs reads the pids of the cgroup.procs files of dirs.
func cgroupProcs(dirs ...string) []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// closeFD releases the v2 descriptor once the process has started.
func (e *execCgroup) closeFD() {
	if e != nil && e.fd >= 0 {
		_ = syscall.Close(e.fd)
		e.fd = -1
	}
}

// remove kills what is left in the leaf and removes it.
func (e *execCgroup) remove() {
	if e == nil {
		return
	}
	e.closeFD()
	killCgroups(e.dirs)
	for _, d := range e.dirs {
		rmdirRetry(d)
	}
}

// remove kills every process of the sandbox and removes its cgroups.
func (s *sandboxCgroup) remove() {
	if s == nil {
		return
	}
	for _, d := range s.dirs {
		removeCgroupTree(d)
	}
}

// removeCgroupTree kills every process in dir and its children and
// removes them, leaves first.
func removeCgroupTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, ent := range entries {
		if ent.IsDir() {
			removeCgroupTree(filepath.Join(dir, ent.Name()))
		}
	}
	killCgroups([]string{dir})
	rmdirRetry(dir)
}

// killCgroups SIGKILLs every process in dirs until they are empty, for
// up to two seconds (a fork bomb forks while it is killed; the pids
// limit keeps that finite).
func killCgroups(dirs []string) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		pids := cgroupProcs(dirs...)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		signalRefs(refsOf(pids), syscall.SIGKILL)
		time.Sleep(5 * time.Millisecond)
	}
}

// rmdirRetry removes an empty cgroup, retrying for up to about a second
// (backing off from 1 ms) while the kernel finishes tearing its last
// processes down.
func rmdirRetry(dir string) {
	wait := time.Millisecond
	for deadline := time.Now().Add(time.Second); ; {
		err := syscall.Rmdir(dir)
		if err == nil || !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// sandboxIDs lists the sandbox cgroups present under the group folders.
func (h *cgroupHost) sandboxIDs() map[string]bool {
	out := map[string]bool{}
	for _, g := range []string{h.base, h.pids, h.memory} {
		if g == "" {
			continue
		}
		entries, _ := os.ReadDir(g)
		for _, ent := range entries {
			if ent.IsDir() {
				out[ent.Name()] = true
			}
		}
	}
	return out
}

// removeOrphan removes the cgroups of a sandbox that has no record.
func (h *cgroupHost) removeOrphan(id string) {
	for _, d := range h.sandboxDirs(id) {
		if _, err := os.Stat(d); err == nil {
			removeCgroupTree(d)
		}
	}
}
