package orchestrator_test

// Helpers of the crash tests (crash_test.go): the iii binary, a node run as
// a child process that the tests kill -9 and restart, the tools the model
// calls (they live in the test process, so they survive the node and count
// how many times each call really ran), and observers that read the bus.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/subjects"
)

// iiiBin is the iii binary, built once per test binary run.
var iiiBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if iiiBin.dir != "" {
		_ = os.RemoveAll(iiiBin.dir)
	}
	os.Exit(code)
}

// iiiBinary builds github.com/iii-on-nats/iii/cmd/iii on first use.
func iiiBinary(t *testing.T) string {
	t.Helper()
	iiiBin.once.Do(func() {
		iiiBin.dir, iiiBin.err = os.MkdirTemp("", "iii-crash-")
		if iiiBin.err != nil {
			return
		}
		iiiBin.path = filepath.Join(iiiBin.dir, "iii")
		gobin := "go"
		if root := runtime.GOROOT(); root != "" {
			gobin = filepath.Join(root, "bin", "go")
		}
		out, err := exec.Command(gobin, "build", "-o", iiiBin.path, "github.com/iii-on-nats/iii/cmd/iii").CombinedOutput()
		if err != nil {
			iiiBin.err = fmt.Errorf("go build cmd/iii: %v\n%s", err, out)
		}
	})
	if iiiBin.err != nil {
		t.Fatal(iiiBin.err)
	}
	return iiiBin.path
}

// crashUpWatcher closes up once the child printed "iii is up" (every service,
// the orchestrator included, has started by then).
type crashUpWatcher struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	up   chan struct{}
	once sync.Once
}

func (w *crashUpWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if bytes.Contains(w.buf.Bytes(), []byte("iii is up")) {
		w.once.Do(func() { close(w.up) })
	}
	return len(p), nil
}

// crashNode is `iii up` run as a child process on a fixed address and home, so
// that a restart finds the JetStream data of the killed process.
type crashNode struct {
	t    *testing.T
	bin  string
	home string
	addr string
	sets []string
	// extra are more arguments to `iii up`.
	extra []string

	logs   enginetest.Buffer // stderr of every start, separated by markers
	up     *crashUpWatcher
	cmd    *exec.Cmd
	exited chan error
	starts int
}

// crashPolicy is the crash nodes' iii-permissions.yaml.
const crashPolicy = "version: 1\nrules:\n  - \"crash::*\"\n"

// crashFreeAddrs returns n distinct loopback addresses whose ports were
// free a moment ago (picked together: ports picked one by one can repeat).
func crashFreeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i, p := range enginetest.FreePorts(t, n) {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return addrs
}

// startCrashNode starts a node with --set sets (on top of a 2 s step ack
// wait) and kills it when the test ends.
func startCrashNode(t *testing.T, sets ...string) *crashNode {
	t.Helper()
	// The node's policy allows the test tools (the default would park
	// them for approval).
	return startCrashNodeWith(t, crashPolicy, nil, sets...)
}

// startCrashNodeWith starts a node with policyYAML as its
// iii-permissions.yaml and extra arguments to `iii up`.
func startCrashNodeWith(t *testing.T, policyYAML string, extra []string, sets ...string) *crashNode {
	t.Helper()
	n := &crashNode{t: t, bin: iiiBinary(t), home: enginetest.NodeHome(t), addr: crashFreeAddrs(t, 1)[0], sets: sets, extra: extra}
	if err := os.WriteFile(filepath.Join(n.home, "iii-permissions.yaml"), []byte(policyYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			t.Logf("node stderr:\n%s", n.logs.String())
		}
	})
	n.start()
	return n
}

func (n *crashNode) url() string { return "nats://" + n.addr }

// start launches the child and waits until it says it is up.
func (n *crashNode) start() {
	n.t.Helper()
	n.startAsync()
	n.waitUp(30 * time.Second)
}

// kill sends SIGKILL: no shutdown code of the node runs.
func (n *crashNode) kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.exited
	n.cmd = nil
}

// restart kills the node and starts it again on the same address and home.
func (n *crashNode) restart() {
	n.t.Helper()
	n.kill()
	n.start()
}

