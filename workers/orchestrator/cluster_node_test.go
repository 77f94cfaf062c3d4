package orchestrator_test

// The cluster tests (#8): three `iii up` processes on loopback form a NATS
// cluster (JetStream R3) and one proto.actor cluster of session grains;
// 50 sessions run multi-turn conversations through them while a node is
// killed (kill -9) or every node is restarted in turn.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/cluster"
	"github.com/iii-on-nats/iii/cluster/membership"
	"github.com/iii-on-nats/iii/cluster/placement"
	"github.com/iii-on-nats/iii/cluster/region"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// clusterNodes are three crash nodes that are one cluster: fixed client
// and route addresses, so a restarted node rejoins as itself.
type clusterNodes struct {
	t     *testing.T
	nodes []*crashNode
}

// startClusterNodes launches three nodes at once (a clustered node is up
// only once JetStream has a meta leader, which takes two of them). The
// ports are picked free just before; should one be taken by someone else
// in the meantime (its node exits with "address already in use"), the
// three start again on new ports.
func startClusterNodes(t *testing.T, sets ...string) *clusterNodes {
	t.Helper()
	// A model call attempt is bounded (the scripted model answers at once),
	// so a stream stuck on a node that died is tried again.
	sets = append([]string{"orchestrator.member_ttl=2s", "orchestrator.drain_timeout=10s", "orchestrator.model_timeout=20s"}, sets...)
	const tries = 3
	for try := 1; ; try++ {
		c, err := launchClusterNodes(t, sets)
		if err == nil {
			return c
		}
		taken := false
		for _, n := range c.nodes {
			n.kill()
			taken = taken || strings.Contains(n.logs.String(), "address already in use")
		}
		if !taken || try == tries {
			t.Fatal(err)
		}
		t.Logf("start %d of the cluster: a port was taken (%v); again on new ports", try, err)
	}
}

// launchClusterNodes is one try of [startClusterNodes].
func launchClusterNodes(t *testing.T, sets []string) (*clusterNodes, error) {
	t.Helper()
	addrs := crashFreeAddrs(t, 6) // three route, three client addresses
	routes := addrs[:3]
	seeds := make([]string, len(routes))
	for i, r := range routes {
		seeds[i] = "nats-route://" + r
	}
	c := &clusterNodes{t: t}
	for i := range routes {
		n := &crashNode{t: t, bin: iiiBinary(t), home: enginetest.NodeHome(t), addr: addrs[3+i], sets: sets,
			extra: []string{"--name", fmt.Sprintf("n%d", i+1), "--cluster", "c1", "--cluster-listen", routes[i],
				"--routes", strings.Join(seeds, ","), "--workers", "policy,approval,hooks,directory,provider-scripted,session,orchestrator"}}
		if err := os.WriteFile(n.home+"/iii-permissions.yaml", []byte(crashPolicy), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			n.kill()
			if t.Failed() {
				t.Logf("node n%d stderr:\n%s", i+1, n.logs.String())
			}
		})
		c.nodes = append(c.nodes, n)
	}
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() { n.startAsync() })
	}
	wg.Wait()
	var errs []error
	for i, n := range c.nodes {
		if err := n.waitUpErr(90 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("n%d: %w", i+1, err))
		}
	}
	return c, errors.Join(errs...)
}

// urls is every node's client URL, for clients that fail over.
func (c *clusterNodes) urls() string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, n.url())
	}
	return strings.Join(u, ",")
}

// clusterLoad runs sessions × turns conversations, each turn one call of
// crash::fast, sessions concurrently, and counts finished turns.
type clusterLoad struct {
	e        *engine.Engine
	js       jetstream.JetStream
	sessions []string
	turns    int
	done     atomic.Int64
	errs     chan error
	pause    time.Duration // between the turns of a session

	// ends counts the agent_end events a core subscription saw per
	// session, each once by its message id (a node that takes a session
	// over delivers a dead activation's outbox again: JetStream drops the
	// duplicate, a core subscriber sees it); a session's channel is
	// poked on each.
	mu   sync.Mutex
	ends map[string]int
	seen map[string]bool
	poke map[string]chan struct{}
}

// idemKey is the idempotency key of turn k of session sid (an id: a homed
// session's dot becomes '_').
func idemKey(sid string, k int) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(sid, ".", "_"), k)
}

