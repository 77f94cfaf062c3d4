package orchestrator_test

// An audit of the session inbox (session::inbox_push, read at the steering
// check) and of run::abort in every state, end to end on an embedded
// nats-server with the scripted provider.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/approval"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// auditAllEvents reads every event of sid stored so far, until the stream
// has been quiet for quiet.
func auditAllEvents(t *testing.T, e *engine.Engine, sid string, quiet time.Duration) []agent.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := e.JetStream().OrderedConsumer(ctx, subjects.SessionStream(subjects.EventStream, sid), jetstream.OrderedConsumerConfig{FilterSubjects: []string{"iii.events." + sid}})
	if err != nil {
		t.Fatal(err)
	}
	var out []agent.Event
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(quiet))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return out
		}
		if err != nil {
			if strings.Contains(err.Error(), "timeout") {
				return out
			}
			t.Fatalf("events of %s: %v", sid, err)
		}
		var ev agent.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

func auditCount(evs []agent.Event, typ agent.EventType) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// auditUserTexts lists the texts of the user messages the events announce.
func auditUserTexts(evs []agent.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Role == agent.RoleUser {
			var b strings.Builder
			for _, c := range ev.Message.Content {
				b.WriteString(c.Text)
			}
			out = append(out, b.String())
		}
	}
	return out
}

func auditPush(t *testing.T, e *engine.Engine, sid, name, text string) orchestrator.InboxPushResult {
	t.Helper()
	var res orchestrator.InboxPushResult
	if err := e.Trigger(context.Background(), "session::inbox_push", orchestrator.InboxPushRequest{SessionID: sid, Name: name, Item: userText(text)}, &res); err != nil {
		t.Fatalf("inbox_push %s %s: %v", sid, name, err)
	}
	return res
}

func auditView(t *testing.T, e *engine.Engine, sid string) *agent.TurnView {
	t.Helper()
	var v *agent.TurnView
	if err := e.Trigger(context.Background(), "turn::get_state", orchestrator.SessionRequest{SessionID: sid}, &v); err != nil {
		t.Fatalf("turn::get_state %s: %v", sid, err)
	}
	return v
}

func auditDrain(t *testing.T, e *engine.Engine, sid, name string) []agent.Message {
	t.Helper()
	var res orchestrator.InboxDrainResult
	if err := e.Trigger(context.Background(), "session::inbox_drain", orchestrator.InboxDrainRequest{SessionID: sid, Name: name}, &res); err != nil {
		t.Fatalf("inbox_drain %s %s: %v", sid, name, err)
	}
	return res.Items
}

// Steering pushed while the model streams is applied at the next steering
// check, all of it in the order pushed, and wins over a follow-up pushed
// before it: the follow-up comes after the steering's answer, in the same
// run. Both inboxes are empty afterwards.
func TestAuditSteeringWhileStreaming(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	const sid = "au_steer"
	startRun(t, s.e, sid, "/sleep 1500\nfirst")
	waitState(t, s.e, sid, agent.StateAssistantStreaming)
	if r := auditPush(t, s.e, sid, orchestrator.InboxFollowup, "follow-up"); r.Queued != 1 {
		t.Fatalf("follow-up queued %d", r.Queued)
	}
	for i, text := range []string{"steer-1", "steer-2", "steer-3"} {
		if r := auditPush(t, s.e, sid, orchestrator.InboxSteering, text); r.Queued != i+1 {
			t.Fatalf("steering %s queued %d, want %d", text, r.Queued, i+1)
		}
	}
	evs := events(t, s.e, sid, 30*time.Second)
	got := auditUserTexts(evs)
	want := []string{"/sleep 1500\nfirst", "steer-1", "steer-2", "steer-3", "follow-up"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("user messages %q, want %q (%v)", got, want, types(evs))
	}
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
		t.Fatalf("stop reason %q", last.StopReason)
	}
	// The first answer was the model's echo of "first", before the steering.
	var answers []string
	for _, ev := range evs {
		if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Role == agent.RoleAssistant {
			answers = append(answers, ev.Message.Content[0].Text)
		}
	}
	if len(answers) != 3 || answers[0] != "first" {
		t.Fatalf("assistant answers %q, want 3 starting with %q", answers, "first")
	}
	for _, name := range []string{orchestrator.InboxSteering, orchestrator.InboxFollowup} {
		if items := auditDrain(t, s.e, sid, name); len(items) != 0 {
			t.Fatalf("%s inbox still holds %d items", name, len(items))
		}
	}
}