// crashTools is an engine in the test process, connected to a node over TCP
// (it reconnects after a kill), that serves the functions the model calls:
//
//   - crash::slow {tag}: counts its start, then blocks until the tag is
//     released (not idempotent);
//   - crash::idem {tag}: the same, declared idempotent;
//   - crash::fast {tag, n}: counts and returns after crashFastCallTime.
//
// Every start is counted by function, tag and n before anything else, so
// the counts say how many times a call really ran.
type crashTools struct {
	e  *engine.Engine
	nc *nats.Conn

	mu    sync.Mutex
	runs  map[string]int
	gates map[string]chan struct{}
}

// crashFastCallTime is how long crash::fast takes: long enough for a random kill
// to land while it runs now and then.
const crashFastCallTime = 30 * time.Millisecond

type crashArgs struct {
	Tag string `json:"tag"`
	N   int    `json:"n"`
}

func crashRunKey(fn, tag string, n int) string { return fmt.Sprintf("%s %s/%d", fn, tag, n) }

func newCrashTools(t *testing.T, url string) *crashTools {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("crash-tools"), nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond), nats.ReconnectJitter(0, 0), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(nc)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	tl := &crashTools{e: e, nc: nc, runs: map[string]int{}, gates: map[string]chan struct{}{}}
	t.Cleanup(func() {
		tl.releaseAll()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Close(ctx)
		nc.Close()
	})
	w, err := e.Worker("crash-tools")
	if err != nil {
		t.Fatal(err)
	}
	blocking := func(fn string) engine.Handler {
		return func(ctx context.Context, req *engine.Request) (any, error) {
			var a crashArgs
			if err := req.Bind(&a); err != nil {
				return nil, err
			}
			n, gate := tl.begin(fn, a)
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return map[string]any{"tag": a.Tag, "run": n}, nil
		}
	}
	for _, fn := range []engine.Function{
		{ID: "crash::slow", Description: "blocks until released; not idempotent", Handler: blocking("crash::slow")},
		{ID: "crash::idem", Description: "blocks until released; idempotent", Idempotent: true, Handler: blocking("crash::idem")},
		{ID: "crash::fast", Description: "returns after 30 ms", Timeout: 3 * time.Second, Handler: func(_ context.Context, req *engine.Request) (any, error) {
			var a crashArgs
			if err := req.Bind(&a); err != nil {
				return nil, err
			}
			n, _ := tl.begin("crash::fast", a)
			time.Sleep(crashFastCallTime)
			return map[string]any{"tag": a.Tag, "n": a.N, "run": n}, nil
		}},
	} {
		if err := w.Register(fn); err != nil {
			t.Fatal(err)
		}
	}
	return tl
}

// begin counts a start and returns the count and the tag's gate.
func (tl *crashTools) begin(fn string, a crashArgs) (int, chan struct{}) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	k := crashRunKey(fn, a.Tag, a.N)
	tl.runs[k]++
	return tl.runs[k], tl.gateLocked(a.Tag)
}

func (tl *crashTools) gateLocked(tag string) chan struct{} {
	g, ok := tl.gates[tag]
	if !ok {
		g = make(chan struct{})
		tl.gates[tag] = g
	}
	return g
}

// count is how many times fn ran for (tag, n).
func (tl *crashTools) count(fn, tag string, n int) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.runs[crashRunKey(fn, tag, n)]
}

// counts is a copy of every count.
func (tl *crashTools) counts() map[string]int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := make(map[string]int, len(tl.runs))
	for k, v := range tl.runs {
		out[k] = v
	}
	return out
}

// release unblocks every run of tag, past and future.
func (tl *crashTools) release(tag string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	g := tl.gateLocked(tag)
	select {
	case <-g:
	default:
		close(g)
	}
}

func (tl *crashTools) releaseAll() {
	tl.mu.Lock()
	tags := make([]string, 0, len(tl.gates))
	for tag := range tl.gates {
		tags = append(tags, tag)
	}
	tl.mu.Unlock()
	for _, tag := range tags {
		tl.release(tag)
	}
}

// crashStartRun starts a run of the echo model with text on sid.
func crashStartRun(t *testing.T, e *engine.Engine, sid, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var res struct {
		Started bool   `json:"started"`
		Reason  string `json:"reason"`
	}
	err := e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(text)}}, &res)
	if err != nil || !res.Started {
		t.Fatalf("run::start %s = %+v, %v", sid, res, err)
	}
}

