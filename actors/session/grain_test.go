package session_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nuid"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
)

// The grain's own tests run it against in-memory ports, so a test can
// hold an effect where it wants and look at every record written. The
// real ports (KV, JetStream, the session tree) are exercised end to end
// by the orchestrator's tests, crash tests with real processes included.

// memStore is a Store with compare-and-set on a revision; it keeps every
// record written.
type memStore struct {
	mu      sync.Mutex
	rec     map[string]turn.Record
	rev     map[string]uint64
	next    uint64
	written []turn.Record
	loads   int
	// refuse, when set, says which records the store refuses for good
	// (too large, as the real one would say).
	refuse func(turn.Record) bool
	// before, when set, is asked about each write before it is made; a
	// record it returns is written first, by another writer (a race).
	before func(turn.Record) *turn.Record
}

func newMemStore() *memStore {
	return &memStore{rec: map[string]turn.Record{}, rev: map[string]uint64{}}
}

func (s *memStore) Load(_ context.Context, sid string) (turn.Record, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads++
	r, ok := s.rec[sid]
	if !ok {
		return turn.Record{}, 0, session.ErrNoRecord
	}
	return r, s.rev[sid], nil
}

func (s *memStore) Write(_ context.Context, rec turn.Record, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.before != nil {
		if other := s.before(rec); other != nil {
			s.next++
			s.rec[other.SessionID], s.rev[other.SessionID] = *other, s.next
			s.written = append(s.written, *other)
		}
	}
	if s.rev[rec.SessionID] != rev {
		return 0, session.ErrFenced
	}
	if s.refuse != nil && s.refuse(rec) {
		return 0, fmt.Errorf("%w: the turn record is too large", session.ErrUnstorable)
	}
	s.next++
	rec.Outbox = slices.Clone(rec.Outbox)
	s.rec[rec.SessionID], s.rev[rec.SessionID] = rec, s.next
	s.written = append(s.written, rec)
	return s.next, nil
}

func (s *memStore) records() []turn.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.written)
}

// memHistory is a History (and SettledHistory) whose appends complete
// only while it is not held; an append with an id seen before is a no-op,
// as the session tree's dedup id makes it. Emitted events are kept by id.
type memHistory struct {
	mu      sync.Mutex
	cond    *sync.Cond
	held    bool
	pending int
	tickets int // appends handed out
	served  int // appends applied, in ticket order
	msgs    map[string][]agent.Message
	ids     map[string]bool
	events  map[string]int // times each event id was emitted
	settled bool           // implement SettledHistory
}

func newMemHistory(settled bool) *memHistory {
	h := &memHistory{msgs: map[string][]agent.Message{}, ids: map[string]bool{}, events: map[string]int{}, settled: settled}
	h.cond = sync.NewCond(&h.mu)
	return h
}

func (h *memHistory) hold(on bool) {
	h.mu.Lock()
	h.held = on
	h.mu.Unlock()
	h.cond.Broadcast()
}

func (h *memHistory) Load(_ context.Context, sid string) ([]agent.Message, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.msgs[sid]), nil
}

func (h *memHistory) Append(_ context.Context, sid, id string, msgs []agent.Message) error {
	h.mu.Lock()
	h.pending++
	ticket := h.tickets
	h.tickets++
	h.mu.Unlock()
	go func() { // in order, as the real port appends
		h.mu.Lock()
		defer h.mu.Unlock()
		for h.held || h.served != ticket {
			h.cond.Wait()
		}
		h.served++
		if !h.ids[id] {
			h.ids[id] = true
			h.msgs[sid] = append(h.msgs[sid], msgs...)
		}
		h.pending--
		h.cond.Broadcast()
	}()
	return nil
}

func (h *memHistory) Flush(ctx context.Context, _ string) error {
	stop := context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.cond.Broadcast()
	})
	defer stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.pending > 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h.cond.Wait()
	}
	return nil
}

func (h *memHistory) Emit(_ context.Context, _ agent.Event, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events[id]++
	return nil
}

func (h *memHistory) transcript(sid string) []agent.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.msgs[sid])
}

// settledHistory adds SettledHistory to memHistory.
type settledHistory struct{ *memHistory }

func (h settledHistory) Settled(string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pending == 0, nil
}

// callModel asks for one call of test::fn, then answers "done" once a
// function result is in the transcript.
type callModel struct{}

func (callModel) Stream(_ context.Context, req session.ModelRequest) turn.Input {
	if slices.ContainsFunc(req.Messages, func(m agent.Message) bool { return m.Role == agent.RoleFunctionResult }) {
		return turn.ModelDone{Message: agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("done")}, StopReason: agent.StopEnd}}
	}
	return turn.ModelDone{Message: agent.Message{Role: agent.RoleAssistant, StopReason: agent.StopFunctionCall,
		Content: []agent.Content{{Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "test::fn"}}}}
}

// countingFunctions runs every call and counts the runs.
type countingFunctions struct {
	mu   sync.Mutex
	runs int
}

func (f *countingFunctions) Gate(_ context.Context, _ string, c turn.Call) session.Verdict {
	return session.Verdict{Kind: session.VerdictRun, Call: c}
}

func (f *countingFunctions) Call(context.Context, string, turn.Call) agent.FunctionResult {
	f.mu.Lock()
	f.runs++
	f.mu.Unlock()
	return agent.FunctionResult{Content: []agent.Content{agent.Text("ok")}}
}

func (f *countingFunctions) Idempotent(context.Context, string) bool { return false }

func (f *countingFunctions) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs
}

type emptyInbox struct{}

func (emptyInbox) Peek(context.Context, string) ([]agent.Message, []agent.Message, session.InboxMark, error) {
	return nil, nil, session.InboxMark{}, nil
}
func (emptyInbox) Ack(context.Context, string, session.InboxMark) error                  { return nil }
func (emptyInbox) Requeue(context.Context, string, []agent.Message) error                { return nil }
func (noApprovals) Withdraw(context.Context, string, []string) error                     { return nil }
func (noApprovals) Request(context.Context, string, string, agent.PendingApproval) error { return nil }
func (noApprovals) Decisions(context.Context, string, string, []agent.PendingApproval) ([]turn.ApprovalResolved, error) {
	return nil, nil
}

type noApprovals struct{}