// A follow-up pushed after the run ended is queued (PROTOCOL §8 promises
// nothing more: inbox_push only queues); it does not start a run, and the
// session's next run takes it in at its first steering check.
func TestAuditFollowupAfterRunEnded(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	const sid = "au_after"
	startRun(t, s.e, sid, "hello")
	events(t, s.e, sid, 20*time.Second)
	before := auditView(t, s.e, sid)
	if r := auditPush(t, s.e, sid, orchestrator.InboxFollowup, "late"); r.Queued != 1 {
		t.Fatalf("queued %d", r.Queued)
	}
	time.Sleep(500 * time.Millisecond)
	after := auditView(t, s.e, sid)
	if after == nil || after.RunID != before.RunID || !after.State.Terminal() {
		t.Fatalf("a follow-up pushed to a finished session changed its turn: %+v, before %+v", after, before)
	}
	startRun(t, s.e, sid, "next")
	evs := eventsUntil(t, s.e, sid, 2, 20*time.Second)
	got := auditUserTexts(evs)
	want := []string{"hello", "next", "late"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("user messages %q, want %q", got, want)
	}
}

// An inbox push for a session that never ran is queued without creating a
// turn; bad pushes are invalid_payload, a region without copies
// not_found; nothing is stored for any of them.
func TestAuditInboxPushWithoutRun(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	if r := auditPush(t, s.e, "au_norun", orchestrator.InboxSteering, "hi"); r.Queued != 1 {
		t.Fatalf("queued %d", r.Queued)
	}
	if v := auditView(t, s.e, "au_norun"); v != nil {
		t.Fatalf("an inbox push created a turn: %+v", v)
	}
	tests := []struct {
		name string
		req  any
		want error
	}{
		{"bad name", map[string]any{"session_id": "au_bad", "name": "later", "item": userText("x")}, wire.ErrInvalidPayload},
		{"assistant item", map[string]any{"session_id": "au_bad", "name": "steering", "item": agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("x")}}}, wire.ErrInvalidPayload},
		{"empty item", map[string]any{"session_id": "au_bad", "name": "steering", "item": agent.Message{Role: agent.RoleUser}}, wire.ErrInvalidPayload},
		{"no item", map[string]any{"session_id": "au_bad", "name": "steering"}, wire.ErrInvalidPayload},
		{"bad session", map[string]any{"session_id": "a*b", "name": "steering", "item": userText("x")}, wire.ErrInvalidPayload},
		{"unknown region", map[string]any{"session_id": "zz.au", "name": "steering", "item": userText("x")}, wire.ErrNotFound},
	}
	for _, c := range tests {
		t.Run(c.name, func(t *testing.T) {
			err := s.e.Trigger(ctx, "session::inbox_push", c.req, nil)
			if !errors.Is(err, c.want) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
		})
	}
	if items := auditDrain(t, s.e, "au_bad", orchestrator.InboxSteering); len(items) != 0 {
		t.Fatalf("a refused push stored %d items", len(items))
	}
}

// An inbox holds at most 256 items: the 257th push is a coded conflict and
// the inbox keeps its 256.
func TestAuditInboxFull(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	const sid = "au_full"
	for i := range 256 {
		if r := auditPush(t, s.e, sid, orchestrator.InboxFollowup, fmt.Sprint("m", i)); r.Queued != i+1 {
			t.Fatalf("push %d queued %d", i, r.Queued)
		}
	}
	err := s.e.Trigger(context.Background(), "session::inbox_push", orchestrator.InboxPushRequest{SessionID: sid, Name: orchestrator.InboxFollowup, Item: userText("one too many")}, nil)
	if !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("257th push: %v, want conflict", err)
	}
	items := auditDrain(t, s.e, sid, orchestrator.InboxFollowup)
	if len(items) != 256 || items[0].Content[0].Text != "m0" || items[255].Content[0].Text != "m255" {
		t.Fatalf("inbox holds %d items", len(items))
	}
}