// crashTurnState asks turn::get_state.
func crashTurnState(e *engine.Engine, sid string) (*agent.TurnView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var v *agent.TurnView
	err := e.Trigger(ctx, "turn::get_state", map[string]string{"session_id": sid}, &v)
	return v, err
}

// crashLoadRecord reads sid's turn record straight from KV and checks that it
// decodes and validates.
func crashLoadRecord(ctx context.Context, js jetstream.JetStream, sid string) (turn.Record, error) {
	kv, err := js.KeyValue(ctx, subjects.SessionBucket(subjects.TurnStateBucket, sid))
	if err != nil {
		return turn.Record{}, err
	}
	ent, err := kv.Get(ctx, sid)
	if err != nil {
		return turn.Record{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(ent.Value()))
	dec.DisallowUnknownFields()
	var rec turn.Record
	if err := dec.Decode(&rec); err != nil {
		return turn.Record{}, fmt.Errorf("record of %s does not decode: %w", sid, err)
	}
	if err := rec.Validate(); err != nil {
		return turn.Record{}, fmt.Errorf("record of %s: %w", sid, err)
	}
	if rec.SessionID != sid {
		return turn.Record{}, fmt.Errorf("record under %s is for session %s", sid, rec.SessionID)
	}
	return rec, nil
}

// crashSettled waits until sid's record is terminal with its outbox
// delivered (the grain's last write) and valid.
func crashSettled(t *testing.T, js jetstream.JetStream, sid string) turn.Record {
	t.Helper()
	var rec turn.Record
	enginetest.Eventually(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		if rec, err = crashLoadRecord(ctx, js, sid); err != nil {
			return err
		}
		if !rec.State.Terminal() || len(rec.Outbox) > 0 {
			return fmt.Errorf("record of %s: state %s, %d effects undelivered", sid, rec.State, len(rec.Outbox))
		}
		return nil
	})
	return rec
}

// crashQuiesce waits until every turn step was acked: no grain holds a wake and
// nothing is due for redelivery, so nothing else will run.
func crashQuiesce(t *testing.T, js jetstream.JetStream, timeout time.Duration) {
	t.Helper()
	enginetest.Eventually(t, timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cons, err := js.Consumer(ctx, "III_TURN_STEPS", "orchestrator")
		if err != nil {
			return err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumAckPending > 0 || info.NumPending > 0 {
			return fmt.Errorf("steps: %d un-acked, %d pending", info.NumAckPending, info.NumPending)
		}
		return nil
	})
}

// crashEvent is an event as the stream holds it.
type crashEvent struct {
	agent.Event
	msgID     string
	streamSeq uint64
}

// crashReadEvents returns every event stored for sid, in stream order.
func crashReadEvents(ctx context.Context, js jetstream.JetStream, sid string) ([]crashEvent, error) {
	subj := "iii.events." + sid
	s, err := js.Stream(ctx, subjects.SessionStream(subjects.EventStream, sid))
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return nil, err
	}
	n := int(info.State.Subjects[subj])
	// Message gets from the stream's leader, one after the other: no
	// consumer to place (right after a node died or restarted, an
	// ephemeral consumer may land where it cannot serve, and every retry
	// left one behind, up to the stream's consumer limit).
	out := make([]crashEvent, 0, n)
	for seq := uint64(1); len(out) < n; {
		rm, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if err != nil {
			return nil, fmt.Errorf("events of %s: %d of %d read: %w", sid, len(out), n, err)
		}
		seq = rm.Sequence + 1
		var ev agent.Event
		if err := json.Unmarshal(rm.Data, &ev); err != nil {
			return nil, fmt.Errorf("event of %s does not decode: %w", sid, err)
		}
		out = append(out, crashEvent{Event: ev, msgID: rm.Header.Get(jetstream.MsgIDHeader), streamSeq: rm.Sequence})
	}
	return out, nil
}

// crashLastEventType is the type of sid's latest stored event, "" if none.
func crashLastEventType(js jetstream.JetStream, sid string) (agent.EventType, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, subjects.SessionStream(subjects.EventStream, sid))
	if err != nil {
		return "", err
	}
	m, err := s.GetLastMsgForSubject(ctx, "iii.events."+sid)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var ev agent.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		return "", err
	}
	return ev.Type, nil
}