// startHost runs a host on the in-memory ports with callModel; it closes
// with the test.
func startHost(t *testing.T, st *memStore, hist *memHistory, fns *countingFunctions) *session.Host {
	t.Helper()
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: callModel{},
		Functions: fns, Inbox: emptyInbox{}, Approvals: noApprovals{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

// seed writes a new run's record, as run::start does.
func seed(t *testing.T, st *memStore, sid string) {
	t.Helper()
	seedRun(t, st, sid)
}

// seedRun is seed returning the record written and its revision.
func seedRun(t *testing.T, st *memStore, sid string) (turn.Record, uint64) {
	t.Helper()
	rec, _, err := turn.New(agent.RunStart{SessionID: sid, Provider: "p", Model: "m",
		Messages: []agent.Message{agent.UserText("go", 1)}}, "run1", 1)
	if err != nil {
		t.Fatal(err)
	}
	_, rev, _ := st.Load(context.Background(), sid)
	rev, err = st.Write(context.Background(), rec, rev)
	if err != nil {
		t.Fatal(err)
	}
	return rec, rev
}

// wake wakes sid and returns a channel closed when the grain acks.
func wake(t *testing.T, h *session.Host, sid string, step uint64) <-chan struct{} {
	t.Helper()
	acked := make(chan struct{})
	var once sync.Once
	err := h.Wake(sid, session.Wake{Step: step,
		Ack:        func() error { once.Do(func() { close(acked) }); return nil },
		InProgress: func() error { return nil },
		Nak:        func(time.Duration) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return acked
}

// settledIn waits until sid's stored record is terminal with its outbox
// delivered: a finished run's record is written settled a moment after
// its end (unless the next run overwrites it first).
func settledIn(t *testing.T, st *memStore, sid string) {
	t.Helper()
	waitFor(t, sid+"'s record to be written settled", func() bool {
		r := st.current(sid)
		return r.State.Terminal() && len(r.Outbox) == 0
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestCheckpointCarriesUnconfirmed: with the transcript appends held, a
// run's mid-run checkpoints do not wait for them but carry them at the
// head of the outbox; the terminal checkpoint waits. A new activation
// after a crash (the host closed with appends still held) delivers the
// carried effects again: the transcript ends up whole and in order, no
// effect is applied twice, the function ran once.
func TestCheckpointCarriesUnconfirmed(t *testing.T) {
	st := newMemStore()
	hist := newMemHistory(true)
	fns := &countingFunctions{}
	ports := session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: callModel{},
		Functions: fns, Inbox: emptyInbox{}, Approvals: noApprovals{}}
	const sid = "s1"
	seed(t, st, sid)

	hist.hold(true)
	h1, err := session.NewHost(ports)
	if err != nil {
		t.Fatal(err)
	}
	acked := wake(t, h1, sid, 0)
	// The run goes on to its terminal transition, whose checkpoint waits
	// for the held appends; the checkpoint before it is the function's
	// result with the steering check that continued to the model.
	waitFor(t, "the run to reach the terminal checkpoint", func() bool {
		recs := st.records()
		return fns.count() == 1 && len(recs) > 0 && recs[len(recs)-1].State == agent.StateAssistantStreaming && recs[len(recs)-1].TurnCount == 2
	})
	select {
	case <-acked:
		t.Fatal("wake acked while appends were unconfirmed")
	default:
	}
	recs := st.records()
	if len(recs) < 2 || len(recs[1].Outbox) == 0 || recs[1].Outbox[0].Kind != turn.EffectAppendHistory {
		t.Fatalf("provisioning did not append the user's message first: %v", outboxes(recs))
	}
	userAppend := recs[1].Outbox[0].ID
	var carried int
	for _, r := range recs[2:] {
		if len(r.Outbox) > 0 && r.Outbox[0].ID == userAppend {
			carried++ // the user's message, appended at step 1, still carried
		}
	}
	if carried == 0 {
		t.Fatalf("no checkpoint carried the unconfirmed append: %v", outboxes(st.records()))
	}
	if got := hist.transcript(sid); len(got) != 0 {
		t.Fatalf("appends landed while held: %v", got)
	}

	// Crash: the host goes away with the appends still held; they are
	// lost with it (the in-memory port forgets them as a dead process
	// would).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h1.Close(ctx); err != nil {
		t.Fatalf("close with a flush blocked: %v", err)
	}
	hist.mu.Lock()
	hist.pending = 0
	hist.mu.Unlock()
	hist2 := newMemHistory(true)
	hist2.events = hist.events // the event stream survives the crash
	ports.History, ports.Events = settledHistory{hist2}, hist2

	h2, err := session.NewHost(ports)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close(context.Background())
	last := st.records()[len(st.records())-1]
	select {
	case <-wake(t, h2, sid, last.Step):
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not finish after the restart")
	}
	hist.hold(false) // let the dead process's goroutines go

	settledIn(t, st, sid)
	final, _, _ := st.Load(context.Background(), sid)
	if final.State != agent.StateStopped || len(final.Outbox) != 0 {
		t.Fatalf("final record %s with %d effects in its outbox", final.State, len(final.Outbox))
	}
	if n := fns.count(); n != 1 {
		t.Fatalf("the function ran %d times", n)
	}
	var roles []string
	for _, m := range hist2.transcript(sid) {
		roles = append(roles, string(m.Role))
	}
	want := []string{"user", "assistant", "function_result", "assistant"}
	if !slices.Equal(roles, want) {
		t.Fatalf("transcript %v, want %v", roles, want)
	}
	if n := hist2.events["run1:"+fmt.Sprint(final.Step)+":1"]; n == 0 {
		// agent_end is the terminal step's second event.
		t.Fatalf("agent_end not emitted: %v", hist2.events)
	}
}

// TestCheckpointWaitsWithoutSettled: a History that cannot tell what is
// confirmed, or says a delivery failed (session.ErrUndelivered), makes
// the checkpoint wait for the appends (Flush), so no record carries an
// effect whose delivery is not under way.
func TestCheckpointWaitsWithoutSettled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history func(*memHistory) session.History
	}{
		{"no SettledHistory", func(h *memHistory) session.History { return h }},
		{"a delivery failed", func(h *memHistory) session.History { return undeliveredHistory{h} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newMemStore()
			hist := newMemHistory(false)
			fns := &countingFunctions{}
			h, err := session.NewHost(session.Ports{Store: st, History: tc.history(hist), Events: hist, Model: callModel{},
				Functions: fns, Inbox: emptyInbox{}, Approvals: noApprovals{}})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(context.Background())
			seed(t, st, "s2")
			hist.hold(true)
			acked := wake(t, h, "s2", 0)
			// Provisioned is written, the user's message is delivered, and
			// the next checkpoint (the model's answer with its call's
			// start) waits for it.
			time.Sleep(100 * time.Millisecond)
			if recs := st.records(); len(recs) != 2 || recs[1].State != agent.StateAssistantStreaming {
				t.Fatalf("records written while an append was held: %v", outboxes(recs))
			}
			hist.hold(false)
			select {
			case <-acked:
			case <-time.After(10 * time.Second):
				t.Fatal("the run did not finish")
			}
			// Every effect a record holds is of a step after the record
			// written before it (a write may take in two inputs: a
			// steering check is folded into the write that enters it).
			recs := st.records()
			for i, r := range recs[1:] {
				for _, e := range r.Outbox {
					step, err := strconv.ParseUint(strings.Split(e.ID, ":")[1], 10, 64)
					if err != nil || step <= recs[i].Step || step > r.Step {
						t.Fatalf("record of step %d carries effect %s: %v", r.Step, e.ID, outboxes(recs))
					}
				}
			}
			if n := fns.count(); n != 1 {
				t.Fatalf("the function ran %d times", n)
			}
		})
	}
}

// undeliveredHistory is a SettledHistory whose unfinished appends are
// failed deliveries (session.ErrUndelivered) that Flush makes again.
type undeliveredHistory struct{ *memHistory }

func (h undeliveredHistory) Settled(string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending > 0 {
		return false, session.ErrUndelivered
	}
	return true, nil
}

func outboxes(recs []turn.Record) []string {
	var out []string
	for _, r := range recs {
		var ids []string
		for _, e := range r.Outbox {
			ids = append(ids, e.ID)
		}
		out = append(out, fmt.Sprintf("%s%v", r.State, ids))
	}
	return out
}

// recordingModel is callModel that also keeps the messages of every call.
type recordingModel struct {
	mu    sync.Mutex
	calls [][]agent.Message
}

func (m *recordingModel) Stream(ctx context.Context, req session.ModelRequest) turn.Input {
	m.mu.Lock()
	m.calls = append(m.calls, slices.Clone(req.Messages))
	m.mu.Unlock()
	return callModel{}.Stream(ctx, req)
}

func (m *recordingModel) requests() [][]agent.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// TestRecoveryDoesNotRepeatLandedAppends: an activation died after its
// outbox's transcript appends landed but before its next checkpoint, so
// the record still holds them. The next activation reads the transcript
// (with them) and delivers the outbox again: the model must see each
// message once, as the stored transcript holds it once.
func TestRecoveryDoesNotRepeatLandedAppends(t *testing.T) {
	st := newMemStore()
	hist := newMemHistory(true)
	model := &recordingModel{}
	const sid = "s3"
	seed(t, st, sid)
	rec, rev, _ := st.Load(context.Background(), sid)
	next, effs, err := turn.Apply(rec, turn.Provisioned{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(context.Background(), next, rev); err != nil {
		t.Fatal(err)
	}
	// The dead activation delivered the outbox: the user's message is in
	// the transcript under its effect id.
	for _, e := range effs {
		if e.Kind == turn.EffectAppendHistory {
			if err := hist.Append(context.Background(), sid, e.ID, e.Messages); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := hist.Flush(context.Background(), sid); err != nil {
		t.Fatal(err)
	}
	recoverRun(t, session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: model}, sid, next.Step)
	if got := hist.transcript(sid); len(got) != 4 {
		t.Fatalf("stored transcript has %d messages, want 4", len(got))
	}
	for i, msgs := range model.requests() {
		users := 0
		for _, m := range msgs {
			if m.Role == agent.RoleUser {
				users++
			}
		}
		if users != 1 {
			t.Fatalf("model call %d saw the user's message %d times: %d messages", i+1, users, len(msgs))
		}
	}
}

// recoverRun starts a host on ports (functions that run every call, empty
// inboxes and no approvals unless set), wakes sid at step as a recovery
// would, and waits until the run is finished and its wake acked.
func recoverRun(t *testing.T, ports session.Ports, sid string, step uint64) {
	t.Helper()
	if ports.Functions == nil {
		ports.Functions = &countingFunctions{}
	}
	if ports.Inbox == nil {
		ports.Inbox = emptyInbox{}
	}
	if ports.Approvals == nil {
		ports.Approvals = noApprovals{}
	}
	h, err := session.NewHost(ports)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	select {
	case <-wake(t, h, sid, step):
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not finish")
	}
}

// replayedHistory adds ReplayedHistory to settledHistory and records the
// calls it gets.
type replayedHistory struct {
	settledHistory
	mu       sync.Mutex
	replayed []string // effect id @ writtenMs
	plain    []string
}

func (h *replayedHistory) Append(ctx context.Context, sid, id string, msgs []agent.Message) error {
	h.mu.Lock()
	h.plain = append(h.plain, id)
	h.mu.Unlock()
	return h.settledHistory.Append(ctx, sid, id, msgs)
}

func (h *replayedHistory) AppendReplayed(ctx context.Context, sid, id string, msgs []agent.Message, writtenMs int64) error {
	h.mu.Lock()
	h.replayed = append(h.replayed, fmt.Sprintf("%s@%d", id, writtenMs))
	h.mu.Unlock()
	return h.settledHistory.Append(ctx, sid, id, msgs)
}

// TestReplayedAppendsOnce: the transcript appends of a loaded outbox that
// the transcript does not end with go through ReplayedHistory, with the
// record's write time (so the port can look them up however late the
// replay is); every append after them is a plain one.
func TestReplayedAppendsOnce(t *testing.T) {
	st := newMemStore()
	mem := newMemHistory(true)
	hist := &replayedHistory{settledHistory: settledHistory{mem}}
	const sid = "s9"
	rec, rev := seedRun(t, st, sid)
	next, effs, err := turn.Apply(rec, turn.Provisioned{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(context.Background(), next, rev); err != nil {
		t.Fatal(err)
	}
	var appendID string
	for _, e := range effs {
		if e.Kind == turn.EffectAppendHistory {
			appendID = e.ID
		}
	}
	// The dead activation died before it delivered anything.
	recoverRun(t, session.Ports{Store: st, History: hist, Events: mem, Model: callModel{}}, sid, next.Step)
	hist.mu.Lock()
	replayed, plain := slices.Clone(hist.replayed), slices.Clone(hist.plain)
	hist.mu.Unlock()
	if want := []string{fmt.Sprintf("%s@%d", appendID, next.UpdatedAtMs)}; !slices.Equal(replayed, want) {
		t.Fatalf("replayed appends %q, want %q", replayed, want)
	}
	if len(plain) == 0 || slices.Contains(plain, appendID) {
		t.Fatalf("plain appends %q: want the run's later ones only", plain)
	}
	if got := mem.transcript(sid); len(got) != 4 {
		t.Fatalf("stored transcript has %d messages, want 4", len(got))
	}
}

// TestEmptySteeringCheckUnwritten: a steering check is not checkpointed
// on its own: it is folded into the write of the input that entered it
// (the function's result, continuing to the model; the model's last
// answer, ending the run); nor is the model's answer asking for a call,
// which is written with the call's start (step 4). The run's writes, in
// order, are the ones listed.
func TestEmptySteeringCheckUnwritten(t *testing.T) {
	st := newMemStore()
	hist := newMemHistory(true)
	h := startHost(t, st, hist, &countingFunctions{})
	seed(t, st, "s4")
	select {
	case <-wake(t, h, "s4", 1):
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not finish")
	}
	settledIn(t, st, "s4")
	var got []string
	for _, r := range st.records() {
		got = append(got, fmt.Sprintf("%d:%s", r.Step, r.State))
	}
	want := []string{"1:provisioning", "2:assistant_streaming", "4:function_execute",
		"6:assistant_streaming", "8:stopped", "8:stopped"}
	if !slices.Equal(got, want) {
		t.Fatalf("writes %v, want %v", got, want)
	}
	// Step 6's turn_state_changed went out once, under its step's id.
	if n := hist.events["run1:6:0"]; n != 1 {
		t.Fatalf("step 6's event emitted %d times: %v", n, hist.events)
	}
}

func (s *memStore) loaded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loads
}

func (s *memStore) current(sid string) turn.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec[sid]
}

// TestWrittenStartsTheRun: the record run::start hands over with
// Host.Written starts the run on this host without the grain reading it
// back; the step message that follows is acked as a duplicate and the
// function runs once. A record handed over at a revision that has moved
// since fences the grain at its first write, and the step message then
// runs the session from the store.
func TestWrittenStartsTheRun(t *testing.T) {
	t.Run("fresh", func(t *testing.T) {
		st, fns := newMemStore(), &countingFunctions{}
		h := startHost(t, st, newMemHistory(true), fns)
		rec, rev := seedRun(t, st, "w1")
		before := st.loaded()
		if !h.Written("w1", rec, rev, 0) {
			t.Fatal("an unclustered host did not take the written record")
		}
		waitFor(t, "the run to stop", func() bool { return st.current("w1").State == agent.StateStopped })
		if n := st.loaded() - before; n != 0 {
			t.Fatalf("the grain read the record %d times; it was handed over", n)
		}
		select {
		case <-wake(t, h, "w1", rec.Step): // the step message, late
		case <-time.After(10 * time.Second):
			t.Fatal("the duplicate step was not acked")
		}
		if n := fns.count(); n != 1 {
			t.Fatalf("function ran %d times, want 1", n)
		}
	})
	t.Run("stale", func(t *testing.T) {
		st, fns := newMemStore(), &countingFunctions{}
		h := startHost(t, st, newMemHistory(true), fns)
		rec, rev := seedRun(t, st, "w2")
		// Something wrote after the hand-over was taken: the same run's
		// record, one revision on.
		if _, err := st.Write(context.Background(), rec, rev); err != nil {
			t.Fatal(err)
		}
		h.Written("w2", rec, rev, 0)
		waitFor(t, "the fenced grain to stop", func() bool { return h.Active() == 0 })
		if got := st.current("w2").State; got != agent.StateProvisioning {
			t.Fatalf("a fenced grain moved the record to %s", got)
		}
		select {
		case <-wake(t, h, "w2", rec.Step):
		case <-time.After(10 * time.Second):
			t.Fatal("the step did not finish the run")
		}
		if got := st.current("w2").State; got != agent.StateStopped {
			t.Fatalf("record ended %s, want stopped", got)
		}
		if n := fns.count(); n != 1 {
			t.Fatalf("function ran %d times, want 1", n)
		}
	})
}

// TestSettledCopy: Host.Settled answers only for an active grain idle at
// the end of a run, with the record as written (retired) and its
// revision; it never activates a grain.
func TestSettledCopy(t *testing.T) {
	st := newMemStore()
	hist := newMemHistory(true)
	h := startHost(t, st, hist, &countingFunctions{})
	if _, _, ok := h.Settled("c1"); ok || h.Active() != 0 {
		t.Fatalf("Settled of a session with no grain: ok=%v, %d active", ok, h.Active())
	}
	rec, rev := seedRun(t, st, "c1")
	hist.hold(true) // the run cannot finish: its appends are held
	h.Written("c1", rec, rev, 0)
	waitFor(t, "the run to pass provisioning", func() bool { return st.current("c1").Step > rec.Step })
	if _, _, ok := h.Settled("c1"); ok {
		t.Fatal("Settled answered for a grain in the middle of a run")
	}
	hist.hold(false)
	waitFor(t, "the run to stop", func() bool { return st.current("c1").State == agent.StateStopped })
	var (
		got  turn.Record
		grev uint64
		ok   bool
	)
	waitFor(t, "the grain to settle", func() bool { got, grev, ok = h.Settled("c1"); return ok })
	_, want, _ := st.Load(context.Background(), "c1")
	if grev != want || got.State != agent.StateStopped || got.RunID != rec.RunID || got.LastAssistant != nil {
		t.Fatalf("Settled = rev %d (store %d), %+v", grev, want, got)
	}
}

// seqEvents counts the grain's Resequence calls.
type seqEvents struct {
	*memHistory
	n *atomic.Int64
}

func (e seqEvents) Resequence(string) { e.n.Add(1) }

// TestResequenceWhenTheRecordMoved: the grain has the event numbering
// read again from the stream when it activates and when the record moved
// under it, but not when run::start built the new run on the grain's own
// last write (nobody else can have emitted since).
func TestResequenceWhenTheRecordMoved(t *testing.T) {
	st, hist, n := newMemStore(), newMemHistory(true), &atomic.Int64{}
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: seqEvents{hist, n}, Model: callModel{},
		Functions: &countingFunctions{}, Inbox: emptyInbox{}, Approvals: noApprovals{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	// run starts a new run over revision prev, as run::start does, and
	// waits for the grain to settle at its end.
	run := func(what string, prev uint64, want int64) uint64 {
		t.Helper()
		before := n.Load()
		rec, _, err := turn.New(agent.RunStart{SessionID: "q1", Provider: "p", Model: "m",
			Messages: []agent.Message{agent.UserText("go", 1)}}, nuid.Next(), 1)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := st.Write(context.Background(), rec, prev)
		if err != nil {
			t.Fatal(err)
		}
		h.Written("q1", rec, rev, prev)
		var settled uint64
		waitFor(t, what+": the grain to settle", func() bool {
			got, grev, ok := h.Settled("q1")
			settled = grev
			return ok && got.RunID == rec.RunID
		})
		if got := n.Load() - before; got != want {
			t.Fatalf("%s: resequenced %d times, want %d", what, got, want)
		}
		return settled
	}
	rev := run("a first run activates the grain", 0, 1)
	rev = run("a run built on the grain's last write", rev, 0)
	// Another writer moves the record between runs.
	cur, _, _ := st.Load(context.Background(), "q1")
	moved, err := st.Write(context.Background(), cur, rev)
	if err != nil {
		t.Fatal(err)
	}
	run("a run built on a record another writer moved", moved, 1)
}

// steerInbox holds one steering message until it is acked; at the ack it
// notes whether a record that took the message in was written.
type steerInbox struct {
	st *memStore
	mu sync.Mutex
	// acked: the message was removed; writtenFirst: a record holding its
	// transcript append was written before.
	acked, writtenFirst bool
}

func (b *steerInbox) Peek(context.Context, string) ([]agent.Message, []agent.Message, session.InboxMark, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.acked {
		return nil, nil, session.InboxMark{}, nil
	}
	return []agent.Message{agent.UserText("steer", 1)}, nil, session.InboxMark{Steering: []string{"steer"}}, nil
}

func (b *steerInbox) Ack(_ context.Context, _ string, mark session.InboxMark) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.st.records() {
		for _, e := range r.Outbox {
			if e.Kind == turn.EffectAppendHistory && len(e.Messages) > 0 && e.Messages[0].Content[0].Text == "steer" {
				b.writtenFirst = true
			}
		}
	}
	b.acked = b.acked || len(mark.Steering) == 1
	return nil
}

func (b *steerInbox) Requeue(context.Context, string, []agent.Message) error { return nil }

// TestSteeringFoldedIntoTheWrite: a steering message found by the check
// the function's result enters is taken in by the same write, removed
// from the inbox only after that write, and seen by the next model call.
func TestSteeringFoldedIntoTheWrite(t *testing.T) {
	st, hist, model := newMemStore(), newMemHistory(true), &recordingModel{}
	inbox := &steerInbox{st: st}
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: model,
		Functions: &countingFunctions{}, Inbox: inbox, Approvals: noApprovals{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	seed(t, st, "f1")
	select {
	case <-wake(t, h, "f1", 1):
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not finish")
	}
	inbox.mu.Lock()
	acked, first := inbox.acked, inbox.writtenFirst
	inbox.mu.Unlock()
	if !acked || !first {
		t.Fatalf("steering acked %v, after the write that took it in %v", acked, first)
	}
	settledIn(t, st, "f1")
	var got []string
	for _, r := range st.records() {
		got = append(got, fmt.Sprintf("%d:%s", r.Step, r.State))
	}
	// The function's result and the check that took the steering in are
	// one write (step 6); so are the model's last answer and the check
	// that ended the run, and the answer asking for the call and the
	// call's start (step 4).
	if want := []string{"1:provisioning", "2:assistant_streaming", "4:function_execute",
		"6:assistant_streaming", "8:stopped", "8:stopped"}; !slices.Equal(got, want) {
		t.Fatalf("writes %v, want %v", got, want)
	}
	calls := model.requests()
	if len(calls) != 2 {
		t.Fatalf("%d model calls, want 2", len(calls))
	}
	last := calls[1][len(calls[1])-1]
	if last.Role != agent.RoleUser || last.Content[0].Text != "steer" {
		t.Fatalf("the second model call ends with %s %+v, want the steering message", last.Role, last.Content)
	}
}

// TestSettledWriteLeftToTheNextRun: a finished run's record stays in the
// store with its delivered outbox for a moment; the next run, started on
// the grain's settled copy (which lists no outbox), overwrites it and the
// settled write never happens. Left alone, the record is written settled;
// a grain that passivates first writes it before it stops.
func TestSettledWriteLeftToTheNextRun(t *testing.T) {
	start := func(t *testing.T, h *session.Host, st *memStore, sid, run string, prev uint64) {
		t.Helper()
		rec, _, err := turn.New(agent.RunStart{SessionID: sid, Provider: "p", Model: "m",
			Messages: []agent.Message{agent.UserText("go", 1)}}, run, 1)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := st.Write(context.Background(), rec, prev)
		if err != nil {
			t.Fatal(err)
		}
		h.Written(sid, rec, rev, prev)
	}
	// ended waits for the grain's settled copy of run and returns its
	// revision.
	ended := func(t *testing.T, h *session.Host, sid, run string) uint64 {
		t.Helper()
		var rev uint64
		waitFor(t, run+" to end", func() bool {
			got, grev, ok := h.Settled(sid)
			rev = grev
			return ok && got.RunID == run
		})
		return rev
	}
	t.Run("overwritten", func(t *testing.T) {
		st := newMemStore()
		h := startHost(t, st, newMemHistory(true), &countingFunctions{})
		start(t, h, st, "d1", "r1", 0)
		rev := ended(t, h, "d1", "r1")
		if got, _, _ := h.Settled("d1"); len(got.Outbox) != 0 {
			t.Fatalf("the settled copy lists %d effects", len(got.Outbox))
		}
		if cur := st.current("d1"); !cur.State.Terminal() || len(cur.Outbox) == 0 {
			t.Fatalf("stored record %s with %d effects right after the end; want the terminal write with its outbox", cur.State, len(cur.Outbox))
		}
		start(t, h, st, "d1", "r2", rev)
		ended(t, h, "d1", "r2")
		settledIn(t, st, "d1")
		terminal := map[string]int{}
		for _, r := range st.records() {
			if r.State.Terminal() {
				terminal[r.RunID]++
			}
		}
		if terminal["r1"] != 1 || terminal["r2"] != 2 {
			t.Fatalf("terminal writes per run %v; want r1 once (overwritten by r2), r2 twice", terminal)
		}
	})
	t.Run("passivated", func(t *testing.T) {
		st := newMemStore()
		hist := newMemHistory(true)
		h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: callModel{},
			Functions: &countingFunctions{}, Inbox: emptyInbox{}, Approvals: noApprovals{}}, session.WithIdleTimeout(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close(context.Background()) })
		start(t, h, st, "d2", "r1", 0)
		waitFor(t, "the grain to passivate", func() bool { return st.current("d2").State.Terminal() && h.Active() == 0 })
		if cur := st.current("d2"); len(cur.Outbox) != 0 {
			t.Fatalf("the grain passivated leaving %d delivered effects in the stored record", len(cur.Outbox))
		}
	})
}

// heldGate holds every gate until release is closed.
type heldGate struct {
	*countingFunctions
	entered chan struct{}
	release chan struct{}
}

func (f heldGate) Gate(ctx context.Context, sid string, c turn.Call) session.Verdict {
	select {
	case f.entered <- struct{}{}:
	default:
	}
	<-f.release // not ctx: a crashed process answers nothing
	return f.countingFunctions.Gate(ctx, sid, c)
}

// TestAnswerWrittenWithItsCallsStart: the model's answer asking for a
// call is not written until the call's gate has answered; it is written
// with the call's start. A crash while the gate is out leaves the record
// before the answer: the next activation calls the model again, and the
// function runs once.
func TestAnswerWrittenWithItsCallsStart(t *testing.T) {
	st, hist, model := newMemStore(), newMemHistory(true), &recordingModel{}
	fns := &countingFunctions{}
	gate := heldGate{countingFunctions: fns, entered: make(chan struct{}, 1), release: make(chan struct{})}
	ports := session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: model,
		Functions: gate, Inbox: emptyInbox{}, Approvals: noApprovals{}}
	h1, err := session.NewHost(ports)
	if err != nil {
		t.Fatal(err)
	}
	seed(t, st, "a1")
	wake(t, h1, "a1", 1)
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the call was never gated")
	}
	if cur := st.current("a1"); cur.State != agent.StateAssistantStreaming {
		t.Fatalf("record %s while the gate is out; want the one before the answer", cur.State)
	}
	for id := range hist.events {
		if strings.HasPrefix(id, "run1:3:") {
			t.Fatalf("the unwritten answer's effect %s was delivered", id)
		}
	}
	// Crash: the host goes away with the gate still out, and never
	// answers (it is let go once the test is over).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	defer close(gate.release)
	ports.Functions = fns
	h2, err := session.NewHost(ports)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close(context.Background())
	select {
	case <-wake(t, h2, "a1", st.current("a1").Step):
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not finish after the restart")
	}
	if n := fns.count(); n != 1 {
		t.Fatalf("the function ran %d times, want 1", n)
	}
	if n := len(model.requests()); n != 3 {
		t.Fatalf("%d model calls, want 3 (the first answer again, then the last)", n)
	}
}

// cancelledModel streams until its context ends, then answers as the
// orchestrator's model port does: a transient failure, "aborted".
type cancelledModel struct{ started chan struct{} }

func (m cancelledModel) Stream(ctx context.Context, _ session.ModelRequest) turn.Input {
	m.started <- struct{}{}
	<-ctx.Done()
	return turn.ModelFailed{Kind: agent.ErrorTransient, Message: "aborted"}
}

// TestCloseAbandonsWhatItCancels: closing a host cancels the model call
// in flight; the cancellation is not recorded as the call's failure. The
// run stays where its last write left it, for the next activation, as
// after a crash.
func TestCloseAbandonsWhatItCancels(t *testing.T) {
	const n = 30 // the host stops its grains one by one: the last ones see the cancellation first
	st, hist := newMemStore(), newMemHistory(true)
	model := cancelledModel{started: make(chan struct{}, n)}
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: model,
		Functions: &countingFunctions{}, Inbox: emptyInbox{}, Approvals: noApprovals{}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		sid := fmt.Sprintf("x%d", i)
		seed(t, st, sid)
		wake(t, h, sid, 1)
	}
	for range n {
		select {
		case <-model.started:
		case <-time.After(10 * time.Second):
			t.Fatal("the model was not called for every session")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a late write would land by now
	for i := range n {
		if got := st.current(fmt.Sprintf("x%d", i)); got.State.Terminal() {
			t.Fatalf("x%d: record %s (%s) after the close; want it left mid-run for the next activation", i, got.State, got.StopReason)
		}
	}
}

// overlapStore is a memStore whose writes of a record going on to a model
// call (assistant_streaming) wait until that call has started, or give up
// after a while; fence makes such a write lose its compare-and-set, as if
// another activation wrote first.
type overlapStore struct {
	*memStore
	started    chan uint64 // steps whose model call started
	fence      bool
	overlapped []bool
}

func (s *overlapStore) Write(ctx context.Context, rec turn.Record, rev uint64) (uint64, error) {
	if rec.State == agent.StateAssistantStreaming {
		overlapped := false
		select {
		case step := <-s.started:
			overlapped = step == rec.Step
		case <-time.After(2 * time.Second):
		}
		s.mu.Lock()
		s.overlapped = append(s.overlapped, overlapped)
		if s.fence {
			s.rev[rec.SessionID]++
		}
		s.mu.Unlock()
	}
	return s.memStore.Write(ctx, rec, rev)
}

// overlapModel is callModel telling st when it starts, and recording, at
// the moment the call's record is committed, whether it is written.
type overlapModel struct {
	st        *overlapStore
	mu        sync.Mutex
	committed []string // per call: "written", "not written" or "cancelled"
}

func (m *overlapModel) Stream(ctx context.Context, req session.ModelRequest) turn.Input {
	m.st.started <- req.Step
	outcome := "cancelled"
	if req.WaitCommitted(ctx) {
		m.st.mu.Lock()
		outcome = "not written"
		if rec := m.st.rec[req.SessionID]; rec.Step == req.Step && rec.State == agent.StateAssistantStreaming {
			outcome = "written"
		}
		m.st.mu.Unlock()
	}
	m.mu.Lock()
	m.committed = append(m.committed, outcome)
	m.mu.Unlock()
	return callModel{}.Stream(ctx, req)
}

// TestModelCallOverlapsTheWrite: the model call a written record goes on
// to starts while that write is in flight (both of a run's: after
// provisioning, after the function's result), and is told the record is
// committed only once it is written. When the write loses its
// compare-and-set the call is cancelled before it is ever told so.
func TestModelCallOverlapsTheWrite(t *testing.T) {
	t.Run("written", func(t *testing.T) {
		st := &overlapStore{memStore: newMemStore(), started: make(chan uint64, 4)}
		hist := newMemHistory(true)
		model := &overlapModel{st: st}
		const sid = "s10"
		rec, _ := seedRun(t, st.memStore, sid)
		recoverRun(t, session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: model}, sid, rec.Step)
		st.mu.Lock()
		overlapped := slices.Clone(st.overlapped)
		st.mu.Unlock()
		if !slices.Equal(overlapped, []bool{true, true}) {
			t.Fatalf("writes going on to a model call overlapped it: %v, want [true true]", overlapped)
		}
		model.mu.Lock()
		defer model.mu.Unlock()
		if !slices.Equal(model.committed, []string{"written", "written"}) {
			t.Fatalf("the calls were committed with their records %v", model.committed)
		}
		if got := hist.transcript(sid); len(got) != 4 {
			t.Fatalf("stored transcript has %d messages, want 4", len(got))
		}
	})
	t.Run("fenced", func(t *testing.T) {
		st := &overlapStore{memStore: newMemStore(), started: make(chan uint64, 4), fence: true}
		hist := newMemHistory(true)
		model := &overlapModel{st: st}
		const sid = "s11"
		rec, _ := seedRun(t, st.memStore, sid)
		h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: model,
			Functions: &countingFunctions{}, Inbox: emptyInbox{}, Approvals: noApprovals{}})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close(context.Background())
		wake(t, h, sid, rec.Step)
		var calls []string
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			model.mu.Lock()
			calls = slices.Clone(model.committed)
			model.mu.Unlock()
			if len(calls) > 0 {
				break
			}
		}
		if !slices.Equal(calls, []string{"cancelled"}) {
			t.Fatalf("calls: %v, want one, cancelled", calls)
		}
	})
}

