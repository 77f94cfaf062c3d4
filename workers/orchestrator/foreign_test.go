package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers/orchestrator"
)

// An inbox value another client wrote (`nats kv put iii-inbox
// <sid>.steering …`) that is not a JSON array of user messages does not
// wedge the session: its runs end, what is valid in it is steered in, and
// push and drain work and replace it. Before, the steering check failed
// on it at every redelivery and the run never ended.
func TestForeignInboxValues(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	kv, err := s.e.JetStream().KeyValue(ctx, subjects.InboxBucket)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name, value string
		steered     bool // the valid item reached the model
	}{
		{name: "not JSON", value: "garbage"},
		{name: "not an array", value: `{"role":"user"}`},
		{name: "not user messages", value: `[{"role":"assistant","content":[]},{"role":"user"}]`},
		{name: "one valid item among others", value: `[{"role":"bogus"},{"role":"user","content":[{"type":"text","text":"steer here"}],"timestamp":1}]`, steered: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sid := "foreign-" + string(rune('a'+i))
			if _, err := kv.Put(ctx, sid+"."+orchestrator.InboxSteering, []byte(c.value)); err != nil {
				t.Fatal(err)
			}
			var res orchestrator.RunStartResult
			if err := s.e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: "echo",
				Messages: []agent.Message{userText("hello")}}, &res); err != nil || !res.Started {
				t.Fatalf("run::start = %+v, %v", res, err)
			}
			evs := events(t, s.e, sid, 20*time.Second)
			if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
				t.Fatalf("agent_end %q: %v", last.StopReason, types(evs))
			}
			steered := false
			for _, ev := range evs {
				if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Role == agent.RoleAssistant {
					for _, b := range ev.Message.Content {
						steered = steered || strings.Contains(b.Text, "steer here")
					}
				}
			}
			if steered != c.steered {
				t.Fatalf("steered %v, want %v: %v", steered, c.steered, types(evs))
			}
			var pushed orchestrator.InboxPushResult
			if err := s.e.Trigger(ctx, "session::inbox_push", orchestrator.InboxPushRequest{SessionID: sid, Name: orchestrator.InboxSteering, Item: userText("later")}, &pushed); err != nil || pushed.Queued != 1 {
				t.Fatalf("push = %+v, %v", pushed, err)
			}
			var drained orchestrator.InboxDrainResult
			if err := s.e.Trigger(ctx, "session::inbox_drain", orchestrator.InboxDrainRequest{SessionID: sid, Name: orchestrator.InboxSteering}, &drained); err != nil || len(drained.Items) != 1 {
				t.Fatalf("drain = %+v, %v", drained, err)
			}
			if _, err := kv.Get(ctx, sid+"."+orchestrator.InboxSteering); err != jetstream.ErrKeyNotFound {
				t.Fatalf("the drained inbox is still there: %v", err)
			}
		})
	}
}

// A turn record that does not decode (another client wrote it) is an
// internal error that says how to reset it, not a retryable unavailable
// one: run::start, turn::get_state and run::abort refuse, nothing is
// overwritten, and once the key is deleted the session runs again. So on
// a clustered node too, where run::abort's error comes back from the
// grain over the cluster's remote.
func TestForeignTurnRecord(t *testing.T) {
	t.Parallel()
	for _, clustered := range []bool{false, true} {
		t.Run(fmt.Sprintf("clustered=%v", clustered), func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t)
			var s *stack
			if clustered {
				s = startClusteredStack(t, ns, "foreign")
			} else {
				s = startStack(t, ns)
			}
			foreignTurnRecord(t, s)
		})
	}
}