// Items that each fit an inbox but together do not: the push that would
// overflow it finds the inbox full, as a push past 256 items does
// (conflict, until a steering check drains it), and the inbox keeps its
// items. An inbox holds at most a quarter of the max payload: a steering
// check carries all of it into one turn record write (twice), and the run
// takes it in and ends well. An item larger than that alone is
// invalid_payload. Before the bound, 900 KiB of steering made that write
// too large: the run failed with the items still queued, and so did
// every later run of the session.
func TestAuditInboxOverflowsItsBound(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	const sid = "au_big"
	ctx := context.Background()
	var we *wire.Error
	if err := s.e.Trigger(ctx, "session::inbox_push", orchestrator.InboxPushRequest{SessionID: sid, Name: orchestrator.InboxSteering,
		Item: userText(strings.Repeat("x", 300<<10))}, nil); !errors.As(err, &we) || we.Code != wire.CodeInvalidPayload {
		t.Fatalf("a 300 KiB item (the server's max payload is 1 MiB): %v, want invalid_payload", err)
	}
	startRun(t, s.e, sid, "/sleep 800\nfirst")
	waitState(t, s.e, sid, agent.StateAssistantStreaming)
	big := strings.Repeat("x", 100<<10)
	var pushErr error
	pushed := 0
	for range 10 {
		pushErr = s.e.Trigger(ctx, "session::inbox_push", orchestrator.InboxPushRequest{SessionID: sid, Name: orchestrator.InboxSteering, Item: userText(big)}, nil)
		if pushErr != nil {
			break
		}
		pushed++
	}
	// conflict, as a push past maxInboxItems: the inbox is full until a
	// steering check drains it.
	if !errors.As(pushErr, &we) || we.Code != wire.CodeConflict || !strings.Contains(we.Message, "full") || pushed != 2 {
		t.Fatalf("push %d: %v (%+v), want conflict after 2: the inbox is full", pushed+1, pushErr, we)
	}
	evs := events(t, s.e, sid, 30*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd || len(auditUserTexts(evs)) != 1+pushed {
		t.Fatalf("the run that took the inbox in: %v, stop %q (%+v)", types(evs), last.StopReason, auditView(t, s.e, sid).Error)
	}
	if items := auditDrain(t, s.e, sid, orchestrator.InboxSteering); len(items) != 0 {
		t.Fatalf("inbox holds %d items after the run took them in", len(items))
	}
}

// A steering item the transcript refuses (over session.max_entry_size,
// 256 KiB) does not hang the run: it ends, saying why.
func TestAuditSteeringOverEntryLimit(t *testing.T) {
	t.Parallel()
	// A 4 MiB max payload: an inbox takes 1 MiB items (a quarter of it).
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(4<<20))
	s := startStack(t, ns)
	const sid = "au_huge"
	startRun(t, s.e, sid, "/sleep 800\nfirst")
	waitState(t, s.e, sid, agent.StateAssistantStreaming)
	auditPush(t, s.e, sid, orchestrator.InboxSteering, strings.Repeat("y", 300<<10))
	evs := events(t, s.e, sid, 30*time.Second)
	last := evs[len(evs)-1]
	if last.StopReason != agent.StopError {
		t.Fatalf("stop reason %q, want error: %v", last.StopReason, types(evs))
	}
	v := auditView(t, s.e, sid)
	if v == nil || v.Error == nil || v.Error.Message == "" {
		t.Fatalf("the failed run does not say why: %+v", v)
	}
	// The session is usable afterwards.
	startRun(t, s.e, sid, "again")
	if evs := eventsUntil(t, s.e, sid, 2, 20*time.Second); evs[len(evs)-1].StopReason != agent.StopEnd {
		t.Fatalf("next run: %v", types(evs))
	}
}