// TestFailureTooLargeIsLean: the store refuses a run's checkpoint for
// good, and then the failure written instead too (a batch whose calls
// each need an end event): the grain writes the lean failure, which names
// the calls to cancel without an event each, and the run ends instead of
// the grain halting at every redelivery.
func TestFailureTooLargeIsLean(t *testing.T) {
	st, hist := newMemStore(), newMemHistory(true)
	st.refuse = func(rec turn.Record) bool {
		if rec.TurnCount >= 2 && rec.State != agent.StateFailed {
			return true // the results' checkpoint (the next model call's): too large
		}
		return rec.State == agent.StateFailed && slices.ContainsFunc(rec.Outbox, func(e turn.Effect) bool {
			return e.Event != nil && e.Event.Type == agent.EventFunctionExecutionEnd
		})
	}
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: callModel{},
		Functions: &countingFunctions{}, Inbox: emptyInbox{}, Approvals: noApprovals{}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	seed(t, st, "lean1")
	select {
	case <-wake(t, h, "lean1", 1):
	case <-time.After(10 * time.Second):
		t.Fatalf("the run did not end; record %s", st.current("lean1").State)
	}
	cur := st.current("lean1")
	if cur.State != agent.StateFailed || cur.Error == nil || !strings.Contains(cur.Error.Message, "could not be stored") {
		t.Fatalf("record %s, error %+v", cur.State, cur.Error)
	}
	var finish *turn.Finish
	for _, e := range cur.Outbox {
		if e.Event != nil && e.Event.Type == agent.EventFunctionExecutionEnd {
			t.Fatal("the lean failure holds a call's end")
		}
		if e.Finish != nil {
			finish = e.Finish
		}
	}
	if finish == nil || !slices.Equal(finish.Cancel, []string{"c1"}) {
		t.Fatalf("finish %+v; want c1 cancelled", finish)
	}
	// The started call still gets its end, built at delivery.
	i := slices.IndexFunc(cur.Outbox, func(e turn.Effect) bool { return e.Kind == turn.EffectEndCalls })
	if i < 0 || !slices.Equal(cur.Outbox[i].Ends.Calls, []string{"c1"}) {
		t.Fatalf("no end for c1 in %v", outboxes([]turn.Record{cur}))
	}
	hist.mu.Lock()
	n := hist.events[cur.Outbox[i].ID+":0"]
	hist.mu.Unlock()
	if n != 1 {
		t.Fatalf("c1's end emitted %d times", n)
	}
}

