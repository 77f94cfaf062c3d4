package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/enginetest"
)

// buildIII builds the binary into a temporary directory.
func buildIII(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "iii")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// upProcess is a running `iii up` child process.
type upProcess struct {
	cmd  *exec.Cmd
	url  string
	done chan error // cmd.Wait's result
	mu   sync.Mutex
	out  strings.Builder // stdout and stderr
}

// output is what the process printed so far.
func (p *upProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startUp runs `iii up` of bin on home with args on random ports and
// waits until it printed its URL; the process is killed at the test's end.
func startUp(t *testing.T, bin, home string, args ...string) *upProcess {
	t.Helper()
	enginetest.Reachable(t, home) // a killed node's sandbox root stays in the test's temp dir
	cmd := exec.Command(bin, append([]string{"up", "--listen", "127.0.0.1:0", "--http", "", "--log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), "III_HOME="+home)
	p := &upProcess{cmd: cmd, done: make(chan error, 1)}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	urls := make(chan string, 1)
	var wg sync.WaitGroup
	read := func(r io.Reader) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if url, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "nats:  "); ok {
				urls <- url
			}
		}
	}
	wg.Add(2)
	go read(stdout)
	go read(stderr)
	go func() {
		wg.Wait() // Wait closes the pipes: read them to the end first
		p.done <- cmd.Wait()
	}()
	select {
	case p.url = <-urls:
	case err := <-p.done:
		t.Fatalf("iii up exited before it was up: %v\n%s", err, p.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("iii up did not print its URL in 30s:\n%s", p.output())
	}
	return p
}

// wait waits at most d for the process to exit and returns its exit code.
func (p *upProcess) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("iii up did not exit within %v:\n%s", d, p.output())
		return -1
	}
}

// TestUpProcess runs the real binary as README says (`iii up`), talks to it
// and stops it with Ctrl-C (SIGINT): it must shut down cleanly, exit 0.
func TestUpProcess(t *testing.T) {
	bin := buildIII(t)
	home := t.TempDir()
	p := startUp(t, bin, home)
	out, err := runIII(t, "trigger", "state::set", `{"scope":"p","key":"k","value":1}`, "--nats", p.url)
	if err != nil {
		t.Fatalf("trigger against the process: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(home, "jetstream")); err != nil {
		t.Fatalf("data not under III_HOME: %v", err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("iii up after SIGINT: exit code %d\n%s", code, p.output())
	}
}
