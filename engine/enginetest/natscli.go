package enginetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// NatsCLIVersion is the natscli release the tests drive (.ci/run installs
// the same one first).
const NatsCLIVersion = "v0.5.0"

var (
	natsOnce sync.Once
	natsPath string
	natsErr  error
)

// NatsCLI finds the real nats CLI, installing it with `go install` into
// GOPATH/bin when it is missing (minutes on a cold build cache). It never
// skips: no CLI is a test failure that says why.
func NatsCLI(t testing.TB) string {
	t.Helper()
	natsOnce.Do(func() {
		if p, err := exec.LookPath("nats"); err == nil {
			natsPath = p
			return
		}
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		gopath, err := exec.Command(goBin, "env", "GOPATH").Output()
		if err != nil {
			natsErr = err
			return
		}
		bin := filepath.Join(strings.TrimSpace(strings.Split(string(gopath), string(os.PathListSeparator))[0]), "bin")
		if gobin, _ := exec.Command(goBin, "env", "GOBIN").Output(); strings.TrimSpace(string(gobin)) != "" {
			bin = strings.TrimSpace(string(gobin))
		}
		p := filepath.Join(bin, "nats")
		if _, err := os.Stat(p); err == nil {
			natsPath = p
			return
		}
		t.Logf("installing github.com/nats-io/natscli/nats@%s into %s", NatsCLIVersion, bin)
		out, err := exec.Command(goBin, "install", "github.com/nats-io/natscli/nats@"+NatsCLIVersion).CombinedOutput()
		if err != nil {
			natsErr = err
			t.Logf("%s", out)
			return
		}
		natsPath = p
	})
	if natsErr != nil || natsPath == "" {
		t.Fatalf("the nats CLI is needed and could not be found or installed (go install github.com/nats-io/natscli/nats@%s): %v", NatsCLIVersion, natsErr)
	}
	return natsPath
}

// RunNATS runs the nats CLI against the server at url with a throwaway
// home (no saved contexts) and returns its standard output; a failure
// fails the test with the CLI's output.
func RunNATS(t testing.TB, url string, args ...string) string {
	t.Helper()
	out, err := TryNATS(t, url, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TryNATS is [RunNATS] for a command a test may try again: a failure is
// returned, with the CLI's output, instead of failing the test.
func TryNATS(t testing.TB, url string, args ...string) (string, error) {
	t.Helper()
	bin := NatsCLI(t) // before the deadline: installing takes minutes on a cold cache
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--server", url, "--no-context"}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		return string(out), fmt.Errorf("nats %v: %w\n%s%s", args, err, out, stderr)
	}
	return string(out), nil
}