// run::abort in every state of a running turn: it answers aborted, the
// run ends with exactly one agent_end "aborted", a second abort answers
// aborted:false, a parked call's approval is withdrawn (resolve answers
// not_pending, list_pending is empty), a slow call's context is
// cancelled, and a run::start right after the abort starts.
func TestAuditAbortInEveryState(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	// slow::* runs; math::add needs approval.
	s := startGated(t, ns, "version: 1\nrules:\n  - \"slow::*\"\n")
	ctx := context.Background()
	w, err := s.e.Worker("slow")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 8)
	release := make(chan struct{})
	if err := w.Register(engine.Function{ID: "slow::wait", Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
		started <- struct{}{}
		select {
		case <-ctx.Done():
		case <-release:
		}
		return map[string]any{"ok": true}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		prompt string
		ready  func(t *testing.T, sid string)
		after  func(t *testing.T, sid string, parked *agent.PendingApproval)
	}{
		{name: "streaming", prompt: "/sleep 5000\nnever", ready: func(t *testing.T, sid string) {
			waitState(t, s.e, sid, agent.StateAssistantStreaming)
		}},
		{name: "slow call", prompt: "/call slow::wait", ready: func(t *testing.T, sid string) {
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("slow::wait never started")
			}
		}, after: func(t *testing.T, sid string, _ *agent.PendingApproval) {
			// Over the bus the handler runs on (engine/doc.go): its late
			// answer changes nothing.
			close(release)
			time.Sleep(300 * time.Millisecond)
			all := auditAllEvents(t, s.e, sid, 300*time.Millisecond)
			if n := auditCount(all, agent.EventFunctionExecutionEnd); n != 1 {
				t.Fatalf("%d function_execution_end for one aborted call: %v", n, types(all))
			}
		}},
		{name: "parked", prompt: `/call math::add {"a":1,"b":2}`, ready: func(t *testing.T, sid string) {
			waitState(t, s.e, sid, agent.StateFunctionAwaitingApproval)
		}, after: func(t *testing.T, sid string, p *agent.PendingApproval) {
			if p == nil {
				t.Fatal("no parked call")
			}
			_, err := resolve(ctx, s.e.Conn(), map[string]any{"session_id": sid, "function_call_id": p.FunctionCallID, "decision": "allow", "args_hash": p.ArgsHash})
			if !errors.Is(err, wire.ErrNotPending) {
				t.Fatalf("resolve after abort: %v, want not_pending", err)
			}
			var list approval.ListPendingResponse
			enginetest.Eventually(t, 10*time.Second, func() error {
				if err := s.e.Trigger(ctx, "approval::list_pending", map[string]any{"session_id": sid}, &list); err != nil {
					return err
				}
				if len(list.Pending) != 0 {
					return fmt.Errorf("still pending: %+v", list.Pending)
				}
				return nil
			})
			if n := s.calls.Load(); n != 0 {
				t.Fatalf("the aborted parked call ran %d times", n)
			}
		}},
	}
	for _, c := range tests {
		t.Run(c.name, func(t *testing.T) {
			sid := "au_abort_" + strings.ReplaceAll(c.name, " ", "_")
			startRun(t, s.e, sid, c.prompt)
			c.ready(t, sid)
			var parked *agent.PendingApproval
			if v := auditView(t, s.e, sid); v != nil && len(v.AwaitingApproval) > 0 {
				p := v.AwaitingApproval[0]
				parked = &p
			}
			var ab orchestrator.AbortResult
			if err := s.e.Trigger(ctx, "run::abort", orchestrator.SessionRequest{SessionID: sid}, &ab); err != nil || !ab.Aborted || ab.State != agent.StateStopped || ab.SessionID != sid {
				t.Fatalf("abort = %+v, %v", ab, err)
			}
			// A run::start right after the abort starts.
			var res orchestrator.RunStartResult
			if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("after")}}, &res); err != nil || !res.Started {
				t.Fatalf("run::start right after the abort = %+v, %v", res, err)
			}
			evs := eventsUntil(t, s.e, sid, 2, 30*time.Second)
			var ends []agent.StopReason
			for _, ev := range evs {
				if ev.Type == agent.EventAgentEnd {
					ends = append(ends, ev.StopReason)
				}
			}
			if fmt.Sprint(ends) != fmt.Sprint([]agent.StopReason{agent.StopAborted, agent.StopEnd}) {
				t.Fatalf("agent_end stop reasons %v: %v", ends, types(evs))
			}
			// Aborting the finished session again is a no-op.
			if err := s.e.Trigger(ctx, "run::abort", orchestrator.SessionRequest{SessionID: sid}, &ab); err != nil || ab.Aborted || ab.State != agent.StateStopped {
				t.Fatalf("abort of the finished session = %+v, %v", ab, err)
			}
			if c.after != nil {
				c.after(t, sid, parked)
			}
			if all := auditAllEvents(t, s.e, sid, 500*time.Millisecond); auditCount(all, agent.EventAgentEnd) != 2 {
				t.Fatalf("%d agent_end for two runs: %v", auditCount(all, agent.EventAgentEnd), types(all))
			}
		})
	}
}

