package orchestrator_test

// The chaos test: the cluster of cluster_node_test.go (three `iii up`
// processes, JetStream R3) runs a few sessions of three turns each while
// random nodes are killed (kill -9) at random moments and started again on
// their data. The schedule comes from a seed that the test logs;
// III_CHAOS_SEED=<seed> replays it (the timing of the machine still
// varies).

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

const (
	chaosSessions = 12
	chaosTurns    = 3
	// chaosAttempts bounds the runs of one turn: a run that failed with a
	// reason is started again (under a new tag), and must then complete.
	chaosAttempts = 3
	// chaosKillBudget bounds the wall time: a kill beyond the third is
	// left out once the chaos has run this long (a restart takes 2–12 s
	// on a loaded machine).
	chaosKillBudget = 30 * time.Second
)

// chaosKill is one kill of the schedule, in its own wave of turns.
type chaosKill struct {
	node int // index in clusterNodes.nodes
	// before kills the node before its wave opens (the wave's runs start
	// with a node down and it rejoins under them), not while the wave runs.
	before bool
	after  time.Duration // from the wave's opening to the kill, or from the kill to the opening
	down   time.Duration // from the kill to the restart
}

// chaosPlan is the whole random schedule, drawn from the seed up front so
// that the goroutines share no random source. Wave w is kill w's: the
// turns of session i are in waves offset[i], offset[i]+1, … (with four
// kills, half the sessions start a wave later), so every kill meets runs.
type chaosPlan struct {
	kills  []chaosKill
	offset []int             // [session]: the wave of its first turn
	jitter [][]time.Duration // [session][turn]: delay of the turn's start once its wave opened
}

func newChaosPlan(seed uint64) chaosPlan {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var p chaosPlan
	for range 3 + rng.IntN(2) {
		p.kills = append(p.kills, chaosKill{
			node:   rng.IntN(3),
			before: rng.IntN(3) == 0,
			after:  20*time.Millisecond + chaosDur(rng, 400*time.Millisecond),
			down:   200*time.Millisecond + chaosDur(rng, 1300*time.Millisecond),
		})
	}
	for range chaosSessions {
		p.offset = append(p.offset, rng.IntN(len(p.kills)-chaosTurns+1))
		js := make([]time.Duration, chaosTurns)
		for k := range js {
			js[k] = chaosDur(rng, 300*time.Millisecond)
		}
		p.jitter = append(p.jitter, js)
	}
	return p
}

// chaosDur is a random duration in [0, d).
func chaosDur(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(d)))
}

