package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// A stopping node stops taking HTTP requests first and answers those in
// flight while the functions they call still run: a request taken before
// the stop that calls a worker's function (here a webhook handler that
// creates a session) gets its answer, and a new connection is refused.
// The gateway used to stop after the workers had closed: the request was
// taken and then failed with 502 function_not_found.
func TestGatewayStopsBeforeWorkers(t *testing.T) {
	t.Parallel()
	a, err := startApp(context.Background(), upConfig{home: t.TempDir(), listen: "127.0.0.1:0", httpAddr: "127.0.0.1:0", logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		closed <- a.close(ctx)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	// The webhook's function runs in a client of its own, as a user's
	// worker would.
	nc, err := nats.Connect(a.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	client, err := engine.New(nc, engine.WithCodec(wire.JSON))
	if err != nil {
		t.Fatal(err)
	}
	w, err := client.Worker("hook")
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	type httpResp struct {
		StatusCode int    `json:"status_code"`
		Body       string `json:"body"`
	}
	if err := w.Register(engine.Function{ID: "hook::slow", Handler: engine.Typed(func(ctx context.Context, _ struct{}) (httpResp, error) {
		close(started)
		<-release
		var res struct {
			SessionID string `json:"session_id"`
		}
		if err := client.Trigger(ctx, "session::create", struct{}{}, &res); err != nil {
			return httpResp{}, err
		}
		return httpResp{StatusCode: 200, Body: "created " + res.SessionID}, nil
	})}); err != nil {
		t.Fatal(err)
	}
	if out, err := runIII(t, "trigger", "http::add_route", `{"method":"POST","path":"/hook","function_id":"hook::slow"}`, "--nats", a.url); err != nil {
		t.Fatalf("add route: %v\n%s", err, out)
	}
	addr := a.httpLn.Addr().String()
	type answer struct {
		status int
		body   string
		err    error
	}
	answers := make(chan answer, 1)
	go func() {
		var ans answer
		enginetest.Eventually(t, 5*time.Second, func() error { // until the gateway has the route
			resp, err := http.Post("http://"+addr+"/hook", "application/json", strings.NewReader("{}"))
			if err != nil {
				ans = answer{err: err}
				return nil
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ans = answer{status: resp.StatusCode, body: string(b)}
			if resp.StatusCode == http.StatusNotFound {
				return fmt.Errorf("no route yet: %s", b)
			}
			return nil
		})
		answers <- ans
	}()
	select {
	case <-started:
	case ans := <-answers:
		t.Fatalf("the hook answered before it was released: %+v", ans)
	case <-time.After(10 * time.Second):
		t.Fatal("the hook was not called")
	}
	stopped = true
	go stop()
	// The listener closes first; then the request in flight finishes.
	enginetest.Eventually(t, 10*time.Second, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil
		}
		c.Close()
		return fmt.Errorf("the gateway still accepts connections")
	})
	close(release)
	select {
	case ans := <-answers:
		if ans.err != nil || ans.status != http.StatusOK || !strings.HasPrefix(ans.body, "created ") {
			t.Fatalf("request in flight at the stop: status %d body %q error %v", ans.status, ans.body, ans.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no answer to the request in flight")
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not stop")
	}
}

// runSlowTurn starts a run on session sid of the node at url whose model
// answers after ms milliseconds, and waits until the model is streaming.
func runSlowTurn(t *testing.T, url, sid string, ms int) {
	t.Helper()
	if out, err := runIII(t, "trigger", "--nats", url, "run::start", fmt.Sprintf(
		`{"session_id":%q,"provider":"scripted","model":"echo","messages":[{"role":"user","content":[{"type":"text","text":"/sleep %d"}]}]}`, sid, ms)); err != nil {
		t.Fatalf("run::start %s: %v\n%s", sid, err, out)
	}
	waitTurn(t, url, sid, `"state": "assistant_streaming"`, 20*time.Second)
}

// waitTurn waits until the turn record of sid (turn::get_state, which
// decodes it) contains want.
func waitTurn(t *testing.T, url, sid, want string, d time.Duration) {
	t.Helper()
	enginetest.Eventually(t, d, func() error {
		out, err := runIII(t, "trigger", "--nats", url, "--timeout", "5s", "turn::get_state", fmt.Sprintf(`{"session_id":%q}`, sid))
		if err != nil {
			return err
		}
		if !strings.Contains(out, want) {
			return fmt.Errorf("turn of %s lacks %s:\n%s", sid, want, out)
		}
		return nil
	})
}

// An operator stops a node with a model call in flight: SIGTERM drains
// (bounded by orchestrator.drain_timeout) and exits 0; a second SIGTERM
// during a long drain exits at once with 143 (128 + SIGTERM), as the
// signal's default would. It used to be swallowed: the node went on
// draining for up to the whole stop budget. After either stop, the
// restarted node finishes the turn from its last record.
func TestUpStopWithTurnInFlight(t *testing.T) {
	t.Parallel()
	bin := buildIII(t)
	home := t.TempDir()
	ackWait := "orchestrator.ack_wait=4s" // a step abandoned by the forced exit comes back soon

	p := startUp(t, bin, home, "--set", "orchestrator.drain_timeout=2s", "--set", ackWait)
	runSlowTurn(t, p.url, "stop_one", 6000)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 2*time.Second+stopGrace); code != 0 {
		t.Fatalf("exit code %d after one SIGTERM, want 0:\n%s", code, p.output())
	}

	p = startUp(t, bin, home, "--set", "orchestrator.drain_timeout=2m", "--set", ackWait)
	waitTurn(t, p.url, "stop_one", `"stop_reason": "end"`, 60*time.Second)
	runSlowTurn(t, p.url, "stop_two", 20000)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 5*time.Second, func() error {
		if !strings.Contains(p.output(), "shutting down") {
			return fmt.Errorf("no shutdown yet")
		}
		return nil
	})
	time.Sleep(2 * secondSignalAfter) // a signal delivered twice is one stop
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 5*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit code %d after a second SIGTERM, want %d:\n%s", code, 128+int(syscall.SIGTERM), p.output())
	}
	if !strings.Contains(p.output(), "second signal") {
		t.Errorf("the forced exit does not say why:\n%s", p.output())
	}

	p = startUp(t, bin, home, "--set", ackWait)
	waitTurn(t, p.url, "stop_two", `"stop_reason": "end"`, 60*time.Second)
	waitTurn(t, p.url, "stop_one", `"stop_reason": "end"`, 5*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGINT, want 0:\n%s", code, p.output())
	}
}