// Two aborts at once of the same turn while the model streams: both
// answer, one says aborted, the run ends "aborted" once, and the session's
// next run is not touched by them.
func TestAuditAbortTwiceWhileStreaming(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	auditAbortTwice(t, s, "au_twice_stream", "/sleep 5000\nnever", agent.StateAssistantStreaming)
}

// The same with a call running (over the bus it runs on; the run ends).
func TestAuditAbortTwiceDuringCall(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	w, _ := s.e.Worker("hold")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	_ = w.Register(engine.Function{ID: "slow::hold", Handler: func(ctx context.Context, _ *engine.Request) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return map[string]any{"ok": true}, nil
	}})
	auditAbortTwice(t, s, "au_twice_call", "/call slow::hold", agent.StateFunctionExecute)
}

// auditAbortTwice starts prompt on sid, waits for state, sends two
// run::abort at once and checks the answers, the run's end and the next
// run.
func auditAbortTwice(t *testing.T, s *stack, sid, prompt string, state agent.TurnState) {
	t.Helper()
	ctx := context.Background()
	startRun(t, s.e, sid, prompt)
	waitState(t, s.e, sid, state)
	var (
		wg  sync.WaitGroup
		abs [2]orchestrator.AbortResult
		ers [2]error
	)
	for i := range 2 {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			ers[i] = s.e.Trigger(actx, "run::abort", orchestrator.SessionRequest{SessionID: sid}, &abs[i])
		})
	}
	wg.Wait()
	if ers[0] != nil || ers[1] != nil {
		t.Errorf("aborts answered %v / %v (%+v / %+v)", ers[0], ers[1], abs[0], abs[1])
	}
	n := 0
	for i, a := range abs {
		if ers[i] == nil && a.Aborted {
			n++
		}
	}
	if n > 1 {
		t.Errorf("%d aborts said aborted", n)
	}
	evs := events(t, s.e, sid, 20*time.Second)
	if stop := evs[len(evs)-1].StopReason; stop != agent.StopAborted {
		t.Errorf("the run stopped %q", stop)
	}
	// The next run is not touched by what the aborts left behind.
	startRun(t, s.e, sid, "/sleep 200\nnext")
	evs = eventsUntil(t, s.e, sid, 2, 20*time.Second)
	if stop := evs[len(evs)-1].StopReason; stop != agent.StopEnd {
		t.Errorf("the next run stopped %q: %v", stop, types(evs))
	}
	if all := auditAllEvents(t, s.e, sid, 300*time.Millisecond); auditCount(all, agent.EventAgentEnd) != 2 {
		t.Errorf("%d agent_end for two runs: %v", auditCount(all, agent.EventAgentEnd), types(all))
	}
}

// run::abort of a session that never ran answers aborted:false with no
// state, and creates nothing.
func TestAuditAbortIdleSession(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	var ab orchestrator.AbortResult
	if err := s.e.Trigger(context.Background(), "run::abort", orchestrator.SessionRequest{SessionID: "au_never"}, &ab); err != nil || ab.Aborted || ab.State != "" || ab.SessionID != "au_never" {
		t.Fatalf("abort of a session that never ran = %+v, %v", ab, err)
	}
	if v := auditView(t, s.e, "au_never"); v != nil {
		t.Fatalf("an abort created a turn: %+v", v)
	}
	for _, req := range []any{map[string]any{}, map[string]any{"session_id": "a b"}} {
		if err := s.e.Trigger(context.Background(), "run::abort", req, nil); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Fatalf("abort %v: %v, want invalid_payload", req, err)
		}
	}
}