// parkingFunctions parks every call for a human's approval.
type parkingFunctions struct{ countingFunctions }

func (*parkingFunctions) Gate(_ context.Context, _ string, c turn.Call) session.Verdict {
	return session.Verdict{Kind: session.VerdictPark, ArgsHash: "h-" + c.ID}
}

// recordingApprovals keeps the pending approval records: requested, less
// withdrawn.
type recordingApprovals struct {
	mu      sync.Mutex
	pending map[string]bool
}

func (a *recordingApprovals) Request(_ context.Context, _, _ string, p agent.PendingApproval) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending[p.FunctionCallID] = true
	return nil
}

func (a *recordingApprovals) Decisions(context.Context, string, string, []agent.PendingApproval) ([]turn.ApprovalResolved, error) {
	return nil, nil
}

func (a *recordingApprovals) Withdraw(_ context.Context, _ string, ids []string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		delete(a.pending, id)
	}
	return nil
}

func (a *recordingApprovals) left() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ids []string
	for id := range a.pending {
		ids = append(ids, id)
	}
	return ids
}

// TestParkRefusedWithdrawsApproval: the gate parks a call and its approval
// is requested, but the store refuses the record that parks it for good.
// The run fails, and its failure withdraws the request: no pending
// approval is left for a call that no record parks.
func TestParkRefusedWithdrawsApproval(t *testing.T) {
	st, hist := newMemStore(), newMemHistory(true)
	st.refuse = func(rec turn.Record) bool { return len(rec.AwaitingApproval) > 0 }
	apr := &recordingApprovals{pending: map[string]bool{}}
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: callModel{},
		Functions: &parkingFunctions{}, Inbox: emptyInbox{}, Approvals: apr})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	seed(t, st, "park1")
	select {
	case <-wake(t, h, "park1", 1):
	case <-time.After(10 * time.Second):
		t.Fatalf("the run did not end; record %s", st.current("park1").State)
	}
	if cur := st.current("park1"); cur.State != agent.StateFailed {
		t.Fatalf("record %s, want failed", cur.State)
	}
	if left := apr.left(); len(left) > 0 {
		t.Fatalf("pending approvals left for %v", left)
	}
}

