package sandbox

import "syscall"

// sysProcAttr puts a started process in its own process group, kills it
// when the worker dies (PR_SET_PDEATHSIG), runs it as cred when not nil,
// and, given a cgroup v2 descriptor (>= 0), has it born in that cgroup
// (clone3 CLONE_INTO_CGROUP, done by the worker's own credentials before
// the switch), so it cannot fork before it is accounted.
func sysProcAttr(cgroupFD int, cred *syscall.Credential) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if cgroupFD >= 0 {
		a.UseCgroupFD, a.CgroupFD = true, cgroupFD
	}
	return a
}