func runClusterLoad(t *testing.T, e *engine.Engine, prefix string, sessions, turns int) *clusterLoad {
	t.Helper()
	return runClusterLoadPaced(t, e, prefix, sessions, turns, 0)
}

// runClusterLoadPaced is runClusterLoad with a pause between the turns of
// a session (a load that lasts).
func runClusterLoadPaced(t *testing.T, e *engine.Engine, prefix string, sessions, turns int, pause time.Duration) *clusterLoad {
	t.Helper()
	l := &clusterLoad{e: e, js: e.JetStream(), turns: turns, pause: pause, errs: make(chan error, sessions),
		ends: map[string]int{}, seen: map[string]bool{}, poke: map[string]chan struct{}{}}
	for i := range sessions {
		sid := fmt.Sprintf("%s%02d", prefix, i)
		l.sessions = append(l.sessions, sid)
		l.poke[sid] = make(chan struct{}, 1)
	}
	sub, err := e.Conn().Subscribe("iii.events.>", func(m *nats.Msg) {
		if !bytes.Contains(m.Data, []byte(`"agent_end"`)) {
			return
		}
		sid := strings.TrimPrefix(m.Subject, "iii.events.")
		id := m.Header.Get(jetstream.MsgIDHeader)
		l.mu.Lock()
		if id != "" {
			if l.seen[id] {
				l.mu.Unlock()
				return
			}
			l.seen[id] = true
		}
		l.ends[sid]++
		ch := l.poke[sid]
		l.mu.Unlock()
		if ch != nil {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	for i, sid := range l.sessions {
		// A paced load spreads the sessions' turns over the pause.
		delay := time.Duration(i) * pause / time.Duration(sessions)
		go func() {
			time.Sleep(delay)
			l.errs <- l.converse(sid)
		}()
	}
	return l
}

func (l *clusterLoad) converse(sid string) error {
	for k := 1; k <= l.turns; k++ {
		text := fmt.Sprintf(`/call crash::fast {"tag":%q,"n":%d}`, sid, k)
		if err := clusterStartRun(l.e, sid, idemKey(sid, k), text); err != nil {
			return err
		}
		if err := l.waitEnds(sid, k, 120*time.Second); err != nil {
			return err
		}
		l.done.Add(1)
		if l.pause > 0 && k < l.turns {
			time.Sleep(l.pause)
		}
	}
	return nil
}

// diagnose logs the turn state of every session not at rest.
func (l *clusterLoad) diagnose(t *testing.T) {
	t.Helper()
	for _, sid := range l.sessions {
		v, err := crashTurnState(l.e, sid)
		if err != nil || v == nil || !v.State.Terminal() {
			owner, oerr := placement.Owner(context.Background(), l.js, session.Kind, sid)
			t.Logf("%s: turn::get_state = %+v, %v; grain owner %s %v", sid, v, err, owner, oerr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ms, err := membership.List(ctx, l.js, "iii"); err == nil {
		for _, m := range ms {
			t.Logf("member %s node %s %s", m.ID, m.Meta["node"], m.Status)
		}
	}
	if cons, err := l.js.Consumer(ctx, "III_TURN_STEPS", "orchestrator"); err == nil {
		if info, err := cons.Info(ctx); err == nil {
			t.Logf("steps: %d pending, %d un-acked, %d redelivered", info.NumPending, info.NumAckPending, info.NumRedelivered)
		}
	}
}

// wait returns the first conversation error, or nil when all finished.
func (l *clusterLoad) wait(timeout time.Duration) error {
	deadline := time.After(timeout)
	for range l.sessions {
		select {
		case err := <-l.errs:
			if err != nil {
				return err
			}
		case <-deadline:
			return fmt.Errorf("conversations not finished within %v: %d of %d turns", timeout, l.done.Load(), len(l.sessions)*l.turns)
		}
	}
	return nil
}

// clusterStartRun starts a run, retrying while the previous run's grain
// has not checkpointed yet or the cluster is failing over.
func clusterStartRun(e *engine.Engine, sid, key, text string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var res struct {
			Started bool   `json:"started"`
			Reason  string `json:"reason"`
		}
		// The key makes a retried start (its answer lost with a node) a
		// no-op instead of a second run.
		err := e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", IdempotencyKey: key,
			Messages: []agent.Message{userText(text)}, Tools: []string{"crash::fast"}}, &res)
		cancel()
		if err == nil && res.Started {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run::start %s: %+v, %v", sid, res, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitEnds waits until sid has ends agent_end events: seen by the
// subscription, or (a client that reconnected to another node may have
// missed one) counted in the stream when the last stored event is one.
func (l *clusterLoad) waitEnds(sid string, ends int, timeout time.Duration) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(3 * time.Second)
	defer tick.Stop()
	for {
		l.mu.Lock()
		n, ch := l.ends[sid], l.poke[sid]
		l.mu.Unlock()
		if n >= ends {
			return nil
		}
		select {
		case <-ch:
		case <-tick.C:
			if typ, err := crashLastEventType(l.js, sid); err == nil && typ == agent.EventAgentEnd {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				evs, err := crashReadEvents(ctx, l.js, sid)
				cancel()
				if err == nil && crashCount(evs, agent.EventAgentEnd) >= ends {
					l.mu.Lock()
					l.ends[sid] = max(l.ends[sid], crashCount(evs, agent.EventAgentEnd))
					l.mu.Unlock()
				}
			}
		case <-deadline:
			return fmt.Errorf("%s: %d agent_end not reached within %v (seen %d)", sid, ends, timeout, n)
		}
	}
}

// check verifies every conversation: the event stream is one continuous
// stream (crashCheckEvents), every run ended normally, every call ran at
// most once, and a call that did not run, or whose outcome the grain lost
// with its node, was reported to the model as interrupted. It returns the
// number of calls the grains interrupted; a call whose reply was lost on
// the way back (a timeout, reported "interrupted: outcome unknown
// (timeout …)") is logged, not counted: the tools' own connection goes
// through one of the nodes.
func (l *clusterLoad) check(t *testing.T, tl *crashTools) int {
	t.Helper()
	interrupted, dumped := 0, 0
	for _, sid := range l.sessions {
		// Reading right after a node died may meet a consumer placed on
		// it: try again. The load saw each run's agent_end on a core
		// subscription, which may be a moment before the stream stores
		// it: read until the stream holds every run's end, or for 30 s.
		var evs []crashEvent
		failed := t.Failed()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			read, err := crashReadEvents(ctx, l.js, sid)
			cancel()
			if err == nil {
				evs = read
			}
			if err == nil && crashCount(evs, agent.EventAgentEnd) >= l.turns {
				break
			}
			if time.Now().After(deadline) {
				if evs == nil {
					t.Fatalf("%s: events not read in 30 s: %v", sid, err)
				}
				break // the checks below say what is missing
			}
		}
		// A publish whose ack was lost in a stream leader election is
		// published again after the ones behind it landed: the stream may
		// hold a session's events out of order there. Events carry seq for
		// that; readers order by it (docs/CLUSTER.md).
		slices.SortStableFunc(evs, func(a, b crashEvent) int { return cmp.Compare(a.Seq, b.Seq) })
		ends := crashCheckEvents(t, sid, evs)
		if n := crashCount(evs, agent.EventAgentEnd); n != l.turns {
			t.Errorf("%s: %d runs ended, want %d", sid, n, l.turns)
		}
		for _, ev := range evs {
			if ev.Type == agent.EventAgentEnd && ev.StopReason != agent.StopEnd {
				t.Errorf("%s: a run ended with %q: %s", sid, ev.StopReason, crashTypes(evs))
			}
			if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.StopReason == agent.StopError {
				t.Logf("%s: error message: %s", sid, ev.Message.ErrorMessage)
			}
		}
		if len(ends) != l.turns {
			t.Errorf("%s: %d calls ended, want %d", sid, len(ends), l.turns)
		}
		for k := 1; k <= l.turns; k++ {
			if c := tl.count("crash::fast", sid, k); c > 1 {
				t.Errorf("%s: call %d ran %d times", sid, k, c)
			}
		}
		for _, ev := range ends {
			text := crashResultText(ev)
			switch {
			case strings.Contains(text, "interrupted: outcome unknown (timeout"):
				// The call's reply was lost, not the grain's record of it:
				// the tools' connection went through a node that stopped.
				// It ran at most once (counted above) and says so.
				t.Logf("%s: a call's reply was lost with the tools' connection: %s", sid, text)
			case strings.Contains(text, "interrupted"):
				interrupted++
			}
		}
		roles := make([]agent.Role, 0, 4*l.turns)
		for range l.turns {
			roles = append(roles, agent.RoleUser, agent.RoleAssistant, agent.RoleFunctionResult, agent.RoleAssistant)
		}
		crashCheckTranscript(t, l.e, sid, roles...)
		if !failed && t.Failed() && dumped < 4 {
			// The first sessions that fail are dumped whole: what a replay
			// or a lost write looks like is in the ids and the times.
			dumped++
			t.Logf("%s: events as stored:\n%s", sid, crashDump(evs))
		}
	}
	return interrupted
}

// TestClusterKillNode: 50 sessions × 4 turns on three nodes; one node is
// killed (kill -9) when a third of the turns are done. Every turn
// finishes, no call runs twice, every event stream stays one stream.
func TestClusterKillNode(t *testing.T) {
	c := startClusterNodes(t)
	tl := newCrashTools(t, c.urls())
	l := runClusterLoad(t, tl.e, "kill", 50, 4)
	deadline := time.Now().Add(60 * time.Second)
	for l.done.Load() < int64(len(l.sessions)*l.turns/3) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	killedAt := l.done.Load()
	c.nodes[1].kill()
	start := time.Now()
	if err := l.wait(3 * time.Minute); err != nil {
		l.diagnose(t)
		t.Fatal(err)
	}
	t.Logf("killed n2 after %d turns; the other %d finished in %v", killedAt, int64(len(l.sessions)*l.turns)-killedAt, time.Since(start))
	interrupted := l.check(t, tl)
	t.Logf("calls reported interrupted (outcome lost with the killed node): %d of %d", interrupted, len(l.sessions)*l.turns)
}

// TestClusterRollingRestart: the same load while every node in turn is
// stopped with SIGTERM (it drains: its grains finish the step they are in
// and hand the sessions over) and started again. No run fails and no call
// is interrupted.
func TestClusterRollingRestart(t *testing.T) {
	c := startClusterNodes(t)
	tl := newCrashTools(t, c.urls())
	// Paced so that the load outlasts the three restarts: 15 turns 2 s
	// apart (30 s), the sessions spread over the 2 s. A restart takes 4 s
	// on a quiet machine, but a stop drains for up to 10 s and one start
	// can wait for the meta group: three restarts took 25 s once, which
	// outlasted the 16 s load this test had before.
	l := runClusterLoadPaced(t, tl.e, "roll", 50, 15, 2*time.Second)
	for _, n := range c.nodes {
		for l.done.Load() == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		before := l.done.Load()
		start := time.Now()
		n.stop(30 * time.Second)
		stopped := time.Since(start)
		n.startAsync()
		n.waitUp(90 * time.Second)
		meanwhile := l.done.Load() - before
		t.Logf("restarted %s: stop took %v, back after %v; %d turns done meanwhile", n.extra[1], stopped, time.Since(start), meanwhile)
		if meanwhile == 0 {
			t.Errorf("the load did not run through the restart of %s (%d turns meanwhile, %d done)", n.extra[1], meanwhile, l.done.Load())
		}
	}
	if err := l.wait(3 * time.Minute); err != nil {
		l.diagnose(t)
		t.Fatal(err)
	}
	if interrupted := l.check(t, tl); interrupted > 0 {
		t.Errorf("%d calls interrupted by a graceful restart", interrupted)
		for i, n := range c.nodes {
			t.Logf("node n%d stderr:\n%s", i+1, n.logs.String())
		}
	}
}

// startAsync launches the child without waiting for it.
func (n *crashNode) startAsync() {
	n.t.Helper()
	args := []string{"up", "--listen", n.addr, "--home", n.home, "--http", "", "--log-level", crashLogLevel, "--set", "orchestrator.ack_wait=2s"}
	for _, s := range n.sets {
		args = append(args, "--set", s)
	}
	args = append(args, n.extra...)
	n.starts++
	fmt.Fprintf(&n.logs, "--- start %d ---\n", n.starts)
	n.up = &crashUpWatcher{up: make(chan struct{})}
	cmd := exec.Command(n.bin, args...)
	cmd.Stdout = n.up
	cmd.Stderr = &n.logs
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	n.cmd, n.exited = cmd, exited
}

// waitUp waits until the child said it is up.
func (n *crashNode) waitUp(timeout time.Duration) {
	n.t.Helper()
	if err := n.waitUpErr(timeout); err != nil {
		n.t.Fatalf("%v\n%s", err, n.logs.String())
	}
}

// waitUpErr waits until the child said it is up, or says why not.
func (n *crashNode) waitUpErr(timeout time.Duration) error {
	select {
	case <-n.up.up:
		return nil
	case err := <-n.exited:
		n.cmd = nil
		return fmt.Errorf("node exited before it was up: %v", err)
	case <-time.After(timeout):
		return fmt.Errorf("node not up within %v", timeout)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (n *crashNode) stop(timeout time.Duration) {
	n.t.Helper()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-n.exited:
		n.cmd = nil
		if err != nil {
			n.t.Fatalf("node exit after SIGTERM: %v\n%s", err, n.logs.String())
		}
	case <-time.After(timeout):
		n.t.Fatalf("node did not stop within %v of SIGTERM\n%s", timeout, n.logs.String())
	}
}

// crashLogLevel is the nodes' --log-level (III_TEST_NODE_LOG=debug to
// see what the grains and the cluster do).
var crashLogLevel = func() string {
	if v := os.Getenv("III_TEST_NODE_LOG"); v != "" {
		return v
	}
	return "warn"
}()

// TestRegionTakeover: region A (one iii node) is the home of the state,
// region B (one iii node) serves a client there, W is a witness region (a
// JetStream server that holds nothing; without a third region, losing one
// of two loses the JetStream meta quorum: docs/REGIONS.md). The client in
// B runs sessions homed in A ("A.region00": their records, steps, events
// and transcripts live in A's copies of the stores, placed in A);
// `iii region mirror` keeps a copy of A's state in B; A is stopped;
// `iii region takeover` makes B the home under the same names; B's node
// restarts (its workers make their consumers again) and the sessions go on
// with their whole transcript.
func TestRegionTakeover(t *testing.T) {
	free := crashFreeAddrs(t, 5) // three gateways, two client addresses
	gw := map[string]string{"A": free[0], "B": free[1], "W": free[2]}
	clients := map[string]string{"A": free[3], "B": free[4]}
	gatewayArgs := func(self string) []string {
		args := []string{"--region", self, "--gateway-listen", gw[self]}
		for _, r := range []string{"A", "B", "W"} {
			if r != self {
				args = append(args, "--gateway", r+"=nats://"+gw[r])
			}
		}
		return args
	}
	// The witness: a plain embedded server in this process.
	var remotes []cluster.RemoteGateway
	for _, r := range []string{"A", "B"} {
		remotes = append(remotes, cluster.RemoteGateway{Name: r, URLs: []string{"nats://" + gw[r]}})
	}
	w, err := cluster.Start(context.Background(), cluster.Config{Name: "w1", Port: -1, StoreDir: t.TempDir(), Region: "W",
		Gateway: cluster.GatewayConfig{Listen: gw["W"], Gateways: remotes}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	workers := "policy,approval,hooks,directory,provider-scripted,session,orchestrator"
	newNode := func(name, region string) *crashNode {
		n := &crashNode{t: t, bin: iiiBinary(t), home: enginetest.NodeHome(t), addr: clients[region],
			sets:  []string{"orchestrator.member_ttl=2s"},
			extra: append([]string{"--name", name, "--workers", workers}, gatewayArgs(region)...)}
		if err := os.WriteFile(n.home+"/iii-permissions.yaml", []byte(crashPolicy), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			n.kill()
			if t.Failed() {
				t.Logf("node %s stderr:\n%s", name, n.logs.String())
			}
		})
		return n
	}
	// Both regions start at once (a JetStream meta group forms from the
	// servers that meet; two of three are a quorum). A stream is placed in
	// the region of the node that creates it first; the test finds where
	// the turn records live and calls that region "home", the other one
	// "away", where the client and the tools are.
	nodes := map[string]*crashNode{"A": newNode("a1", "A"), "B": newNode("b1", "B")}
	for _, n := range nodes {
		n.startAsync()
	}
	for _, n := range nodes {
		n.waitUp(90 * time.Second)
	}
	probe := newCrashTools(t, nodes["A"].url())
	var homeRegion string
	enginetest.Eventually(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		homeRegion, err = region.Home(ctx, probe.e.JetStream(), "KV_iii-turn-state")
		return err
	})
	away := map[string]string{"A": "B", "B": "A"}[homeRegion]
	a, b := nodes[homeRegion], nodes[away]
	t.Logf("state homed in %s; the client is in %s", homeRegion, away)

	tl := newCrashTools(t, b.url()) // the client and the tools live away
	js := tl.e.JetStream()
	home := func(stream string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, err := region.Home(ctx, js, stream)
		if err != nil {
			return err.Error()
		}
		return h
	}

	// The sessions are homed in the home region by their ids; their
	// stores are the home region's copies, placed there.
	for _, c := range []string{subjects.RegionalCopy("KV_"+subjects.TurnStateBucket, homeRegion), subjects.RegionalCopy(subjects.EventStream, homeRegion),
		subjects.RegionalCopy(subjects.StepStream, homeRegion), subjects.RegionalCopy("KV_"+subjects.TurnStateBucket, away)} {
		want := homeRegion
		if strings.HasSuffix(c, "-at-"+away) {
			want = away
		}
		enginetest.Eventually(t, 10*time.Second, func() error {
			if h := home(c); h != want {
				return fmt.Errorf("%s is homed in %q, want %q", c, h, want)
			}
			return nil
		})
	}
	l := runClusterLoad(t, tl.e, homeRegion+".region", 3, 2)
	if err := l.wait(2 * time.Minute); err != nil {
		l.diagnose(t)
		t.Fatal(err)
	}
	// Their grains ran on the home region's node (placement prefers the
	// members of a session's home region).
	{
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		members, err := membership.List(ctx, js, "iii")
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		regionOf := map[string]string{}
		for _, m := range members {
			regionOf[m.ID] = m.Meta["region"]
		}
		for _, sid := range l.sessions {
			owner, err := placement.Owner(ctx, js, session.Kind, sid)
			if err != nil {
				t.Logf("%s: no grain owner (%v)", sid, err)
				continue
			}
			if regionOf[owner] != homeRegion {
				t.Errorf("%s's grain is on member %s of region %q, not in its home %s", sid, owner, regionOf[owner], homeRegion)
			}
		}
		cancel()
	}
	iii := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(iiiBinary(t), append(args, "--nats", b.url())...).CombinedOutput()
		if err != nil {
			t.Fatalf("iii %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	t.Logf("iii region mirror --region %s:\n%s", away, iii("region", "mirror", "--region", away))
	// Reads in B come from B's mirrors once they caught up.
	enginetest.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		lag, err := region.Lag(ctx, js, away)
		if err != nil {
			return err
		}
		for m, n := range lag {
			if n > 0 {
				return fmt.Errorf("mirror %s is %d behind", m, n)
			}
		}
		return nil
	})

	// Region A is stopped.
	lost := time.Now()
	a.stop(60 * time.Second)
	out := iii("region", "takeover", "--lost", homeRegion, "--region", away)
	took := time.Since(lost)
	t.Logf("iii region takeover --lost %s --region %s:\n%s", homeRegion, away, out)
	for _, c := range []string{"KV_iii-turn-state", subjects.RegionalCopy("KV_"+subjects.TurnStateBucket, homeRegion), subjects.RegionalCopy(subjects.EventStream, homeRegion)} {
		if h := home(c); h != away {
			t.Fatalf("after the takeover %s is homed in %q", c, h)
		}
	}
	// B's node restarts: its workers make their consumers on the new
	// streams, and the orchestrator's start sweep re-wakes what was in
	// flight.
	b.stop(60 * time.Second)
	b.startAsync()
	b.waitUp(90 * time.Second)
	for _, sid := range l.sessions {
		if err := clusterStartRun(tl.e, sid, idemKey(sid, 3), fmt.Sprintf(`/call crash::fast {"tag":%q,"n":3}`, sid)); err != nil {
			t.Fatal(err)
		}
		if err := l.waitEnds(sid, 3, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("home region stopped → takeover done in %v → B serving turns again after %v (RPO: 0 of the acked writes, the mirrors had caught up)", took, time.Since(lost))
	l.turns = 3
	if n := l.check(t, tl); n > 0 {
		t.Errorf("%d calls interrupted", n)
	}
}