// TestCarriedEffectsAreRecent: a checkpoint carries unconfirmed effects
// only while they were delivered less than session.MaxCarryAge before it;
// older ones it waits for. A replay looks for carried events that far
// back before the record's time, and would publish older ones again. A
// clock that moves 3 s at every reading makes every unconfirmed effect
// too old by the next checkpoint: with the appends held, no checkpoint
// carries the user's message appended at provisioning.
func TestCarriedEffectsAreRecent(t *testing.T) {
	st, hist, fns := newMemStore(), newMemHistory(true), &countingFunctions{}
	var ticks atomic.Int64
	clock := func() time.Time { return time.UnixMilli(1_000_000).Add(time.Duration(ticks.Add(1)) * 3 * time.Second) }
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: callModel{},
		Functions: fns, Inbox: emptyInbox{}, Approvals: noApprovals{}}, session.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	const sid = "old1"
	seed(t, st, sid)
	hist.hold(true)
	acked := wake(t, h, sid, 0)
	time.AfterFunc(200*time.Millisecond, func() { hist.hold(false) })
	select {
	case <-acked:
	case <-time.After(10 * time.Second):
		t.Fatalf("the run did not end; record %s", st.current(sid).State)
	}
	recs := st.records()
	if len(recs) < 2 || len(recs[1].Outbox) == 0 || recs[1].Outbox[0].Kind != turn.EffectAppendHistory {
		t.Fatalf("provisioning did not append the user's message first: %v", outboxes(recs))
	}
	userAppend := recs[1].Outbox[0].ID
	for i, r := range recs[2:] {
		if slices.ContainsFunc(r.Outbox, func(e turn.Effect) bool { return e.ID == userAppend }) {
			t.Fatalf("checkpoint %d carries the user's message delivered long before: %v", i+2, outboxes(recs))
		}
	}
	if n := fns.count(); n != 1 {
		t.Fatalf("the function ran %d times", n)
	}
}