// crashWaitAgentEnds waits until sid has ends agent_end events and returns all
// of its events.
func crashWaitAgentEnds(t *testing.T, js jetstream.JetStream, sid string, ends int, timeout time.Duration) []crashEvent {
	t.Helper()
	var evs []crashEvent
	enginetest.Eventually(t, timeout, func() error {
		typ, err := crashLastEventType(js, sid)
		if err != nil {
			return err
		}
		if typ != agent.EventAgentEnd {
			return fmt.Errorf("%s: last event %q", sid, typ)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if evs, err = crashReadEvents(ctx, js, sid); err != nil {
			return err
		}
		if n := crashCount(evs, agent.EventAgentEnd); n < ends {
			return fmt.Errorf("%s: %d agent_end of %d", sid, n, ends)
		}
		return nil
	})
	return evs
}

func crashCount(evs []crashEvent, typ agent.EventType) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func crashTypes(evs []crashEvent) string {
	s := make([]string, len(evs))
	for i, ev := range evs {
		s[i] = fmt.Sprintf("%d:%s", ev.Seq, ev.Type)
		if ev.Type == agent.EventTurnStateChanged {
			s[i] += ":" + string(ev.State)
		}
	}
	return strings.Join(s, " ")
}

// crashDump is one line per event: stream sequence, message id, seq,
// type (and state, call), time.
func crashDump(evs []crashEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "  #%d id=%s seq=%d %s", ev.streamSeq, ev.msgID, ev.Seq, ev.Type)
		if ev.Type == agent.EventTurnStateChanged {
			fmt.Fprintf(&b, ":%s", ev.State)
		}
		if ev.FunctionCallID != "" {
			fmt.Fprintf(&b, " call=%s", ev.FunctionCallID)
		}
		fmt.Fprintf(&b, " at=%s\n", time.UnixMilli(ev.TS).UTC().Format("15:04:05.000"))
	}
	return b.String()
}

// crashCheckEvents checks one session's stored events, which may span several
// runs: seq strictly increasing, no message id twice, per run exactly one
// agent_end (the run's last event), and within a run per call id one
// function_execution_start before one function_execution_end, one turn_end
// per model answer, turn_state_changed steps strictly increasing, one
// message_complete per user message. It returns the function_execution_end
// events by call id.
func crashCheckEvents(t *testing.T, sid string, evs []crashEvent) map[string]crashEvent {
	t.Helper()
	ends := map[string]crashEvent{}
	if len(evs) == 0 {
		t.Errorf("%s: no events", sid)
		return ends
	}
	ids := map[string]bool{}
	for i, ev := range evs {
		if ev.SessionID != sid || !ev.Type.Valid() {
			t.Errorf("%s: event %d is %q of session %q", sid, i, ev.Type, ev.SessionID)
		}
		if ev.msgID == "" || ids[ev.msgID] {
			t.Errorf("%s: event %d (%s) has message id %q: empty or seen before", sid, i, ev.Type, ev.msgID)
		}
		ids[ev.msgID] = true
		if i > 0 && ev.Seq <= evs[i-1].Seq {
			t.Errorf("%s: seq not increasing at event %d: %d then %d (%s)", sid, i, evs[i-1].Seq, ev.Seq, crashTypes(evs))
		}
	}
	if last := evs[len(evs)-1]; last.Type != agent.EventAgentEnd {
		t.Errorf("%s: last event is %s, not agent_end", sid, last.Type)
	}
	// Per run: the events up to and including each agent_end.
	run := []crashEvent{}
	for _, ev := range evs {
		run = append(run, ev)
		if ev.Type == agent.EventAgentEnd {
			crashCheckRun(t, sid, run, ends)
			run = run[:0:0]
		}
	}
	return ends
}

