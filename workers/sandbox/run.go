package sandbox

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// runSpec is one process to run for an exec.
type runSpec struct {
	argv      []string // the shim's
	program   []string // what the shim execs
	limits    shimLimits
	env       []string
	dir       string
	stdin     string
	maxOutput int
	timeout   time.Duration
	grace     time.Duration
	cg        *execCgroup // nil without cgroups
	cred      *syscall.Credential
	// stop, when it closes, kills the exec at once (SIGKILL) and the
	// outcome says stopped: the workdir passed its disk quota.
	stop <-chan struct{}
	// outer says the started process is bubblewrap, whose sandbox must die
	// before it does: it reaps the sandbox's init, so killing it first
	// would leave that init to the host's pid 1 (a zombie where pid 1
	// does not reap).
	outer bool
}

// withProcsFiles is the shim's argv joining the cgroup files.
func (s runSpec) withProcsFiles(files []string) []string {
	return shimArgs(s.limits, files, s.program)
}

// runOutcome is what running it gave.
type runOutcome struct {
	exitCode       int
	signal         string
	stdout, stderr *capWriter
	timedOut       bool
	stopped        bool  // s.stop closed
	canceled       error // why ctx ended, when not by its deadline
	duration       time.Duration
}

// waitDelay bounds the wait for output pipes still held open after the
// process exited (by a process that escaped the kill, which cgroups and
// the pid namespace make unlikely).
const waitDelay = time.Second

// runProcess starts s.argv in its own process group, feeds stdin, caps
// the output, and waits for it until it exits, the timeout passes, s.stop
// closes or ctx ends; then it kills the exec's processes (SIGTERM, s.grace, SIGKILL)
// and waits for the process, so no zombie and no goroutine is left.
func runProcess(ctx context.Context, s runSpec) (runOutcome, error) {
	out := runOutcome{stdout: &capWriter{max: s.maxOutput}, stderr: &capWriter{max: s.maxOutput}}
	cmd := &exec.Cmd{Path: s.argv[0], Args: s.argv, Env: s.env, Dir: s.dir, Stdout: out.stdout, Stderr: out.stderr, WaitDelay: waitDelay}
	if s.stdin != "" {
		cmd.Stdin = strings.NewReader(s.stdin)
	}
	fd := -1
	if s.cg != nil {
		fd = s.cg.fd
	}
	cmd.SysProcAttr = sysProcAttr(fd, s.cred)
	start := time.Now()
	err := cmd.Start()
	s.cg.closeFD()
	if err != nil {
		return out, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-timer.C:
		out.timedOut = true
		waitErr = s.kill(cmd.Process.Pid, done, s.grace, &out)
	case <-s.stop:
		out.stopped = true
		waitErr = s.kill(cmd.Process.Pid, done, 0, &out)
	case <-ctx.Done():
		if cause := context.Cause(ctx); errors.Is(cause, context.DeadlineExceeded) {
			out.timedOut = true
			waitErr = s.kill(cmd.Process.Pid, done, s.grace, &out)
		} else {
			out.canceled = cause
			waitErr = s.kill(cmd.Process.Pid, done, 0, &out)
		}
	}
	out.duration = time.Since(start)
	if cmd.ProcessState == nil {
		return out, waitErr
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Exited():
			out.exitCode = ws.ExitStatus()
		case ws.Signaled():
			out.exitCode = 128 + int(ws.Signal())
			if out.signal == "" {
				out.signal = signalName(ws.Signal())
			}
		}
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return out, waitErr
	}
	return out, nil
}

// members are the exec's processes: its cgroup's and the started
// process's descendants (without cgroups, or processes that left the
// cgroup cannot escape the tree inside a pid namespace). The started
// process itself is included unless it is bubblewrap.
func (s runSpec) members(pid int) []procRef {
	refs := descendants(pid)
	seen := make(map[int]bool, len(refs))
	for _, r := range refs {
		seen[r.pid] = true
	}
	for _, r := range refsOf(s.cg.members()) {
		if !seen[r.pid] && r.pid != pid {
			seen[r.pid] = true
			refs = append(refs, r)
		}
	}
	if !s.outer {
		refs = append(refs, refsOf([]int{pid})...)
	}
	return refs
}

// killTick is how often the kill loop signals again.
const killTick = 10 * time.Millisecond

// killDeadline bounds the SIGKILL loop before the last resort.
const killDeadline = 3 * time.Second

// kill ends the exec: SIGTERM to its processes, up to grace for them to
// go, then SIGKILL to them until the started process exits (bubblewrap
// exits once its sandbox's init is gone, and the kernel kills the rest of
// the pid namespace with it), and as a last resort SIGKILL to the started
// process's group. It returns the wait's error and records the signal
// that ended it.
func (s runSpec) kill(pid int, done <-chan error, grace time.Duration, out *runOutcome) error {
	if grace > 0 {
		signalRefs(s.members(pid), syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case err := <-done:
			t.Stop()
			out.signal = "SIGTERM"
			return err
		case <-t.C:
		}
	}
	out.signal = "SIGKILL"
	deadline := time.Now().Add(killDeadline)
	tick := time.NewTicker(killTick)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		signalRefs(s.members(pid), syscall.SIGKILL)
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return <-done
}