// TestSettledWriteFencedByTheNextRun: the settled write of a finished run
// loses its compare-and-set to the next run, written by another writer
// (run::start on another replica, or before its hand-over reached the
// grain). The grain then takes that run up as an activation would: with
// the transcript as it is now (another writer may have moved it between
// the runs), and with the calls a dead activation of that run left
// started recovered. It does not go on with the transcript it held for
// the run before, nor wait for calls nobody runs.
func TestSettledWriteFencedByTheNextRun(t *testing.T) {
	newRun := func(t *testing.T, sid string, inputs ...turn.Input) turn.Record {
		t.Helper()
		rec, _, err := turn.New(agent.RunStart{SessionID: sid, Provider: "p", Model: "m",
			Messages: []agent.Message{agent.UserText("again", 5)}}, "r2", 5)
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range inputs {
			if rec, _, err = turn.Apply(rec, in, int64(6+i)); err != nil {
				t.Fatal(err)
			}
		}
		return rec
	}
	// run ends run r1 of sid; at its settled write, r2 (built by mk) is
	// written first, and move changes the transcript with it. It returns
	// r2 once the grain has lost the settled write to it.
	run := func(t *testing.T, h *session.Host, st *memStore, sid string, mk func() turn.Record, move func()) turn.Record {
		t.Helper()
		var (
			once  sync.Once
			r2    turn.Record
			raced = make(chan struct{})
		)
		st.mu.Lock()
		st.before = func(rec turn.Record) *turn.Record {
			var other *turn.Record
			if rec.RunID == "r1" && rec.State.Terminal() && len(rec.Outbox) == 0 {
				once.Do(func() {
					move()
					r2 = mk()
					other = &r2
					close(raced)
				})
			}
			return other
		}
		st.mu.Unlock()
		rec, _, err := turn.New(agent.RunStart{SessionID: sid, Provider: "p", Model: "m",
			Messages: []agent.Message{agent.UserText("go", 1)}}, "r1", 1)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := st.Write(context.Background(), rec, 0)
		if err != nil {
			t.Fatal(err)
		}
		h.Written(sid, rec, rev, 0)
		select {
		case <-raced:
		case <-time.After(10 * time.Second):
			t.Fatal("the settled write of r1 was not made")
		}
		return r2
	}
	t.Run("transcript moved", func(t *testing.T) {
		st, hist, model := newMemStore(), newMemHistory(true), &recordingModel{}
		h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: model,
			Functions: &countingFunctions{}, Inbox: emptyInbox{}, Approvals: noApprovals{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close(context.Background()) })
		const sid = "fx1"
		r2 := run(t, h, st, sid, func() turn.Record { return newRun(t, sid) }, func() {
			// Between the runs another writer appended to the transcript
			// (a compaction, a branch the user picked).
			hist.mu.Lock()
			hist.msgs[sid] = append(hist.msgs[sid], agent.UserText("elsewhere", 4))
			hist.mu.Unlock()
		})
		select {
		case <-wake(t, h, sid, r2.Step):
		case <-time.After(10 * time.Second):
			t.Fatalf("r2 did not finish; record %s", st.current(sid).State)
		}
		calls := model.requests()
		last := calls[len(calls)-1]
		if !slices.ContainsFunc(last, func(m agent.Message) bool { return len(m.Content) > 0 && m.Content[0].Text == "elsewhere" }) {
			t.Fatalf("r2's model call went on with the transcript the grain held for r1: %d messages, without the one appended between the runs", len(last))
		}
	})
	t.Run("calls left started", func(t *testing.T) {
		st, hist, fns := newMemStore(), newMemHistory(true), &countingFunctions{}
		h := startHost(t, st, hist, fns)
		const sid = "fx2"
		// r2 ran on another activation, which died with its call started.
		r2 := run(t, h, st, sid, func() turn.Record {
			return newRun(t, sid, turn.Provisioned{},
				turn.ModelDone{Message: agent.Message{Role: agent.RoleAssistant,
					Content: []agent.Content{{Type: agent.ContentFunctionCall, ID: "c9", FunctionID: "test::fn"}}}},
				turn.CallsStarted{IDs: []string{"c9"}})
		}, func() {})
		select {
		case <-wake(t, h, sid, r2.Step):
		case <-time.After(5 * time.Second):
			t.Fatalf("r2 did not finish: the grain waits in %s for a call nobody runs", st.current(sid).State)
		}
		if got := st.current(sid); got.RunID != "r2" || !got.State.Terminal() {
			t.Fatalf("record %s %s, want r2 ended", got.RunID, got.State)
		}
		if n := fns.count(); n != 1 {
			t.Fatalf("the function ran %d times, want once (r1's; r2's non-idempotent call is not run again)", n)
		}
	})
}

