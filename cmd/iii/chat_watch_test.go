package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/enginetest"
)

// askLine is a line that makes the echo model call a function the default
// policy parks for approval.
const askLine = `/call fs::write {"path":"/tmp/x","content":"hi"}` + "\n"

// A node lost while line mode asks about a parked call: chat used to wait
// for the answer without a word, and only then found the node gone. It
// must say at once that it lost the node, and then exit 1 with one line
// when the node does not come back within --reconnect-wait, or follow the
// turn on the node that came back and send the answer there.
func TestChatQuestionWatchesNode(t *testing.T) {
	t.Parallel()
	bin := buildIII(t)
	for _, back := range []bool{false, true} {
		name := map[bool]string{false: "gone", true: "back"}[back]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sid, home := "chat_asked_"+name, t.TempDir()
			sets := []string{"--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--set", "orchestrator.drain_timeout=1s"}
			up := startUp(t, bin, home, sets...)
			wait := map[bool]string{false: "2s", true: "1m"}[back]
			c := startChat(t, bin, "--nats", up.url, "--session", sid, "--reconnect-wait", wait)
			if _, err := io.WriteString(c.stdin, askLine); err != nil {
				t.Fatal(err)
			}
			enginetest.Eventually(t, 20*time.Second, func() error {
				if out, _ := c.output(); !strings.Contains(out, "needs approval. Allow?") {
					return fmt.Errorf("no question yet:\n%s", out)
				}
				return nil
			})
			if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			up.wait(t, 1*time.Second+stopGrace)
			enginetest.Eventually(t, 5*time.Second, func() error {
				if _, errOut := c.output(); !strings.Contains(errOut, "lost the connection to the node; waiting up to "+map[bool]string{false: "2s", true: "1m0s"}[back]) {
					return fmt.Errorf("chat does not say it lost the node:\n%s", errOut)
				}
				return nil
			})
			if !back {
				if code := c.wait(t, 10*time.Second); code != 1 {
					out, errOut := c.output()
					t.Fatalf("exit code %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
				}
				out, errOut := c.output()
				if n := strings.Count(errOut, "iii:"); n != 1 || !strings.Contains(errOut, "iii: session "+sid+": lost the connection to the node at "+up.url+" (the node did not come back within 2s)") {
					t.Fatalf("want one line saying the node was lost\nstdout:\n%s\nstderr:\n%s", out, errOut)
				}
				return
			}
			up = startUp(t, bin, home, sets...)
			enginetest.Eventually(t, 30*time.Second, func() error {
				if _, errOut := c.output(); !strings.Contains(errOut, "(reconnected to "+up.url) {
					return fmt.Errorf("chat does not say the node is back:\n%s", errOut)
				}
				return nil
			})
			if _, err := io.WriteString(c.stdin, "n\n"); err != nil {
				t.Fatal(err)
			}
			enginetest.Eventually(t, 30*time.Second, func() error {
				if out, _ := c.output(); !strings.Contains(out, "denied by the user: decided in iii chat") || strings.Count(out, "> ") < 2 {
					return fmt.Errorf("the turn has not ended with the denial:\n%s", out)
				}
				return nil
			})
			_ = c.stdin.Close() // Ctrl-D
			if code := c.wait(t, 10*time.Second); code != 0 {
				out, errOut := c.output()
				t.Fatalf("exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
		})
	}
}

// A call that line mode asks about and that someone else decides (iii
// trigger approval::resolve, another chat): chat used to go on waiting
// for an answer it could only have sent in vain, and the line typed for
// it was taken as the answer to the next question. It must drop the
// question, say so, and follow the turn to its end.
func TestChatQuestionDecidedElsewhere(t *testing.T) {
	t.Parallel()
	a := startTestApp(t)
	url, sid := a.node.ClientURL(), "chat_elsewhere"
	in, typed := io.Pipe()
	t.Cleanup(func() { _ = typed.Close() })
	var out enginetest.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(in)
	cmd.SetArgs([]string{"chat", "--nats", url, "--session", sid})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(context.Background()) }()
	if _, err := io.WriteString(typed, askLine); err != nil {
		t.Fatal(err)
	}
	var callID string
	enginetest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(out.String(), "needs approval. Allow?") {
			return fmt.Errorf("no question yet:\n%s", out.String())
		}
		res, err := runIII(t, "trigger", "--nats", url, "approval::list_pending", fmt.Sprintf(`{"session_id":%q}`, sid))
		if err != nil {
			return err
		}
		var list struct {
			Pending []struct {
				FunctionCallID string `json:"function_call_id"`
			} `json:"pending"`
		}
		if err := json.Unmarshal([]byte(res), &list); err != nil || len(list.Pending) != 1 {
			return fmt.Errorf("list_pending: %v\n%s", err, res)
		}
		callID = list.Pending[0].FunctionCallID
		return nil
	})
	deny := fmt.Sprintf(`{"session_id":%q,"function_call_id":%q,"decision":"deny","reason":"decided elsewhere"}`, sid, callID)
	if res, err := runIII(t, "trigger", "--nats", url, "approval::resolve", deny); err != nil {
		t.Fatalf("resolve: %v\n%s", err, res)
	}
	enginetest.Eventually(t, 20*time.Second, func() error {
		s := out.String()
		if !strings.Contains(s, "("+callID+" was decided elsewhere; no answer needed)") || strings.Count(s, "> ") < 2 {
			return fmt.Errorf("chat still asks:\n%s", s)
		}
		return nil
	})
	_ = typed.Close() // Ctrl-D
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chat: %v\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("chat did not exit at the end of its input:\n%s", out.String())
	}
	if s := out.String(); !strings.Contains(s, "denied by the user: decided elsewhere") || strings.Contains(s, "decision not recorded") {
		t.Fatalf("chat output:\n%s", s)
	}
}

