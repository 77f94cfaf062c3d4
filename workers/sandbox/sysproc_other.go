//go:build !linux

package sandbox

import "syscall"

// sysProcAttr puts a started process in its own process group. Outside
// Linux there is no bubblewrap and no cgroup: a node runs unsandboxed
// (allow_unsandboxed) or refuses.
func sysProcAttr(_ int, cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