// lateDoneModel streams until it is cancelled, then answers done with
// what it had: the provider finished as the abort came.
type lateDoneModel struct{ started chan struct{} }

func (m lateDoneModel) Stream(ctx context.Context, _ session.ModelRequest) turn.Input {
	close(m.started)
	<-ctx.Done()
	return turn.ModelDone{Message: agent.Message{Role: agent.RoleAssistant, StopReason: agent.StopFunctionCall,
		Content: []agent.Content{agent.Text("streamed in full"), {Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "test::fn"}}}}
}

// TestAbortKeepsAnswerDoneMeanwhile: an abort stops the model stream and
// waits for what it streamed; when the stream had finished meanwhile
// (the port answers done, not failed), that answer is what streamed: it is
// completed aborted and kept in the transcript, without its calls, as a
// partial answer would be.
func TestAbortKeepsAnswerDoneMeanwhile(t *testing.T) {
	st, hist, fns := newMemStore(), newMemHistory(true), &countingFunctions{}
	model := lateDoneModel{started: make(chan struct{})}
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: model,
		Functions: fns, Inbox: emptyInbox{}, Approvals: noApprovals{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	const sid = "ab1"
	seed(t, st, sid)
	acked := wake(t, h, sid, 1)
	select {
	case <-model.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the model call did not start")
	}
	res, err := h.Abort(context.Background(), sid, "stop")
	if err != nil || !res.Aborted {
		t.Fatalf("Abort = %+v, %v", res, err)
	}
	select {
	case <-acked:
	case <-time.After(10 * time.Second):
		t.Fatal("the aborted run did not settle")
	}
	if got := st.current(sid); got.StopReason != agent.StopAborted {
		t.Fatalf("run ended %s/%s, want aborted", got.State, got.StopReason)
	}
	tr := hist.transcript(sid)
	last := tr[len(tr)-1]
	if last.Role != agent.RoleAssistant || last.StopReason != agent.StopAborted || len(last.Content) != 1 || last.Content[0].Text != "streamed in full" {
		t.Fatalf("the transcript ends with %s %s %+v; want the answer that streamed, completed aborted without its call", last.Role, last.StopReason, last.Content)
	}
	if n := fns.count(); n != 0 {
		t.Fatalf("the aborted answer's call ran %d times", n)
	}
}

// listInbox is a steering inbox in memory whose Ack can be made to fail.
// Digests are the items' texts.
type listInbox struct {
	mu       sync.Mutex
	steering []agent.Message
	failAck  bool
	acks     int // Ack calls
}

func (b *listInbox) Peek(context.Context, string) ([]agent.Message, []agent.Message, session.InboxMark, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var mark session.InboxMark
	for _, m := range b.steering {
		mark.Steering = append(mark.Steering, m.Content[0].Text)
	}
	return slices.Clone(b.steering), nil, mark, nil
}

func (b *listInbox) Ack(_ context.Context, _ string, mark session.InboxMark) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.acks++
	if b.failAck {
		return errors.New("inbox unreachable")
	}
	drop := 0
	for drop < len(mark.Steering) && drop < len(b.steering) && b.steering[drop].Content[0].Text == mark.Steering[drop] {
		drop++
	}
	b.steering = b.steering[drop:]
	return nil
}

func (b *listInbox) Requeue(context.Context, string, []agent.Message) error { return nil }

// TestTakenItemsRemovedBeforeTheyAreSeenAgain: the record a steering
// check writes names the items it took in until they are removed from the
// inbox. A removal that fails is done before the next check reads the
// inbox (or the activation halts), in this activation or in one that
// loads such a record: read again, they were taken in a second time (the
// message twice in the transcript; 8 times here before the fix).
func TestTakenItemsRemovedBeforeTheyAreSeenAgain(t *testing.T) {
	st, hist := newMemStore(), newMemHistory(true)
	inbox := &listInbox{steering: []agent.Message{agent.UserText("steer", 2)}, failAck: true}
	ports := session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: callModel{},
		Functions: &countingFunctions{}, Inbox: inbox, Approvals: noApprovals{}}
	h1, err := session.NewHost(ports)
	if err != nil {
		t.Fatal(err)
	}
	seed(t, st, "t1")
	wake(t, h1, "t1", 1)
	// The check after the call's result takes "steer" in; its removal
	// fails, and the next check, after the model's answer, halts on it.
	waitFor(t, "the removal to be tried again", func() bool {
		inbox.mu.Lock()
		defer inbox.mu.Unlock()
		return inbox.acks >= 2
	})
	if err := h1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := st.current("t1"); r.Taken == nil || len(r.Taken.Steering) != 1 || r.State.Terminal() {
		t.Fatalf("the stored record (%s) does not name the item taken in: %+v", r.State, r.Taken)
	}
	inbox.mu.Lock()
	inbox.failAck = false
	inbox.mu.Unlock()
	// A new activation removes it, and the run ends.
	h2, err := session.NewHost(ports)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h2.Close(context.Background()) })
	select {
	case <-wake(t, h2, "t1", 1):
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not finish")
	}
	settledIn(t, st, "t1")
	n := 0
	for _, m := range hist.transcript("t1") {
		if m.Role == agent.RoleUser && len(m.Content) > 0 && m.Content[0].Text == "steer" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the steering message is %d times in the transcript", n)
	}
	if r := st.current("t1"); r.Taken != nil {
		t.Errorf("the settled record still names %+v", r.Taken)
	}
	inbox.mu.Lock()
	defer inbox.mu.Unlock()
	if len(inbox.steering) != 0 {
		t.Errorf("inbox holds %d items", len(inbox.steering))
	}
}

// TestRecordTooLargeWithCarriedEffects: a checkpoint the store refuses
// for good only because of the effects it carries (delivered, not yet
// confirmed: a transcript store lagging behind) waits for them and is
// written alone; the run goes on. It failed the run ("the turn record is
// too large"), although the record without them fitted.
func TestRecordTooLargeWithCarriedEffects(t *testing.T) {
	st, hist := newMemStore(), newMemHistory(true)
	hist.hold(true) // the transcript store lags: appends stay unconfirmed
	var (
		mu      sync.Mutex
		seen    = map[string]bool{}
		refused int
	)
	st.refuse = func(rec turn.Record) bool {
		mu.Lock()
		defer mu.Unlock()
		carries := false
		for _, e := range rec.Outbox {
			carries = carries || seen[e.ID]
		}
		if carries {
			refused++
			hist.hold(false)
			return true
		}
		for _, e := range rec.Outbox {
			seen[e.ID] = true
		}
		return false
	}
	h := startHost(t, st, hist, &countingFunctions{})
	seed(t, st, "c1")
	select {
	case <-wake(t, h, "c1", 1):
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not finish")
	}
	r := st.current("c1")
	mu.Lock()
	defer mu.Unlock()
	if refused == 0 {
		t.Fatal("no write carried effects: the test proves nothing")
	}
	if r.State != agent.StateStopped || r.StopReason != agent.StopEnd {
		t.Fatalf("run ended %s (%s): %+v", r.State, r.StopReason, r.Error)
	}
}