func crashCheckRun(t *testing.T, sid string, evs []crashEvent, ends map[string]crashEvent) {
	t.Helper()
	starts := map[string]bool{}
	var (
		answers, turnEnds, users int
		lastStep                 uint64
	)
	for _, ev := range evs {
		switch ev.Type {
		case agent.EventFunctionExecutionStart:
			if starts[ev.FunctionCallID] {
				t.Errorf("%s: function_execution_start twice for %s", sid, ev.FunctionCallID)
			}
			starts[ev.FunctionCallID] = true
		case agent.EventFunctionExecutionEnd:
			if !starts[ev.FunctionCallID] {
				t.Errorf("%s: function_execution_end of %s without a start before it", sid, ev.FunctionCallID)
			}
			if _, ok := ends[ev.FunctionCallID]; ok {
				t.Errorf("%s: function_execution_end twice for %s", sid, ev.FunctionCallID)
			}
			ends[ev.FunctionCallID] = ev
		case agent.EventMessageComplete:
			switch {
			case ev.Message == nil:
				t.Errorf("%s: message_complete without a message", sid)
			case ev.Message.Role == agent.RoleUser:
				users++
			case ev.Message.Role == agent.RoleAssistant && ev.Message.StopReason != agent.StopError:
				answers++
			}
		case agent.EventTurnEnd:
			turnEnds++
		case agent.EventTurnStateChanged:
			if ev.View == nil || ev.View.Step <= lastStep {
				t.Errorf("%s: turn_state_changed %s: step not increasing (view %+v, previous step %d)", sid, ev.State, ev.View, lastStep)
			} else {
				lastStep = ev.View.Step
			}
		}
	}
	for id := range starts {
		if _, ok := ends[id]; !ok {
			t.Errorf("%s: call %s started but never ended", sid, id)
		}
	}
	if turnEnds != answers {
		t.Errorf("%s: %d turn_end for %d model answers: %s", sid, turnEnds, answers, crashTypes(evs))
	}
	if users != 1 {
		t.Errorf("%s: %d user message_complete, want 1: %s", sid, users, crashTypes(evs))
	}
	if n := crashCount(evs, agent.EventAgentEnd); n != 1 {
		t.Errorf("%s: %d agent_end in one run", sid, n)
	}
}

// crashStopReason is the stop reason of the last agent_end.
func crashStopReason(evs []crashEvent) agent.StopReason {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == agent.EventAgentEnd {
			return evs[i].StopReason
		}
	}
	return ""
}

// crashAnswer is the text of the last assistant message_complete.
func crashAnswer(evs []crashEvent) string {
	for i := len(evs) - 1; i >= 0; i-- {
		ev := evs[i]
		if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Role == agent.RoleAssistant {
			var b strings.Builder
			for _, c := range ev.Message.Content {
				if c.Type == agent.ContentText {
					b.WriteString(c.Text)
				}
			}
			return b.String()
		}
	}
	return ""
}

// crashResultText is the text of a function_execution_end's result.
func crashResultText(ev crashEvent) string {
	if ev.Result == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range ev.Result.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// crashCheckTranscript reads sid's transcript from the session tree and
// checks every message is there once, in the order roles want.
func crashCheckTranscript(t *testing.T, e *engine.Engine, sid string, roles ...agent.Role) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out struct {
		Messages []struct {
			Message agent.Message `json:"message"`
		} `json:"messages"`
	}
	if err := e.Trigger(ctx, "session::messages", map[string]string{"session_id": sid}, &out); err != nil {
		t.Fatalf("transcript of %s: %v", sid, err)
	}
	got := make([]agent.Role, 0, len(out.Messages))
	for _, m := range out.Messages {
		if err := m.Message.Validate(); err != nil {
			t.Errorf("transcript of %s: message %d: %v", sid, len(got), err)
		}
		got = append(got, m.Message.Role)
	}
	if fmt.Sprint(got) != fmt.Sprint(roles) {
		t.Errorf("transcript of %s: roles %v, want %v", sid, got, roles)
	}
}

// crashHaltLog is a slog handler that records the session host's warnings.
type crashHaltLog struct {
	mu      sync.Mutex
	reasons []string // reason of every "session grain halted"
}

func (h *crashHaltLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *crashHaltLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "session grain halted" {
		return nil
	}
	reason := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "reason" {
			reason = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.reasons = append(h.reasons, reason)
	h.mu.Unlock()
	return nil
}

func (h *crashHaltLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *crashHaltLog) WithGroup(string) slog.Handler      { return h }

func (h *crashHaltLog) halts() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.reasons...)
}