func foreignTurnRecord(t *testing.T, s *stack) {
	ctx := context.Background()
	kv, err := s.e.JetStream().KeyValue(ctx, subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "foreign-rec", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	start := agent.RunStart{SessionID: "foreign-rec", Provider: "scripted", Model: "echo", Messages: []agent.Message{userText("hello")}}
	for _, c := range []struct {
		id  string
		req any
	}{
		{"run::start", start},
		{"turn::get_state", orchestrator.SessionRequest{SessionID: "foreign-rec"}},
		{"run::abort", orchestrator.SessionRequest{SessionID: "foreign-rec"}},
	} {
		err := s.e.Trigger(ctx, c.id, c.req, nil)
		if !errors.Is(err, wire.ErrInternal) || !strings.Contains(err.Error(), "nats kv del iii-turn-state foreign-rec") {
			t.Errorf("%s: %v", c.id, err)
		}
	}
	if ent, err := kv.Get(ctx, "foreign-rec"); err != nil || string(ent.Value()) != "garbage" {
		t.Fatalf("the record was touched: %v", err)
	}
	if err := kv.Delete(ctx, "foreign-rec"); err != nil {
		t.Fatal(err)
	}
	var res orchestrator.RunStartResult
	if err := s.e.Trigger(ctx, "run::start", start, &res); err != nil || !res.Started {
		t.Fatalf("run::start after the reset = %+v, %v", res, err)
	}
	if evs := events(t, s.e, "foreign-rec", 20*time.Second); evs[len(evs)-1].StopReason != agent.StopEnd {
		t.Fatalf("events %v", types(evs))
	}
}

// A session meta that does not decode (another client wrote it) fails the
// session's runs, saying how to repair it, instead of leaving them waiting
// for a transcript that cannot be read; deleting the meta rebuilds it from
// the session's newest entry and the transcript is whole again.
func TestForeignSessionMeta(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	start := func(text string) { startEcho(t, s.e, "foreign-meta", "echo", text) }
	start("first")
	events(t, s.e, "foreign-meta", 20*time.Second)
	kv, err := s.e.JetStream().KeyValue(ctx, subjects.SessionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "foreign-meta", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	start("second")
	evs := eventsUntil(t, s.e, "foreign-meta", 2, 20*time.Second)
	failed := failure(evs)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopError || failed == nil ||
		!strings.Contains(failed.ErrorMessage, "nats kv del iii-sessions foreign-meta") {
		t.Fatalf("the run on a corrupt meta: %+v: %v", failed, types(evs))
	}
	if err := kv.Delete(ctx, "foreign-meta"); err != nil {
		t.Fatal(err)
	}
	start("third")
	if evs := eventsUntil(t, s.e, "foreign-meta", 3, 20*time.Second); evs[len(evs)-1].StopReason != agent.StopEnd {
		t.Fatalf("the run after the repair: %v", types(evs))
	}
	var msgs struct {
		Messages []any `json:"messages"`
	}
	if err := s.e.Trigger(ctx, "session::messages", map[string]string{"session_id": "foreign-meta"}, &msgs); err != nil || len(msgs.Messages) != 4 {
		t.Fatalf("transcript after the repair: %d messages, %v", len(msgs.Messages), err)
	}
}

// A message another client published on a session's entry subject is
// passed over by the session tree: the session's next run goes on from
// its transcript as if the message were not there.
func TestForeignSessionEntry(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	start := func(text string) { startEcho(t, s.e, "foreign-entry", "echo", text) }
	start("first")
	events(t, s.e, "foreign-entry", 20*time.Second)
	if _, err := s.e.JetStream().Publish(ctx, subjects.SessionEntrySubjectPrefix+"foreign-entry", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	start("second")
	evs := eventsUntil(t, s.e, "foreign-entry", 2, 20*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd || failure(evs) != nil {
		t.Fatalf("the run after a foreign message: %v", types(evs))
	}
	var msgs struct {
		Messages []struct {
			Message agent.Message `json:"message"`
		} `json:"messages"`
	}
	if err := s.e.Trigger(ctx, "session::messages", map[string]string{"session_id": "foreign-entry"}, &msgs); err != nil || len(msgs.Messages) != 4 {
		t.Fatalf("transcript: %d messages, %v; want 4", len(msgs.Messages), err)
	}
	if got := msgs.Messages[2].Message.Content[0].Text; got != "second" {
		t.Fatalf("third message %q; want the second run's", got)
	}
}

// startEcho starts a run of the scripted model on sid with one user
// message.
func startEcho(t *testing.T, e *engine.Engine, sid, model, text string) {
	t.Helper()
	var res orchestrator.RunStartResult
	if err := e.Trigger(context.Background(), "run::start", agent.RunStart{SessionID: sid, Provider: "scripted", Model: model,
		Messages: []agent.Message{userText(text)}}, &res); err != nil || !res.Started {
		t.Fatalf("run::start = %+v, %v", res, err)
	}
}

// failure is the assistant message a failed run completed with (nil when
// there is none).
func failure(evs []agent.Event) *agent.Message {
	var failed *agent.Message
	for _, ev := range evs {
		if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.StopReason == agent.StopError {
			failed = ev.Message
		}
	}
	return failed
}

// A turn record another client put that decodes but is no session's
// (`nats kv put iii-turn-state x '{}'`) does not stop an orchestrator
// from starting: its start-up sweep passes it over (before, waking it
// failed on its session id and the start failed), runs go on, and the
// value is left as it was.
func TestForeignTurnRecordSweep(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	js, err := jetstream.New(enginetest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	rows := []struct{ name, key, value string }{
		{"no session id", "sweep-a", `{}`},
		{"not a session id", "sweep-b", `{"session_id":"a b","run_id":"r","state":"assistant_streaming"}`},
		{"another session's", "sweep-c", `{"session_id":"sweep-other","run_id":"r","state":"assistant_streaming"}`},
		{"a parked call no key can name", "sweep-d", `{"session_id":"sweep-d","run_id":"r","state":"function_awaiting_approval","awaiting_approval":[{"function_call_id":"a/b"}]}`},
	}
	for _, r := range rows {
		if _, err := kv.Put(ctx, r.key, []byte(r.value)); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
	}
	o := orchestrator.New()
	if err := o.Start(ctx, enginetest.NewEngine(t, ns)); err != nil {
		t.Fatalf("start with foreign turn records: %v", err)
	}
	t.Cleanup(func() { _ = o.Close(context.Background()) })
	startEcho(t, s.e, "sweep-ok", "echo", "hello")
	if evs := events(t, s.e, "sweep-ok", 20*time.Second); evs[len(evs)-1].StopReason != agent.StopEnd {
		t.Fatalf("a run next to foreign records: %v", types(evs))
	}
	for _, r := range rows {
		if ent, err := kv.Get(ctx, r.key); err != nil || string(ent.Value()) != r.value {
			t.Errorf("%s: the value was touched: %v", r.name, err)
		}
	}
}

// A decision for a session whose turn record is another client's (no
// session's, or one that does not decode) is not asked about again every
// second forever: the approvals watcher logs it and moves on.
func TestApprovalForForeignTurnRecord(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := s.e.JetStream()
	turns, err := js.KeyValue(ctx, subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	approvals, err := js.KeyValue(ctx, subjects.ApprovalsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ sid, record string }{
		{"appr-x", `{"session_id":"a b","run_id":"r1","state":"function_awaiting_approval","awaiting_approval":[{"function_call_id":"c1","args_hash":"h"}]}`},
		{"appr-y", `garbage`},
	} {
		if _, err := turns.Put(ctx, r.sid, []byte(r.record)); err != nil {
			t.Fatal(err)
		}
		key, err := subjects.ApprovalKey(r.sid, "c1")
		if err != nil {
			t.Fatal(err)
		}
		ar, _ := json.Marshal(agent.ApprovalRecord{SessionID: r.sid, RunID: "r1", FunctionCallID: "c1", ArgsHash: "h",
			Status: agent.ApprovalDecided, Decision: "approve", DecidedAt: 1})
		if _, err := approvals.Put(ctx, key, ar); err != nil {
			t.Fatal(err)
		}
	}
	approvalsSettle(t, js)
}

// approvalsSettle fails t unless the approvals watcher takes every
// change of the bucket and is not asked about any again.
func approvalsSettle(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, subjects.ApprovalsKVStream)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := stream.Consumer(ctx, subjects.ApprovalsConsumer)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("pending %d, ack pending %d", info.NumPending, info.NumAckPending)
		}
		return nil
	})
	time.Sleep(2500 * time.Millisecond) // a nak'd decision comes back every second
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Fatalf("the decisions are asked about again: ack pending %d, redelivered %d", info.NumAckPending, info.NumRedelivered)
	}
}

// An approvals value another client wrote whose session's turn record
// cannot be read, because it does not decode or because the key names a
// session of a region with no stores here (`nats kv put iii-approvals
// fw.a.b garbage`), is logged and left: the watcher does not ask about it
// again every second forever. Before, the repair of a value that does
// not decode, and a decision for such a session, failed on the turn
// record at every redelivery.
func TestForeignApprovalValues(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	s := startStack(t, ns)
	ctx := context.Background()
	js := s.e.JetStream()
	turns, err := js.KeyValue(ctx, subjects.TurnStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	approvals, err := js.KeyValue(ctx, subjects.ApprovalsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := turns.Put(ctx, "apv-x", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	decided, _ := json.Marshal(agent.ApprovalRecord{SessionID: "apv.y", RunID: "r1", FunctionCallID: "c1", ArgsHash: "h",
		Status: agent.ApprovalDecided, Decision: "approve", DecidedAt: 1})
	for _, r := range []struct{ name, key, value string }{
		{"no record, corrupt turn record", "apv-x.c1", "garbage"},
		{"no record, a session of no region here", "apv.y.c1", "garbage"},
		{"a decision, a session of no region here", "apv.y.c2", string(decided)},
	} {
		if _, err := approvals.Put(ctx, r.key, []byte(r.value)); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
	}
	approvalsSettle(t, js)
	for _, key := range []string{"apv-x.c1", "apv.y.c1"} {
		if ent, err := approvals.Get(ctx, key); err != nil || string(ent.Value()) != "garbage" {
			t.Errorf("%s: the value was touched: %v", key, err)
		}
	}
}