// failAfterCallModel is callModel whose second call (once a function
// result is in the transcript) fails for good.
type failAfterCallModel struct{}

func (failAfterCallModel) Stream(ctx context.Context, req session.ModelRequest) turn.Input {
	if slices.ContainsFunc(req.Messages, func(m agent.Message) bool { return m.Role == agent.RoleFunctionResult }) {
		return turn.ModelFailed{Kind: agent.ErrorPermanent, Message: "provider refused"}
	}
	return callModel{}.Stream(ctx, req)
}

// TestSettledCopyKeepsTaken: a run that ends with a removal of the items
// it took in still to do (it failed, and no steering check came after)
// hands run::start a settled copy that names them, as the stored record
// does: the next run removes them before its first check reads the
// inbox. The copy was retired without them, so the next run took them in
// a second time.
func TestSettledCopyKeepsTaken(t *testing.T) {
	st, hist := newMemStore(), newMemHistory(true)
	inbox := &listInbox{steering: []agent.Message{agent.UserText("steer", 2)}, failAck: true}
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: failAfterCallModel{},
		Functions: &countingFunctions{}, Inbox: inbox, Approvals: noApprovals{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	seed(t, st, "t1")
	select {
	case <-wake(t, h, "t1", 1):
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not finish")
	}
	settledIn(t, st, "t1")
	if r := st.current("t1"); r.State != agent.StateFailed || r.Taken == nil || len(r.Taken.Steering) != 1 {
		t.Fatalf("the stored record (%s) does not name the item taken in: %+v", r.State, r.Taken)
	}
	var (
		got turn.Record
		ok  bool
	)
	waitFor(t, "the grain to settle", func() bool { got, _, ok = h.Settled("t1"); return ok })
	if got.Taken == nil || !slices.Equal(got.Taken.Steering, []string{"steer"}) {
		t.Fatalf("the settled copy names %+v, not the item whose removal failed", got.Taken)
	}
}

// flakyApprovals is recordingApprovals whose first fail Requests fail
// (a KV write that timed out).
type flakyApprovals struct {
	recordingApprovals
	fail atomic.Int32
}

func (a *flakyApprovals) Request(ctx context.Context, sid, runID string, p agent.PendingApproval) error {
	if a.fail.Add(-1) >= 0 {
		return errors.New("approvals bucket unavailable")
	}
	return a.recordingApprovals.Request(ctx, sid, runID, p)
}

// TestActivationRetriesAfterAFailedLoad: an activation that loads a
// record a dead activation left with a parked call and a started one
// fails to record the parked call's approval (a transient error): the
// wake is not acked. The redelivered wake must take the activation up
// again — approval recorded, the started call recovered — rather than go
// on from the half-done load: the grain kept the record as loaded, so it
// skipped the recovery, waited for a call no activation runs and held
// the wake forever.
func TestActivationRetriesAfterAFailedLoad(t *testing.T) {
	st, hist := newMemStore(), newMemHistory(true)
	const sid = "load1"
	rec, rev := seedRun(t, st, sid)
	twoCalls := agent.Message{Role: agent.RoleAssistant, StopReason: agent.StopFunctionCall, Content: []agent.Content{
		{Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "test::fn"},
		{Type: agent.ContentFunctionCall, ID: "c2", FunctionID: "test::fn"},
	}}
	var err error
	for i, in := range []turn.Input{turn.Provisioned{}, turn.ModelDone{Message: twoCalls},
		turn.CallParked{ID: "c1", ArgsHash: "h-c1"}, turn.CallsStarted{IDs: []string{"c2"}}} {
		if rec, _, err = turn.Apply(rec, in, int64(2+i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Write(context.Background(), rec, rev); err != nil {
		t.Fatal(err)
	}
	apr := &flakyApprovals{recordingApprovals: recordingApprovals{pending: map[string]bool{}}}
	apr.fail.Store(1)
	fns := &countingFunctions{}
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: callModel{},
		Functions: fns, Inbox: emptyInbox{}, Approvals: apr})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	first := wake(t, h, sid, rec.Step)
	waitFor(t, "the failed request", func() bool { return apr.fail.Load() == 0 })
	select {
	case <-first:
		t.Fatal("a wake whose load failed was acked")
	case <-time.After(50 * time.Millisecond):
	}
	select {
	case <-wake(t, h, sid, rec.Step): // the redelivery
	case <-time.After(5 * time.Second):
		t.Fatalf("the redelivered wake was not acked: record %s, calls in flight %v", st.current(sid).State, turn.InFlight(st.current(sid)))
	}
	cur := st.current(sid)
	if cur.State != agent.StateFunctionAwaitingApproval || len(turn.InFlight(cur)) > 0 {
		t.Fatalf("record %s with calls in flight %v, want c2 recovered and c1 parked", cur.State, turn.InFlight(cur))
	}
	if got := apr.left(); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("pending approvals %v, want [c1]", got)
	}
	if fns.count() != 0 {
		t.Fatalf("the call of unknown outcome ran %d times again", fns.count())
	}
}

// TestFailedLoadHandsTheWakeBack: a wake whose load fails is handed back
// for a redelivery within seconds (nak with a delay), not left unacked
// until the step consumer's ack wait (60 s) ran out.
func TestFailedLoadHandsTheWakeBack(t *testing.T) {
	st, hist := newMemStore(), newMemHistory(true)
	const sid = "load2"
	rec, rev := seedRun(t, st, sid)
	oneCall := agent.Message{Role: agent.RoleAssistant, StopReason: agent.StopFunctionCall, Content: []agent.Content{
		{Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "test::fn"},
	}}
	var err error
	for i, in := range []turn.Input{turn.Provisioned{}, turn.ModelDone{Message: oneCall}, turn.CallParked{ID: "c1", ArgsHash: "h-c1"}} {
		if rec, _, err = turn.Apply(rec, in, int64(2+i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Write(context.Background(), rec, rev); err != nil {
		t.Fatal(err)
	}
	apr := &flakyApprovals{recordingApprovals: recordingApprovals{pending: map[string]bool{}}}
	apr.fail.Store(1)
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: callModel{},
		Functions: &countingFunctions{}, Inbox: emptyInbox{}, Approvals: apr})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	naked := make(chan time.Duration, 1)
	if err := h.Wake(sid, session.Wake{Step: rec.Step,
		Ack:        func() error { return nil },
		InProgress: func() error { return nil },
		Nak:        func(d time.Duration) error { naked <- d; return nil },
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-naked:
		if d <= 0 || d > 5*time.Second {
			t.Fatalf("handed back for redelivery in %v, want within 5 s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a wake whose load failed was not handed back")
	}
}

// TestAbortQueuedBehindAHalt: a run::abort that waits in a grain's
// mailbox while the grain loses its write (another activation wrote) and
// halts is sent again to a fresh activation, which aborts the run. The
// halted grain never read it: the abort waited out its whole deadline and
// failed.
func TestAbortQueuedBehindAHalt(t *testing.T) {
	st, hist := newMemStore(), newMemHistory(true)
	const sid = "halt1"
	rec, _ := seedRun(t, st, sid)
	writing, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	st.before = func(r turn.Record) *turn.Record {
		fenced := false
		once.Do(func() {
			close(writing)
			st.mu.Unlock() // let the test's Abort reach the host meanwhile
			<-gate
			st.mu.Lock()
			fenced = true
		})
		if !fenced {
			return nil
		}
		other := st.rec[sid] // another activation's write: this one loses
		return &other
	}
	h, err := session.NewHost(session.Ports{Store: st, History: settledHistory{hist}, Events: hist, Model: callModel{},
		Functions: &countingFunctions{}, Inbox: emptyInbox{}, Approvals: &recordingApprovals{pending: map[string]bool{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	wake(t, h, sid, rec.Step)
	select {
	case <-writing:
	case <-time.After(5 * time.Second):
		t.Fatal("the grain did not write")
	}
	type result struct {
		res session.AbortResult
		err error
	}
	out := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := h.Abort(ctx, sid, "user")
		out <- result{res, err}
	}()
	time.Sleep(200 * time.Millisecond) // the abort waits in the mailbox
	close(gate)
	select {
	case r := <-out:
		if r.err != nil || !r.res.Aborted {
			t.Fatalf("abort = %+v, %v; want the run aborted", r.res, r.err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the abort queued behind the halt was never answered")
	}
	waitFor(t, "the aborted run's record", func() bool { return st.current(sid).State.Terminal() })
}
