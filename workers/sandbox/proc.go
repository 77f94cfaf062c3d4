package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// procRef names one process for certain: a pid alone may be reused by
// the time it is signalled, a pid with its start time may not.
type procRef struct {
	pid   int
	start uint64 // start time in clock ticks since boot (/proc/<pid>/stat field 22)
}

// procStat is what the worker reads of /proc/<pid>/stat.
type procStat struct {
	state byte
	ppid  int
	start uint64
}

// parseProcStat parses the contents of /proc/<pid>/stat. The command name
// (field 2) is in parentheses and may hold anything, spaces and ')'
// included, so the fields are counted from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return procStat{}, errors.New("stat: no command name")
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, errors.New("stat: too few fields")
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil || ppid < 0 {
		return procStat{}, fmt.Errorf("stat: bad ppid %q", f[1])
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("stat: bad start time %q", f[19])
	}
	return procStat{state: f[0][0], ppid: ppid, start: start}, nil
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

// refsOf pins pids to their start times; pids that are gone are left out.
func refsOf(pids []int) []procRef {
	out := make([]procRef, 0, len(pids))
	for _, pid := range pids {
		if st, err := readProcStat(pid); err == nil {
			out = append(out, procRef{pid: pid, start: st.start})
		}
	}
	return out
}

// descendants lists every living descendant of root (not root itself) by
// scanning /proc. Inside a pid namespace every orphan is re-parented to
// the namespace's init, itself a descendant of bubblewrap, so this finds
// a whole sandbox even without cgroups.
func descendants(root int) []procRef {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	_ = d.Close()
	children := map[int][]procRef{}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil {
			continue
		}
		children[st.ppid] = append(children[st.ppid], procRef{pid: pid, start: st.start})
	}
	var out []procRef
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !seen[c.pid] {
				seen[c.pid] = true
				out = append(out, c)
				queue = append(queue, c.pid)
			}
		}
	}
	return out
}

// signalRefs sends sig to every process of refs that is still the same
// process: each is pinned by a pidfd (os.FindProcess) before its start
// time is checked again, so a pid reused meanwhile is never signalled. It
// returns how many were signalled.
func signalRefs(refs []procRef, sig syscall.Signal) int {
	n := 0
	for _, r := range refs {
		p, err := os.FindProcess(r.pid)
		if err != nil {
			continue
		}
		if st, err := readProcStat(r.pid); err == nil && st.start == r.start {
			if p.Signal(sig) == nil {
				n++
			}
		}
		_ = p.Release()
	}
	return n
}

// signalName names a signal the way results report it ("SIGKILL").
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGXCPU:
		return "SIGXCPU"
	case syscall.SIGXFSZ:
		return "SIGXFSZ"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGFPE:
		return "SIGFPE"
	case syscall.SIGILL:
		return "SIGILL"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return "SIG" + strconv.Itoa(int(sig))
}
