package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestUpProcess runs the real binary as README says (`iii up`), talks to it
// and stops it with Ctrl-C (SIGINT): it must shut down cleanly, exit 0.
func TestUpProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "iii")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	home := t.TempDir()
	cmd := exec.Command(bin, "up", "--listen", "127.0.0.1:0", "--http", "", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "III_HOME="+home)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "nats:  "); ok {
				urls <- url
			}
		}
	}()
	var url string
	select {
	case url = <-urls:
	case <-time.After(30 * time.Second):
		t.Fatal("iii up did not print its URL in 30s")
	}
	out, err := runIII(t, "trigger", "state::set", `{"scope":"p","key":"k","value":1}`, "--nats", url)
	if err != nil {
		t.Fatalf("trigger against the process: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(home, "jetstream")); err != nil {
		t.Fatalf("data not under III_HOME: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("iii up after SIGINT: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("iii up did not stop within 20s of SIGINT")
	}
}