// chaosSeed is III_CHAOS_SEED, or the time.
func chaosSeed(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv("III_CHAOS_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("III_CHAOS_SEED=%q: %v", v, err)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// chaosRun is the outcome of one run, as turn::get_state told it.
type chaosRun struct {
	turn, n int // the turn of the conversation; the tag's n (turn + 10 × attempt)
	runID   string
	stop    agent.StopReason
	failure *agent.Failure
	took    time.Duration // from run::start to its agent_end
}

// chaosLoad is the conversations: each turn waits for its wave to open
// (chaosPlan), so that each kill meets runs in flight.
type chaosLoad struct {
	l        *clusterLoad
	plan     chaosPlan
	waves    []chan struct{}
	inflight atomic.Int64 // runs started and not ended

	mu   sync.Mutex
	runs map[string][]chaosRun
}

func (cl *chaosLoad) converse(i int, sid string) error {
	ends := 0
	for k := 1; k <= chaosTurns; k++ {
		<-cl.waves[cl.plan.offset[i]+k-1]
		time.Sleep(cl.plan.jitter[i][k-1])
		for attempt := 0; ; attempt++ {
			n := k + 10*attempt // a new tag for a run started again: its call is a new call
			text := fmt.Sprintf(`/call crash::fast {"tag":%q,"n":%d}`, sid, n)
			cl.inflight.Add(1)
			began := time.Now()
			runID, err := chaosStartRun(cl.l.e, sid, idemKey(sid, n), text)
			if err != nil {
				cl.inflight.Add(-1)
				return err
			}
			ends++
			err = cl.l.waitEnds(sid, ends, 45*time.Second)
			cl.inflight.Add(-1)
			took := time.Since(began)
			if err != nil {
				return fmt.Errorf("turn %d, run %s: %w", k, runID, err)
			}
			v, err := chaosEnded(cl.l.e, sid, runID)
			if err != nil {
				return fmt.Errorf("turn %d: %w", k, err)
			}
			cl.mu.Lock()
			cl.runs[sid] = append(cl.runs[sid], chaosRun{turn: k, n: n, runID: runID, stop: v.StopReason, failure: v.Error, took: took})
			cl.mu.Unlock()
			if v.StopReason == agent.StopEnd {
				break
			}
			if v.StopReason != agent.StopError || v.Error == nil || v.Error.Message == "" {
				return fmt.Errorf("turn %d: run %s ended %q without a clear reason (error %+v)", k, runID, v.StopReason, v.Error)
			}
			if attempt+1 == chaosAttempts {
				return fmt.Errorf("turn %d: %d runs failed, the last with %s: %s", k, chaosAttempts, v.Error.Kind, v.Error.Message)
			}
		}
		cl.l.done.Add(1)
	}
	return nil
}

// chaosStartRun starts a run as clusterStartRun does and returns its id.
func chaosStartRun(e *engine.Engine, sid, key, text string) (string, error) {
	deadline := time.Now().Add(45 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var res orchestrator.RunStartResult
		err := e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", IdempotencyKey: key,
			Messages: []agent.Message{userText(text)}, Tools: []string{"crash::fast"}}, &res)
		cancel()
		if err == nil && res.Started {
			return res.RunID, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("run::start %s: %+v, %v", sid, res, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// chaosEnded is the view of run runID of sid once it is terminal.
func chaosEnded(e *engine.Engine, sid, runID string) (*agent.TurnView, error) {
	var (
		v   *agent.TurnView
		err error
	)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		v, err = crashTurnState(e, sid)
		if err == nil && v != nil && v.RunID == runID && v.State.Terminal() {
			return v, nil
		}
	}
	return nil, fmt.Errorf("run %s of %s not terminal in 20 s: %+v, %v", runID, sid, v, err)
}

// TestClusterChaos: 12 sessions × 3 turns, each turn one call of the
// non-idempotent crash::fast, on three nodes of which 3 or 4 in turn are
// killed (kill -9) at a random moment (while a wave of turns runs, or just
// before it starts) and started again on their data a random moment later
// (one node down at a time: the R3 quorum holds).
// Every run ends normally, or fails with a reason and then runs again to
// its end; no call runs twice (one whose outcome was lost with a node is
// reported "interrupted"); no event is stored twice, seq increases; every
// turn record decodes, validates and is settled.
func TestClusterChaos(t *testing.T) {
	seed := chaosSeed(t)
	t.Logf("chaos seed %d (III_CHAOS_SEED=%d replays the schedule)", seed, seed)
	plan := newChaosPlan(seed)
	began := time.Now()
	c := startClusterNodes(t)
	tl := newCrashTools(t, c.urls())
	t.Logf("cluster up in %v", time.Since(began))
	began = time.Now()

	// A clusterLoad of no conversations of its own: its agent_end
	// subscription and waitEnds serve the chaos load's sessions.
	cl := &chaosLoad{l: runClusterLoad(t, tl.e, "chaos", 0, chaosTurns), plan: plan, runs: map[string][]chaosRun{}}
	for range plan.kills {
		cl.waves = append(cl.waves, make(chan struct{}))
	}
	errs := make(chan error, chaosSessions)
	cl.l.mu.Lock()
	for i := range chaosSessions {
		sid := fmt.Sprintf("chaos%02d", i)
		cl.l.sessions = append(cl.l.sessions, sid)
		cl.l.poke[sid] = make(chan struct{}, 1)
	}
	cl.l.mu.Unlock()
	for i, sid := range cl.l.sessions {
		go func() { errs <- cl.converse(i, sid) }()
	}
	total := int64(chaosSessions * chaosTurns)
	at := func() time.Duration { return time.Since(began).Round(time.Millisecond) }

	// The chaos: one kill per wave, one node down at a time. The next
	// wave opens once the node is up again (the runs a kill held up may
	// still be running).
	for w, k := range plan.kills {
		if w >= chaosTurns && time.Since(began) > chaosKillBudget {
			close(cl.waves[w])
			t.Logf("wave %d: its kill left out, the chaos has run %v", w+1, at())
			continue
		}
		n := c.nodes[k.node]
		kill := func() {
			n.kill()
			t.Logf("wave %d: n%d killed at %v, %d runs in flight, %d of %d turns done", w+1, k.node+1, at(), cl.inflight.Load(), cl.l.done.Load(), total)
		}
		if k.before {
			kill()
			time.Sleep(k.after)
			close(cl.waves[w])
			time.Sleep(max(k.down-k.after, 0))
		} else {
			close(cl.waves[w])
			time.Sleep(k.after)
			kill()
			time.Sleep(k.down)
		}
		n.startAsync()
		t.Logf("wave %d: n%d restarted at %v, %d runs in flight", w+1, k.node+1, at(), cl.inflight.Load())
		n.waitUp(60 * time.Second)
		t.Logf("wave %d: n%d up at %v", w+1, k.node+1, at())
	}
	deadline := time.After(60 * time.Second)
	for range chaosSessions {
		select {
		case err := <-errs:
			if err != nil {
				cl.l.diagnose(t)
				t.Fatal(err)
			}
		case <-deadline:
			cl.l.diagnose(t)
			t.Fatalf("conversations not finished: %d of %d turns", cl.l.done.Load(), total)
		}
	}
	t.Logf("load done %v after its start", time.Since(began).Round(time.Millisecond))
	crashQuiesce(t, tl.e.JetStream(), 30*time.Second)
	cl.check(t, tl)
	// Not a failure, but what the runs' times depend on: a survivor
	// whose membership heartbeats could not land while the members
	// bucket elected a leader may be dropped from the grain cluster, and
	// rejoins with none of its grains (docs/CLUSTER.md).
	for i, n := range c.nodes {
		if k := strings.Count(n.logs.String(), "this node was dropped from the grain cluster"); k > 0 {
			t.Logf("n%d was dropped from the grain cluster %d times", i+1, k)
		}
	}
}

// check verifies every session once the load is done.
func (cl *chaosLoad) check(t *testing.T, tl *crashTools) {
	t.Helper()
	js := cl.l.js
	counts := tl.counts()
	var (
		interrupted, errored, failedRuns, gaps int
		took                                   []time.Duration
	)
	for _, sid := range cl.l.sessions {
		cl.mu.Lock()
		runs := cl.runs[sid]
		cl.mu.Unlock()
		failed := t.Failed()
		// The stream holds every run's agent_end soon after the load saw
		// it (a read right after a restart may meet an election: again).
		var evs []crashEvent
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			read, err := crashReadEvents(ctx, js, sid)
			cancel()
			if err == nil {
				evs = read
				if crashCount(evs, agent.EventAgentEnd) >= len(runs) {
					break
				}
			}
			if time.Now().After(deadline) {
				if evs == nil {
					t.Fatalf("%s: events not read in 20 s: %v", sid, err)
				}
				break // the checks below say what is missing
			}
		}
		// Readers order by seq (docs/CLUSTER.md): a publish retried after
		// an election may land behind later ones.
		slices.SortStableFunc(evs, func(a, b crashEvent) int { return cmp.Compare(a.Seq, b.Seq) })
		ends := crashCheckEvents(t, sid, evs)

		// One agent_end per run started, in order, with the stop reason
		// turn::get_state gave; a failed run says why.
		var stops []crashEvent
		for _, ev := range evs {
			if ev.Type == agent.EventAgentEnd {
				stops = append(stops, ev)
			}
		}
		if len(stops) != len(runs) {
			t.Errorf("%s: %d agent_end for %d runs: %s", sid, len(stops), len(runs), crashTypes(evs))
		}
		for i, r := range runs {
			took = append(took, r.took)
			if i < len(stops) && stops[i].StopReason != r.stop {
				t.Errorf("%s: run %d (%s) ended %q in the events, %q in its record", sid, i+1, r.runID, stops[i].StopReason, r.stop)
			}
			if r.stop != agent.StopEnd {
				failedRuns++
				t.Logf("%s: turn %d, run %s failed (%+v); started again", sid, r.turn, r.runID, r.failure)
			}
		}
		if last := runs[len(runs)-1]; last.stop != agent.StopEnd || last.turn != chaosTurns {
			t.Errorf("%s: the last run (turn %d) ended %q", sid, last.turn, last.stop)
		}
		// seq may skip numbers (docs/PROTOCOL.md: a replayed outbox
		// numbers the copies the stream drops); the gaps are counted.
		for i := 1; i < len(evs); i++ {
			if evs[i].Seq > evs[i-1].Seq+1 {
				gaps++
			}
		}

		// Calls: each tag ran at most once; a call reported done ran
		// exactly once; one whose outcome a dead grain lost is the error
		// "interrupted", one whose answer a dead connection lost is a
		// timeout (docs/CLUSTER.md, node loss 4), one that did not run
		// is any error with a reason; no call ran that the events do not
		// show.
		args := map[string]string{} // call id → "tag/n"
		for _, ev := range evs {
			if ev.Type == agent.EventFunctionExecutionStart {
				args[ev.FunctionCallID] = fmt.Sprintf("%v/%v", ev.Args["tag"], ev.Args["n"])
			}
		}
		shown := map[string]bool{}
		for id, ev := range ends {
			key := "crash::fast " + args[id]
			shown[key] = true
			ran, text := counts[key], crashResultText(ev)
			switch {
			case !ev.IsError && (ran != 1 || !strings.Contains(text, `"run":1`)):
				t.Errorf("%s: call %s (%s) reported done: %q, but ran %d times", sid, id, args[id], text, ran)
			case ev.IsError && strings.Contains(text, "interrupted"):
				interrupted++
			case ev.IsError && text == "":
				t.Errorf("%s: call %s (%s) failed without a reason", sid, id, args[id])
			case ev.IsError && ran == 1 && chaosErrorCode(ev) != "timeout":
				// It ran, and its answer was not lost (that is a timeout:
				// the tools' connection died with a node), yet it failed.
				t.Errorf("%s: call %s (%s) ran once but failed: %s", sid, id, args[id], text)
			case ev.IsError:
				errored++
				t.Logf("%s: call %s (%s, ran %d times) failed: %s", sid, id, args[id], ran, text)
			}
		}
		for key, ran := range counts {
			if !strings.HasPrefix(key, "crash::fast "+sid+"/") {
				continue
			}
			if ran > 1 {
				t.Errorf("%s: %s ran %d times", sid, key, ran)
			}
			if !shown[key] {
				t.Errorf("%s: %s ran, but no call of it ended in the events", sid, key)
			}
		}

		// The record: decodes, validates, terminal, outbox delivered, the
		// last run's.
		if rec := crashSettled(t, js, sid); rec.RunID != runs[len(runs)-1].runID || rec.State != agent.StateStopped {
			t.Errorf("%s: record of run %s in state %s, want run %s stopped", sid, rec.RunID, rec.State, runs[len(runs)-1].runID)
		}
		if len(runs) == chaosTurns {
			roles := make([]agent.Role, 0, 4*chaosTurns)
			for range chaosTurns {
				roles = append(roles, agent.RoleUser, agent.RoleAssistant, agent.RoleFunctionResult, agent.RoleAssistant)
			}
			crashCheckTranscript(t, cl.l.e, sid, roles...)
		} else {
			t.Logf("%s: %d runs for %d turns: the transcript's roles are not checked", sid, len(runs), chaosTurns)
		}
		if !failed && t.Failed() {
			t.Logf("%s: events as stored:\n%s", sid, crashDump(evs))
		}
	}
	slices.Sort(took)
	if len(took) > 0 {
		t.Logf("runs took %v (median), %v (90th percentile), %v (slowest)", took[len(took)/2], took[len(took)*9/10], took[len(took)-1])
	}
	t.Logf("%d calls interrupted, %d failed otherwise, %d runs failed and ran again, %d seq gaps", interrupted, errored, failedRuns, gaps)
}

// chaosErrorCode is the wire code in a failed call's result details.
func chaosErrorCode(ev crashEvent) string {
	if ev.Result == nil {
		return ""
	}
	m, _ := ev.Result.Details.(map[string]any)
	code, _ := m["code"].(string)
	return code
}