// run::abort racing the run's natural end: whichever wins, the run has
// exactly one agent_end, its stop reason agrees with the abort's answer
// (aborted:true ⇔ "aborted") and with turn::get_state, and the next
// run::start starts.
func TestAuditAbortRacesNaturalEnd(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			sid := fmt.Sprintf("au_race_%d", i)
			prompt := []string{"hi", `/call math::add {"a":1,"b":2}`}[i%2]
			var res orchestrator.RunStartResult
			if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", Messages: []agent.Message{userText(prompt)}}, &res); err != nil || !res.Started {
				t.Errorf("%s: run::start %+v %v", sid, res, err)
				return
			}
			time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
			var ab orchestrator.AbortResult
			if err := s.e.Trigger(ctx, "run::abort", orchestrator.SessionRequest{SessionID: sid}, &ab); err != nil {
				t.Errorf("%s: abort: %v", sid, err)
				return
			}
			if ab.State != agent.StateStopped {
				t.Errorf("%s: abort answered state %q", sid, ab.State)
			}
			var view *agent.TurnView
			deadline := time.Now().Add(20 * time.Second)
			for {
				view = nil
				if err := s.e.Trigger(ctx, "turn::get_state", orchestrator.SessionRequest{SessionID: sid}, &view); err == nil && view != nil && view.State.Terminal() {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("%s: the run did not end: %+v", sid, view)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			want := agent.StopEnd
			if ab.Aborted {
				want = agent.StopAborted
			}
			if view.StopReason != want {
				t.Errorf("%s: abort answered aborted=%v, turn stopped %q", sid, ab.Aborted, view.StopReason)
			}
			var next orchestrator.RunStartResult
			if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("next")}}, &next); err != nil || !next.Started {
				t.Errorf("%s: run::start after the race = %+v, %v", sid, next, err)
			}
		})
	}
	wg.Wait()
	for i := range 24 {
		sid := fmt.Sprintf("au_race_%d", i)
		evs := eventsUntil(t, s.e, sid, 2, 20*time.Second)
		all := auditAllEvents(t, s.e, sid, 300*time.Millisecond)
		if n := auditCount(all, agent.EventAgentEnd); n != 2 {
			t.Errorf("%s: %d agent_end for two runs: %v", sid, n, types(all))
		}
		var first agent.StopReason
		for _, ev := range evs {
			if ev.Type == agent.EventAgentEnd {
				first = ev.StopReason
				break
			}
		}
		if first != agent.StopEnd && first != agent.StopAborted {
			t.Errorf("%s: first run stopped %q", sid, first)
		}
	}
}

// TestFollowupsStayQueuedWhileSteeringWins: a follow-up read at a steering
// check that steering wins stays in its inbox, ahead of later pushes. The
// machine used to hold it in the turn record and put it back when the run
// ended; when the inbox had filled up meanwhile (it is one value, bounded
// by the max payload; here another client filled it), that put back
// failed at every try and the session was stuck with the follow-up out of
// its inbox.
func TestFollowupsStayQueuedWhileSteeringWins(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	const sid = "au_held"
	ctx := context.Background()
	startRun(t, s.e, sid, "/sleep 1500\nfirst")
	waitState(t, s.e, sid, agent.StateAssistantStreaming)
	auditPush(t, s.e, sid, orchestrator.InboxFollowup, "F0 "+strings.Repeat("f", 200<<10))
	auditPush(t, s.e, sid, orchestrator.InboxSteering, "/sleep 5000\nsteer")
	// The steering check took the steering in: the model streams again.
	enginetest.Eventually(t, 15*time.Second, func() error {
		v := auditView(t, s.e, sid)
		if v == nil || v.State != agent.StateAssistantStreaming || v.TurnCount < 2 {
			return fmt.Errorf("turn %+v", v)
		}
		return nil
	})
	// Another client fills the follow-up inbox up to 40 KiB short of the
	// max payload.
	kv, err := s.e.JetStream().KeyValue(ctx, subjects.InboxBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := sid + "." + orchestrator.InboxFollowup
	var items []agent.Message
	held := 0
	// Compare-and-set, as the orchestrator writes: the check's removal
	// of what it read may land meanwhile.
	enginetest.Eventually(t, 10*time.Second, func() error {
		items = nil
		var rev uint64
		if e, err := kv.Get(ctx, key); err == nil {
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &items); err != nil {
				return err
			}
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		}
		held = len(items)
		size := func() int { b, _ := json.Marshal(items); return len(b) }
		for i := 1; size() < 1<<20-(40<<10)-(20<<10); i++ {
			items = append(items, userText(fmt.Sprintf("F%d %s", i, strings.Repeat("g", 20<<10))))
		}
		data, _ := json.Marshal(items)
		var err error
		if rev == 0 {
			_, err = kv.Create(ctx, key, data)
		} else {
			_, err = kv.Update(ctx, key, data, rev)
		}
		return err
	})
	var ab orchestrator.AbortResult
	if err := s.e.Trigger(ctx, "run::abort", orchestrator.SessionRequest{SessionID: sid}, &ab); err != nil || !ab.Aborted {
		t.Fatalf("abort = %+v, %v", ab, err)
	}
	// The follow-up heads its inbox, before the ones added later.
	drained := auditDrain(t, s.e, sid, orchestrator.InboxFollowup)
	if held != 1 || len(drained) != len(items) || drained[0].Content[0].Text[:2] != "F0" {
		t.Fatalf("follow-up inbox held %d items at the fill, holds %d after the run (want %d, F0 first)", held, len(drained), len(items))
	}
	// The session is not stuck: its next run starts and ends.
	startRun(t, s.e, sid, "next")
	enginetest.Eventually(t, 15*time.Second, func() error {
		v := auditView(t, s.e, sid)
		if v == nil || !v.State.Terminal() || v.TurnCount != 1 {
			return fmt.Errorf("turn %+v", v)
		}
		return nil
	})
}