// A line typed while the node is away (stopped between two turns): chat
// used to fail it on the first request's timeout with a bare "error:
// context deadline exceeded" or "nats: timeout" and take the next line, as
// if a node were there. It must wait up to --reconnect-wait for the node,
// saying so, then send the line to the node that came back, or exit 1 with
// one line saying the node was lost and the message not sent.
func TestChatLineWhileNodeAway(t *testing.T) {
	t.Parallel()
	bin := buildIII(t)
	for _, back := range []bool{false, true} {
		name := map[bool]string{false: "gone", true: "back"}[back]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sid, home := "chat_away_"+name, t.TempDir()
			sets := []string{"--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t))}
			up := startUp(t, bin, home, sets...)
			wait := map[bool]string{false: "2s", true: "1m"}[back]
			c := startChat(t, bin, "--nats", up.url, "--session", sid, "--reconnect-wait", wait)
			if _, err := io.WriteString(c.stdin, "first\n"); err != nil {
				t.Fatal(err)
			}
			enginetest.Eventually(t, 20*time.Second, func() error {
				if out, _ := c.output(); strings.Count(out, "> ") < 2 {
					return fmt.Errorf("the first turn has not ended:\n%s", out)
				}
				return nil
			})
			if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			up.wait(t, stopGrace)
			if _, err := io.WriteString(c.stdin, "second\n"); err != nil {
				t.Fatal(err)
			}
			enginetest.Eventually(t, 5*time.Second, func() error {
				if _, errOut := c.output(); !strings.Contains(errOut, "lost the connection to the node; waiting up to "+map[bool]string{false: "2s", true: "1m0s"}[back]) {
					return fmt.Errorf("chat does not say the node is away:\n%s", errOut)
				}
				return nil
			})
			if !back {
				if code := c.wait(t, 10*time.Second); code != 1 {
					out, errOut := c.output()
					t.Fatalf("exit code %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
				}
				out, errOut := c.output()
				if n := strings.Count(errOut, "iii:"); n != 1 || strings.Contains(out, "error:") ||
					!strings.Contains(errOut, "iii: session "+sid+": lost the connection to the node at "+up.url+" (the node did not come back within 2s); the message was not sent") {
					t.Fatalf("want one line saying the node was lost\nstdout:\n%s\nstderr:\n%s", out, errOut)
				}
				return
			}
			startUp(t, bin, home, sets...)
			enginetest.Eventually(t, 30*time.Second, func() error {
				if out, _ := c.output(); !strings.Contains(out, "second\n") || strings.Count(out, "> ") < 3 {
					return fmt.Errorf("the second line is not answered:\n%s", out)
				}
				return nil
			})
			_ = c.stdin.Close() // Ctrl-D
			if code := c.wait(t, 10*time.Second); code != 0 {
				out, errOut := c.output()
				t.Fatalf("exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if out, _ := c.output(); strings.Contains(out, "error:") {
				t.Fatalf("chat printed an error:\n%s", out)
			}
		})
	}
}

// A -m turn with two calls parked, one of which is allowed (it runs, and
// the turn goes back to waiting for the other): chat counted no call
// waiting any more once the turn left function_awaiting_approval, so it
// gave up on the turn after its quiet time ("no event for 5 minutes")
// while the other call still waited for a human. The turn's view says
// which calls wait.
func TestChatWaitsForEveryParkedCall(t *testing.T) {
	t.Parallel()
	a := startTestApp(t)
	url, sid := a.node.ClientURL(), "chat_two_parked"
	e, done, err := (&globals{natsURL: url, timeout: 10 * time.Second}).connectFollowing()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(done)
	var out enginetest.Buffer
	cfg := chatConfig{session: sid, provider: "scripted", model: "echo", reconnectWait: time.Minute, notes: &out, url: url, quiet: time.Second}
	text := "/call fs::write {\"path\":\"a\",\"content\":\"1\"}\n/call fs::write {\"path\":\"b\",\"content\":\"2\"}"
	type result struct {
		stop string
		err  error
	}
	ended := make(chan result, 1)
	go func() {
		stop, err := chatTurn(context.Background(), e, cfg, text, &out, nil)
		ended <- result{string(stop), err}
	}()
	var calls []string
	enginetest.Eventually(t, 20*time.Second, func() error {
		calls = calls[:0]
		for _, l := range strings.Split(out.String(), "\n") {
			if arg, ok := strings.CutPrefix(l, "  iii trigger approval::resolve '"); ok {
				var req map[string]string
				if err := json.Unmarshal([]byte(strings.TrimSuffix(arg, "'")), &req); err != nil {
					return err
				}
				calls = append(calls, req["function_call_id"])
			}
		}
		if len(calls) != 2 {
			return fmt.Errorf("not two approval requests yet:\n%s", out.String())
		}
		return nil
	})
	resolve := func(call, decision string) {
		t.Helper()
		req := fmt.Sprintf(`{"session_id":%q,"function_call_id":%q,"decision":%q}`, sid, call, decision)
		if res, err := runIII(t, "trigger", "--nats", url, "approval::resolve", req); err != nil {
			t.Fatalf("resolve: %v\n%s", err, res)
		}
	}
	resolve(calls[0], "allow")
	enginetest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(out.String(), "← "+calls[0]) {
			return fmt.Errorf("the allowed call has not run:\n%s", out.String())
		}
		return nil
	})
	select {
	case r := <-ended:
		t.Fatalf("chat gave up on the turn with a call parked: %q %v\n%s", r.stop, r.err, out.String())
	case <-time.After(3 * cfg.quiet):
	}
	resolve(calls[1], "deny")
	select {
	case r := <-ended:
		if r.err != nil || r.stop != "end" {
			t.Fatalf("chat: %q %v\n%s", r.stop, r.err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("chat did not end with the turn:\n%s", out.String())
	}
}

// The node lost while line mode waits at its prompt: chat said nothing
// until a line was sent, so the user learned it only then. It must say
// at once that the node is gone and what a line typed now does, and when
// it is back, each in one line followed by the prompt again.
func TestChatPromptWatchesNode(t *testing.T) {
	t.Parallel()
	tests := []struct{ wait, lost string }{
		{"1m", "(lost the connection to the node; a line typed now waits up to 1m0s for it to come back)\n"},
		{"0s", "(lost the connection to the node; a line typed before it comes back is not sent: --reconnect-wait is 0)\n"},
	}
	for _, tc := range tests {
		t.Run("reconnect-wait="+tc.wait, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			url := ns.ClientURL()
			in, typed := io.Pipe()
			t.Cleanup(func() { _ = typed.Close() })
			var out, errOut enginetest.Buffer
			cmd := newRootCmd()
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			cmd.SetIn(in)
			cmd.SetArgs([]string{"chat", "--embedded=false", "--nats", url, "--session", "chat_idle", "--reconnect-wait", tc.wait})
			done := make(chan error, 1)
			go func() { done <- cmd.ExecuteContext(context.Background()) }()
			prompts := func(n int) func() error {
				return func() error {
					if got := strings.Count(out.String(), "> "); got != n {
						return fmt.Errorf("%d prompts, want %d\nstdout:\n%s\nstderr:\n%s", got, n, out.String(), errOut.String())
					}
					return nil
				}
			}
			enginetest.Eventually(t, 10*time.Second, prompts(1))
			start := enginetest.StopServer(t, ns)
			enginetest.Eventually(t, 5*time.Second, func() error {
				if errOut.String() != tc.lost {
					return fmt.Errorf("chat does not say it lost the node:\n%s", errOut.String())
				}
				return prompts(2)()
			})
			ns = start()
			enginetest.Eventually(t, 10*time.Second, func() error {
				if want := tc.lost + "(reconnected to " + ns.ClientURL() + ")\n"; errOut.String() != want {
					return fmt.Errorf("chat does not say the node is back:\n%s\nwant:\n%s", errOut.String(), want)
				}
				return prompts(3)()
			})
			if want := "> \n> \n> "; !strings.HasSuffix(out.String(), want) {
				t.Fatalf("each note is not on a line of its own:\n%q", out.String())
			}
			_ = typed.Close() // Ctrl-D
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("chat: %v\n%s\n%s", err, out.String(), errOut.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("chat did not exit at the end of its input:\n%s", out.String())
			}
		})
	}
}
