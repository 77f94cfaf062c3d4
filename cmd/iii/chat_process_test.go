package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// chatProcess is a running `iii chat` child process.
type chatProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when it exited
	mu    sync.Mutex
	out   strings.Builder
	err   strings.Builder
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// startChat runs bin's `iii chat` with args; its stdin stays open (line
// mode reads it) until the test closes it or ends.
func startChat(t *testing.T, bin string, args ...string) *chatProcess {
	t.Helper()
	p := &chatProcess{cmd: exec.Command(bin, append([]string{"chat", "--embedded=false"}, args...)...), done: make(chan struct{})}
	p.cmd.Stdout = lockedWriter{&p.mu, &p.out}
	p.cmd.Stderr = lockedWriter{&p.mu, &p.err}
	in, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = in
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// output is what the process printed so far on stdout and on stderr.
func (p *chatProcess) output() (string, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String(), p.err.String()
}

// wait waits at most d for the process to exit and returns its exit code.
func (p *chatProcess) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		out, errOut := p.output()
		t.Fatalf("iii chat did not exit within %v\nstdout:\n%s\nstderr:\n%s", d, out, errOut)
		return -1
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago: a
// restarted node must listen where the first one did for a client to
// find it again.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// chatModes are the two ways to send a message: -m, and a line of input.
var chatModes = []struct {
	name string
	// start runs chat on session sid against url with the message text.
	start func(t *testing.T, bin, url, sid, text string, args ...string) *chatProcess
}{
	{"message", func(t *testing.T, bin, url, sid, text string, args ...string) *chatProcess {
		return startChat(t, bin, append([]string{"--nats", url, "--session", sid, "-m", text}, args...)...)
	}},
	{"lines", func(t *testing.T, bin, url, sid, text string, args ...string) *chatProcess {
		p := startChat(t, bin, append([]string{"--nats", url, "--session", sid}, args...)...)
		if _, err := io.WriteString(p.stdin, text+"\n"); err != nil {
			t.Fatal(err)
		}
		return p
	}},
}

// A node stopped for good under a chat turn: chat used to print nothing
// for the two minutes nats.go spent reconnecting and then fail with a
// bare "nats: connection closed" (-m), or print it and wait for the next
// line (line mode). It must say in one line that the node was lost and
// exit 1 within the drain plus --reconnect-wait.
func TestChatNodeStopped(t *testing.T) {
	t.Parallel()
	bin := buildIII(t)
	for _, mode := range chatModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			sid := "chat_gone_" + mode.name
			up := startUp(t, bin, t.TempDir(), "--set", "orchestrator.drain_timeout=1s")
			c := mode.start(t, bin, up.url, sid, "/sleep 60000", "--reconnect-wait", "2s")
			waitTurn(t, up.url, sid, `"state": "assistant_streaming"`, 20*time.Second)
			if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			up.wait(t, 1*time.Second+stopGrace)
			if code := c.wait(t, 10*time.Second); code != 1 {
				out, errOut := c.output()
				t.Fatalf("exit code %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			out, errOut := c.output()
			var reason []string
			for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
				if strings.HasPrefix(l, "iii:") {
					reason = append(reason, l)
				}
			}
			if len(reason) != 1 || !strings.Contains(reason[0], "session "+sid+": lost the connection to the node at "+up.url) ||
				!strings.Contains(reason[0], "did not come back within 2s") {
				t.Fatalf("want one line saying the node was lost\nstdout:\n%s\nstderr:\n%s", out, errOut)
			}
		})
	}
}

// A node restarted under a chat turn within --reconnect-wait: the turn
// is durable, so chat follows it on the restarted node and prints the
// answer; line mode then goes on taking lines.
func TestChatNodeRestarted(t *testing.T) {
	t.Parallel()
	bin := buildIII(t)
	for _, mode := range chatModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			sid, home := "chat_back_"+mode.name, t.TempDir()
			listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			sets := []string{"--listen", listen, "--set", "orchestrator.drain_timeout=1s", "--set", "orchestrator.ack_wait=4s"}
			up := startUp(t, bin, home, sets...)
			text := "/sleep 4000"
			if mode.name == "message" {
				text += "\nthe answer"
			}
			c := mode.start(t, bin, up.url, sid, text, "--reconnect-wait", "1m")
			waitTurn(t, up.url, sid, `"state": "assistant_streaming"`, 20*time.Second)
			if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			up.wait(t, 1*time.Second+stopGrace)
			enginetest.Eventually(t, 10*time.Second, func() error {
				if _, errOut := c.output(); !strings.Contains(errOut, "lost the connection to the node; waiting up to 1m0s") {
					return fmt.Errorf("chat does not say it lost the node:\n%s", errOut)
				}
				return nil
			})
			up = startUp(t, bin, home, sets...)
			if mode.name == "lines" {
				// The turn (no text) ends at the second prompt; the
				// next line is answered.
				enginetest.Eventually(t, 60*time.Second, func() error {
					if out, _ := c.output(); strings.Count(out, "> ") < 2 {
						return fmt.Errorf("the first turn has not ended:\n%s", out)
					}
					return nil
				})
				if _, err := io.WriteString(c.stdin, "the answer\n"); err != nil {
					t.Fatal(err)
				}
				enginetest.Eventually(t, 30*time.Second, func() error {
					if out, _ := c.output(); !strings.Contains(out, "the answer\n") {
						return fmt.Errorf("no answer yet:\n%s", out)
					}
					return nil
				})
				_ = c.stdin.Close() // Ctrl-D
			}
			code := c.wait(t, 60*time.Second)
			out, errOut := c.output()
			if code != 0 || !strings.Contains(out, "the answer\n") || !strings.Contains(errOut, "(reconnected to") {
				t.Fatalf("exit code %d, want 0 and the answer\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
		})
	}
}

// A negative --reconnect-wait is refused before chat connects.
func TestChatRefusesNegativeReconnectWait(t *testing.T) {
	t.Parallel()
	out, err := runIII(t, "chat", "--nats", "nats://127.0.0.1:1", "--embedded=false", "--reconnect-wait", "-1s", "-m", "hi")
	if err == nil || !strings.Contains(err.Error(), "--reconnect-wait -1s: want 0 or more") {
		t.Fatalf("chat --reconnect-wait -1s: %v\n%s", err, out)
	}
}

// Flags that every run would refuse are refused before chat connects, with
// an invalid_payload error: an empty -m (a script's unset variable) went
// to line mode, which read stdin or sent nothing and exited 0; a bad
// --session, --provider or --model failed every line of line mode and
// chat still exited 0.
func TestChatRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"empty message", []string{"-m", ""}, "-m: the message is empty"},
		{"blank message", []string{"-m", " \t "}, "-m: the message is empty"},
		{"session", []string{"--session", "bad*id"}, `"bad*id"`},
		{"session with spaces", []string{"--session", "a b", "-m", "hi"}, `"a b"`},
		{"provider", []string{"--provider", "no pe"}, `provider "no pe"`},
		{"model", []string{"--model", "a\x1bb"}, "model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := newRootCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetIn(strings.NewReader("hello\n"))
			cmd.SetArgs(append([]string{"chat", "--nats", "nats://127.0.0.1:1", "--embedded=false"}, tc.args...))
			err := cmd.ExecuteContext(context.Background())
			if !errors.Is(err, wire.ErrInvalidPayload) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("chat %q: %v, want invalid_payload saying %s\n%s", tc.args, err, tc.want, out.String())
			}
		})
	}
}