// TestNextRunRemovesItemsTheLastOneTook: a run whose grain died after the
// write that took steering in, before removing it from the inbox, leaves
// a record naming the item (Taken). The next run::start carries that
// name over, and the new run's first steering check removes the item
// before it reads the inbox: the message, in the last run's transcript
// already, is not taken in again.
func TestNextRunRemovesItemsTheLastOneTook(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	const sid = "au_taken"
	ctx := context.Background()
	startRun(t, s.e, sid, "first")
	events(t, s.e, sid, 20*time.Second)
	auditPush(t, s.e, sid, orchestrator.InboxSteering, "taken before the crash")
	auditPush(t, s.e, sid, orchestrator.InboxSteering, "pushed after")
	// What the dead grain's record said: it took the first item in.
	js := s.e.JetStream()
	ikv, err := js.KeyValue(ctx, subjects.InboxBucket)
	if err != nil {
		t.Fatal(err)
	}
	ie, err := ikv.Get(ctx, sid+"."+orchestrator.InboxSteering)
	if err != nil {
		t.Fatal(err)
	}
	var items []agent.Message
	if err := json.Unmarshal(ie.Value(), &items); err != nil {
		t.Fatal(err)
	}
	data, _ := wire.MarshalJSON(items[0])
	sum := sha256.Sum256(data)
	tkv, err := js.KeyValue(ctx, subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	te, err := tkv.Get(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	var rec turn.Record
	if err := json.Unmarshal(te.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec.Taken = &turn.Taken{Steering: []string{hex.EncodeToString(sum[:16])}}
	raw, _ := json.Marshal(rec)
	if _, err := tkv.Update(ctx, sid, raw, te.Revision()); err != nil {
		t.Fatal(err)
	}
	startRun(t, s.e, sid, "next")
	evs := eventsUntil(t, s.e, sid, 2, 20*time.Second)
	got := auditUserTexts(evs)
	if want := []string{"first", "next", "pushed after"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("user messages %q, want %q", got, want)
	}
	if items := auditDrain(t, s.e, sid, orchestrator.InboxSteering); len(items) != 0 {
		t.Fatalf("steering inbox holds %d items", len(items))
	}
}

// TestForeignInboxTakenInPieces: an inbox value another client wrote,
// larger than an inbox holds (a push keeps it within a quarter of the max
// payload), is not fatal. Steering checks take it in a piece within the
// bound at a time, in order, and an item larger than the bound alone is
// skipped with a warning (the inbox's next write drops it). Before, the one
// check that took it all in made a turn record too large to store, the
// run failed with the items still queued, and so did every later run.
func TestForeignInboxTakenInPieces(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	const sid = "au_foreign"
	ctx := context.Background()
	var items []agent.Message
	var want []string
	for i := range 20 {
		items = append(items, userText(fmt.Sprintf("piece-%02d %s", i, strings.Repeat("p", 30<<10))))
		want = append(want, fmt.Sprintf("piece-%02d", i))
		if i == 9 {
			items = append(items, userText("oversized "+strings.Repeat("o", 270<<10)))
		}
	}
	data, _ := json.Marshal(items)
	kv, err := s.e.JetStream().KeyValue(ctx, subjects.InboxBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := sid + "." + orchestrator.InboxSteering
	if _, err := kv.Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	startRun(t, s.e, sid, "first")
	evs := events(t, s.e, sid, 60*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
		t.Fatalf("stop %q: %+v", last.StopReason, auditView(t, s.e, sid).Error)
	}
	var got []string
	for _, text := range auditUserTexts(evs) {
		got = append(got, strings.Fields(text)[0])
	}
	if want = append([]string{"first"}, want...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("user messages %q, want %q", got, want)
	}
	if items := auditDrain(t, s.e, sid, orchestrator.InboxSteering); len(items) != 0 {
		t.Fatalf("steering inbox holds %d items", len(items))
	}
}

// TestDrainLeavesWhatItsReplyCannotCarry: session::inbox_drain of an inbox
// value another client wrote, too large for one reply, answers conflict
// and leaves the inbox as it is; emptied first, the items were lost with
// the reply (it failed: "maximum payload exceeded"). (A 64 KiB max
// payload: an inbox item may be 16 KiB.)
func TestDrainLeavesWhatItsReplyCannotCarry(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(64<<10))
	s := startStack(t, ns)
	const sid = "au_drain_big"
	ctx := context.Background()
	// Four items of 16 KiB at most (as JSON), together 4 bytes short of
	// the max payload: the value fits, the reply ({"items":...}) does not.
	var items []agent.Message
	for i, size := range []int{16382, 16382, 16382, 16381} {
		m := userText(fmt.Sprintf("item-%d ", i))
		base, _ := json.Marshal(m)
		items = append(items, userText(fmt.Sprintf("item-%d %s", i, strings.Repeat("d", size-len(base)))))
	}
	data, _ := json.Marshal(items)
	if len(data) != 64<<10-4 {
		t.Fatalf("value of %d bytes", len(data))
	}
	kv, err := s.e.JetStream().KeyValue(ctx, subjects.InboxBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := sid + "." + orchestrator.InboxFollowup
	if _, err := kv.Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	// A JSON caller, as the nats CLI is (the engine's own msgpack reply
	// is smaller).
	subj, err := subjects.FunctionSubject("session::inbox_drain")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(orchestrator.InboxDrainRequest{SessionID: sid, Name: orchestrator.InboxFollowup})
	reply, err := s.e.Conn().Request(subj, req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if we := wire.Decode(reply); we == nil || we.Code != wire.CodeConflict {
		t.Fatalf("drain of %d bytes: %v (%d bytes), want conflict", len(data), we, len(reply.Data))
	}
	if e, err := kv.Get(ctx, key); err != nil || len(e.Value()) != len(data) {
		t.Fatalf("the refused drain changed the inbox: %v", err)
	}
}

// TestForeignInboxOfManySmallItems: an inbox value another client wrote
// with thousands of small items, within a quarter of the max payload as
// JSON, is taken in at most as many items at a check as an inbox holds
// (256). Each item costs the turn record more than its JSON twice (its
// message_complete event's envelope, the effect's id, its digest in
// taken): the one check that took all of them in made a record too large
// to store, the run failed with the items still queued, and so did every
// later run of the session.
func TestForeignInboxOfManySmallItems(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	const sid = "au_foreign_small"
	ctx := context.Background()
	var (
		items []agent.Message
		want  []string
	)
	for i := 0; ; i++ {
		m := agent.Message{Role: agent.RoleUser, Content: []agent.Content{agent.Text(fmt.Sprintf("s%04d", i))}}
		next := append(items, m)
		if data, _ := json.Marshal(next); len(data) > 200<<10 {
			break
		}
		items = next
		want = append(want, m.Content[0].Text)
	}
	if len(items) < 3000 {
		t.Fatalf("only %d items", len(items))
	}
	data, _ := json.Marshal(items)
	kv, err := s.e.JetStream().KeyValue(ctx, subjects.InboxBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, sid+"."+orchestrator.InboxSteering, data); err != nil {
		t.Fatal(err)
	}
	startRun(t, s.e, sid, "first")
	evs := events(t, s.e, sid, 60*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
		t.Fatalf("stop %q: %+v", last.StopReason, auditView(t, s.e, sid).Error)
	}
	if got, want := auditUserTexts(evs), append([]string{"first"}, want...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%d user messages, want %d in order", len(got), len(want))
	}
	if items := auditDrain(t, s.e, sid, orchestrator.InboxSteering); len(items) != 0 {
		t.Fatalf("steering inbox holds %d items", len(items))
	}
}
