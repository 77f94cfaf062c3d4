package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// A second node on a data directory that a node serves is refused before
// its server starts: nats-server does not lock its store, and two servers
// on one store corrupt it. The lock goes with the node that held it.
func TestUpRefusesHomeInUse(t *testing.T) {
	home := t.TempDir()
	cfg := upConfig{home: home, listen: "127.0.0.1:0", logger: slog.New(slog.DiscardHandler)}
	start := func() (*app, error) { return startApp(context.Background(), cfg) }
	stop := func(a *app) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := a.close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	first, err := start()
	if err != nil {
		t.Fatal(err)
	}
	second, err := start()
	if err == nil {
		stop(second)
		stop(first)
		t.Fatal("a second node started on a data directory in use")
	}
	if want := "in use by process " + strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("second node: %v; want it to say %q", err, want)
	}
	// The refused node left the first one's store alone.
	if _, err := runIII(t, "trigger", "--nats", first.node.ClientURL(), "state::set", `{"scope":"lock","key":"k","value":1}`); err != nil {
		t.Fatalf("first node after the refusal: %v", err)
	}
	stop(first)
	again, err := start()
	if err != nil {
		t.Fatalf("a node on the released directory: %v", err)
	}
	out, err := runIII(t, "trigger", "--nats", again.node.ClientURL(), "state::get", `{"scope":"lock","key":"k"}`)
	if err != nil || !strings.Contains(out, `"value": 1`) {
		t.Fatalf("state after the restart: %v\n%s", err, out)
	}
	stop(again)
}

// A command that only holds subcommands refuses a mistyped one (it printed
// its help and exited 0); alone it still prints its help.
func TestGroupCommandsRefuseUnknownSubcommand(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "turn"},
		{"worker", "runn", "orchestrator"},
		{"cluster", "member"},
		{"region", "mirrror"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			out, err := runIII(t, args...)
			if err == nil || !strings.Contains(err.Error(), `unknown command "`+args[1]+`"`) {
				t.Fatalf("iii %s: err %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
	out, err := runIII(t, "worker")
	if err != nil || !strings.Contains(out, "Available Commands") {
		t.Fatalf("iii worker: %v\n%s", err, out)
	}
}

// A --set for a worker module the binary lacks (a misspelt name) fails
// the command, naming it, before anything starts; it was ignored.
func TestSetRefusesUnknownWorker(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"up", []string{"up", "--set", "orchestrater.max_turns=20", "--listen", "127.0.0.1:0", "--http", "", "--home", t.TempDir(), "--log-level", "error"}},
		{"worker run", []string{"worker", "run", "provider-scripted", "--set", "orchestrater.max_turns=20", "--nats", "nats://127.0.0.1:1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Without the check the node starts and runs until ctx ends.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cmd := newRootCmd()
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			cmd.SetArgs(c.args)
			err := cmd.ExecuteContext(ctx)
			if err == nil || !strings.Contains(err.Error(), `no worker module "orchestrater"`) {
				t.Fatalf("err %v; want the unknown module named", err)
			}
			if ctx.Err() != nil {
				t.Fatal("the command ran until its context ended")
			}
		})
	}
}

// iii worker run with a module the binary lacks fails naming it before it
// connects: it created the spans stream (III_SPANS) on the deployment
// first.
func TestWorkerRunRefusesUnknownModule(t *testing.T) {
	ns := enginetest.RunServer(t)
	out, err := runIII(t, "worker", "run", "no-such-module", "--nats", ns.ClientURL())
	if err == nil || !strings.Contains(err.Error(), `"no-such-module"`) || !strings.Contains(err.Error(), "iii worker list") {
		t.Fatalf("err %v\n%s", err, out)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name := range js.StreamNames(ctx).Name() {
		t.Errorf("stream %s created", name)
	}
}

// Ctrl-C at the chat prompt ends the command at once; it waited for a
// line of input first.
func TestChatInterruptAtPrompt(t *testing.T) {
	a := startTestApp(t)
	stdin, w := io.Pipe() // a terminal nobody types in
	t.Cleanup(func() { _ = w.Close() })
	var out enginetest.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(stdin)
	cmd.SetArgs([]string{"chat", "--nats", a.node.ClientURL()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	enginetest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), "> ") {
			return errors.New("no prompt yet")
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chat after Ctrl-C: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("chat did not end within 5s of Ctrl-C at its prompt:\n%s", out.String())
	}
}

// Ctrl-C in the middle of a turn of line mode ends chat but not the run:
// chat says so on stderr (it ended silently, leaving the user to think
// the run was stopped too).
func TestChatInterruptMidTurn(t *testing.T) {
	a := startTestApp(t)
	stdin, w := io.Pipe()
	t.Cleanup(func() { _ = w.Close() })
	var out, errOut enginetest.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(stdin)
	cmd.SetArgs([]string{"chat", "--nats", a.node.ClientURL(), "--session", "midturn"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	go func() { _, _ = io.WriteString(w, "/sleep 3000\n") }()
	enginetest.Eventually(t, 10*time.Second, func() error {
		var v agent.TurnView
		if err := a.e.Trigger(context.Background(), "turn::get_state", map[string]string{"session_id": "midturn"}, &v); err != nil {
			return err
		}
		if v.State != agent.StateAssistantStreaming {
			return fmt.Errorf("state %q", v.State)
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chat after Ctrl-C: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("chat did not end within 5s of Ctrl-C mid-turn:\n%s", out.String())
	}
	// The run can be streaming before chat has run::start's answer: a
	// Ctrl-C then cancels that call, which chat reports as canceled.
	if e := errOut.String(); !strings.Contains(e, "session midturn runs on without this client") && !strings.Contains(e, "(canceled: context canceled)") {
		t.Fatalf("chat did not say the run goes on:\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
}
