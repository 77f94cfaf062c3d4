package turn

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

// fixtures build a record in each state, the same way every time.
var fixtures = map[string]func(t testing.TB) Record{
	"provisioning": func(t testing.TB) Record { return start(t, 0).rec },
	"assistant_streaming": func(t testing.TB) Record {
		return start(t, 0).applyAll(Provisioned{}).rec
	},
	"function_execute": func(t testing.TB) Record {
		return start(t, 0).applyAll(Provisioned{}, ModelDone{answer("", call("c1", "fs::read", nil), call("c2", "fs::read", nil))}).rec
	},
	"function_execute/started": func(t testing.TB) Record {
		return start(t, 0).applyAll(Provisioned{}, ModelDone{answer("", call("c1", "fs::read", nil), call("c2", "fs::read", nil))},
			CallsStarted{IDs: []string{"c1"}}).rec
	},
	"function_awaiting_approval": func(t testing.TB) Record {
		return start(t, 0).applyAll(Provisioned{}, ModelDone{answer("", call("c1", "fs::read", nil), call("c2", "fs::read", nil))},
			CallParked{ID: "c1", ArgsHash: "h1"}, CallDone{ID: "c2", Result: agent.TextResult("ok")}).rec
	},
	"steering_check": func(t testing.TB) Record {
		return start(t, 0).applyAll(Provisioned{}, ModelDone{answer("hi")}).rec
	},
	"stopped": func(t testing.TB) Record {
		return start(t, 0).applyAll(Provisioned{}, ModelDone{answer("hi")}, SteeringDrained{}).rec
	},
	"failed": func(t testing.TB) Record {
		return start(t, 0).applyAll(Provisioned{}, ModelFailed{Kind: agent.ErrorPermanent, Message: "bad"}).rec
	},
}

var inputs = map[string]Input{
	"Provisioned":       Provisioned{},
	"ProvisionFailed":   ProvisionFailed{Kind: agent.ErrorAuthExpired, Message: "no token"},
	"BudgetExceeded":    BudgetExceeded{Message: "ceiling reached"},
	"ModelDone":         ModelDone{answer("done")},
	"ModelFailed":       ModelFailed{Kind: agent.ErrorTransient, Message: "eof"},
	"CallsStarted":      CallsStarted{IDs: []string{"c1"}},
	"CallDone":          CallDone{ID: "c1", Result: agent.TextResult("ok")},
	"CallParked":        CallParked{ID: "c1", ArgsHash: "h"},
	"ApprovalAllow":     ApprovalResolved{ID: "c1", Decision: DecisionAllow},
	"ApprovalDeny":      ApprovalResolved{ID: "c1", Decision: DecisionDeny, Reason: "no"},
	"ApprovalAborted":   ApprovalResolved{ID: "c1", Decision: DecisionAborted},
	"SteeringDrained":   SteeringDrained{},
	"Steering":          SteeringDrained{Steering: []agent.Message{user("wait")}},
	"Abort":             Abort{Reason: "user"},
	"Fail":              Fail{Message: "the record would not fit"},
	"Recover":           Recover{},
	"RecoverIdempotent": Recover{Idempotent: func(string) bool { return true }},
}

// TestTransitions applies every input to a record in every state: an
// accepted input moves to the expected state and bumps the step by one; any
// other returns ErrUnexpectedInput and leaves the record as it was.
func TestTransitions(t *testing.T) {
	t.Parallel()
	const U = "" // unexpected input
	S := func(s agent.TurnState) string { return string(s) }
	table := map[string]map[string]string{
		"provisioning": {
			"Provisioned":     S(agent.StateAssistantStreaming),
			"ProvisionFailed": S(agent.StateFailed),
			"BudgetExceeded":  S(agent.StateStopped),
			"Abort":           S(agent.StateStopped),
			"Fail":            S(agent.StateFailed),
		},
		"assistant_streaming": {
			"BudgetExceeded": S(agent.StateStopped),
			"ModelDone":      S(agent.StateSteeringCheck),
			"ModelFailed":    S(agent.StateFailed),
			"Abort":          S(agent.StateStopped),
			"Fail":           S(agent.StateFailed),
		},
		"function_execute": {
			"CallsStarted": S(agent.StateFunctionExecute),
			"CallDone":     S(agent.StateFunctionExecute),
			"CallParked":   S(agent.StateFunctionExecute),
			"Abort":        S(agent.StateStopped),
			"Fail":         S(agent.StateFailed),
		},
		"function_execute/started": {
			"CallDone":          S(agent.StateFunctionExecute),
			"CallParked":        U, // already started
			"Recover":           S(agent.StateFunctionExecute),
			"RecoverIdempotent": S(agent.StateFunctionExecute),
			"Abort":             S(agent.StateStopped),
			"Fail":              S(agent.StateFailed),
		},
		"function_awaiting_approval": {
			"ApprovalAllow":   S(agent.StateFunctionExecute),
			"ApprovalDeny":    S(agent.StateSteeringCheck),
			"ApprovalAborted": S(agent.StateStopped),
			"Abort":           S(agent.StateStopped),
			"Fail":            S(agent.StateFailed),
		},
		"steering_check": {
			"SteeringDrained": S(agent.StateStopped),
			"Steering":        S(agent.StateAssistantStreaming),
			"Abort":           S(agent.StateStopped),
			"Fail":            S(agent.StateFailed),
		},
		"stopped": {},
		"failed":  {},
	}
	for state, want := range table {
		for name, in := range inputs {
			t.Run(state+"/"+name, func(t *testing.T) {
				t.Parallel()
				rec := fixtures[state](t)
				before := fixtures[state](t)
				got, effects, err := Apply(rec, in, 5000)
				wantState, ok := want[name]
				if !ok || wantState == U {
					if !errors.Is(err, ErrUnexpectedInput) {
						t.Fatalf("Apply = %v, want ErrUnexpectedInput", err)
					}
					if !reflect.DeepEqual(got, before) || !reflect.DeepEqual(rec, before) || effects != nil {
						t.Fatal("a refused input changed the record or produced effects")
					}
					return
				}
				if err != nil {
					t.Fatalf("Apply = %v, want state %s", err, wantState)
				}
				if string(got.State) != wantState {
					t.Fatalf("state = %s, want %s", got.State, wantState)
				}
				if got.Step != rec.Step+1 || got.UpdatedAtMs != 5000 {
					t.Fatalf("step %d → %d, updated_at %d", rec.Step, got.Step, got.UpdatedAtMs)
				}
				if !reflect.DeepEqual(rec, before) {
					t.Fatal("Apply modified the record it was given")
				}
				if err := got.Validate(); err != nil {
					t.Fatalf("result record invalid: %v", err)
				}
				if !reflect.DeepEqual(got.Outbox, effects) {
					t.Fatal("outbox is not the effects")
				}
				if got.State.Terminal() {
					if n := len(effects); n < 2 || effects[n-1].Kind != EffectFinish || effects[n-2].Event.Type != agent.EventAgentEnd {
						t.Fatalf("terminal effects do not end with agent_end, finish: %v", eventTypes(effects))
					}
				}
			})
		}
	}
}

func TestNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state string
		want  ActionKind
		calls []string
	}{
		{"provisioning", ActionProvision, nil},
		{"assistant_streaming", ActionStreamModel, nil},
		{"function_execute", ActionExecuteCalls, []string{"c1", "c2"}},
		{"function_execute/started", ActionExecuteCalls, []string{"c2"}},
		{"function_awaiting_approval", ActionPark, nil},
		{"steering_check", ActionCheckSteering, nil},
		{"stopped", ActionNone, nil},
		{"failed", ActionNone, nil},
	}
	for _, tt := range tests {
		t.Run(tt.state, func(t *testing.T) {
			t.Parallel()
			rec := fixtures[tt.state](t)
			act := Next(rec)
			var ids []string
			for _, c := range act.Calls {
				ids = append(ids, c.ID)
			}
			if act.Kind != tt.want || !slices.Equal(ids, tt.calls) {
				t.Fatalf("Next = %s %v, want %s %v", act.Kind, ids, tt.want, tt.calls)
			}
			rec.Outbox = []Effect{{Kind: EffectEmit}}
			if act := Next(rec); act.Kind != ActionDeliver {
				t.Fatalf("Next with an outbox = %s, want deliver", act.Kind)
			}
		})
	}
	m := start(t, 0).applyAll(Provisioned{}, ModelDone{answer("", call("c1", "f", nil), call("c2", "f", nil), call("c3", "f", nil))},
		CallParked{ID: "c1"}, CallsStarted{IDs: []string{"c2"}})
	if act := Next(m.rec); act.Kind != ActionExecuteCalls || len(act.Calls) != 1 || act.Calls[0].ID != "c3" {
		t.Fatalf("Next = %+v, want execute c3", act)
	}
	m.apply(CallsStarted{IDs: []string{"c3"}})
	if act := Next(m.rec); act.Kind != ActionWait {
		t.Fatalf("Next = %+v, want wait", act)
	}
	m.apply(ApprovalResolved{ID: "c1", Decision: DecisionAllow})
	if act := Next(m.rec); act.Kind != ActionExecuteCalls || len(act.Calls) != 1 || !act.Calls[0].Approved {
		t.Fatalf("Next = %+v, want execute approved c1", act)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	rec, effects, err := New(runStart(3), testRun, 42)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != agent.StateProvisioning || rec.Step != 1 || rec.MaxTurns != 3 || rec.StartedAtMs != 42 ||
		len(rec.Input) != 1 || rec.Request.Messages != nil || rec.Request.Model != "echo-1" {
		t.Fatalf("New = %+v", rec)
	}
	if len(effects) != 1 || effects[0].ID != "r1:1:0" || effects[0].Event.Type != agent.EventTurnStateChanged ||
		!reflect.DeepEqual(rec.Outbox, effects) {
		t.Fatalf("effects = %+v", effects)
	}
	bad := runStart(0)
	bad.Messages = nil
	if _, _, err := New(bad, testRun, 0); !errors.Is(err, agent.ErrInvalidRunStart) {
		t.Fatalf("New(no messages) = %v", err)
	}
	if _, _, err := New(runStart(0), "r.1", 0); !errors.Is(err, agent.ErrInvalidID) {
		t.Fatalf("New(bad run id) = %v", err)
	}
}

// TestRefused covers inputs refused for their content rather than their
// state: stale and duplicate call ids, malformed inputs.
func TestRefused(t *testing.T) {
	t.Parallel()
	batch := func(t testing.TB) *machine {
		return start(t, 0).applyAll(Provisioned{}, ModelDone{answer("", call("c1", "f::a", nil), call("c2", "f::b", nil))})
	}
	tests := []struct {
		name  string
		setup func(t testing.TB) *machine
		in    Input
		want  error
	}{
		{"nil input", batch, nil, ErrInvalidInput},
		{"CallDone unknown id", batch, CallDone{ID: "zz"}, ErrUnexpectedInput},
		{"CallDone empty id", batch, CallDone{}, ErrInvalidInput},
		{"CallDone twice", func(t testing.TB) *machine {
			return batch(t).applyAll(CallsStarted{IDs: []string{"c1"}}, CallDone{ID: "c1"})
		}, CallDone{ID: "c1"}, ErrUnexpectedInput},
		{"CallDone for a parked call", func(t testing.TB) *machine {
			return batch(t).applyAll(CallParked{ID: "c1"})
		}, CallDone{ID: "c1"}, ErrUnexpectedInput},
		{"CallsStarted empty", batch, CallsStarted{}, ErrInvalidInput},
		{"CallsStarted duplicate ids", batch, CallsStarted{IDs: []string{"c1", "c1"}}, ErrInvalidInput},
		{"CallsStarted twice", func(t testing.TB) *machine {
			return batch(t).applyAll(CallsStarted{IDs: []string{"c1"}})
		}, CallsStarted{IDs: []string{"c2", "c1"}}, ErrUnexpectedInput},
		{"CallsStarted unknown", batch, CallsStarted{IDs: []string{"c1", "c9"}}, ErrUnexpectedInput},
		{"CallsStarted parked", func(t testing.TB) *machine {
			return batch(t).applyAll(CallParked{ID: "c1"})
		}, CallsStarted{IDs: []string{"c1"}}, ErrUnexpectedInput},
		{"CallParked twice", func(t testing.TB) *machine {
			return batch(t).applyAll(CallParked{ID: "c1"})
		}, CallParked{ID: "c1"}, ErrUnexpectedInput},
		{"CallParked after approval", func(t testing.TB) *machine {
			return batch(t).applyAll(CallParked{ID: "c1"}, ApprovalResolved{ID: "c1", Decision: DecisionAllow})
		}, CallParked{ID: "c1"}, ErrUnexpectedInput},
		{"CallParked done", func(t testing.TB) *machine {
			return batch(t).applyAll(CallDone{ID: "c1"})
		}, CallParked{ID: "c1"}, ErrUnexpectedInput},
		{"approval for a call not parked", batch, ApprovalResolved{ID: "c1", Decision: DecisionAllow}, ErrUnexpectedInput},
		{"approval twice", func(t testing.TB) *machine {
			return batch(t).applyAll(CallParked{ID: "c1"}, ApprovalResolved{ID: "c1", Decision: DecisionDeny})
		}, ApprovalResolved{ID: "c1", Decision: DecisionAllow}, ErrUnexpectedInput},
		{"unknown decision", func(t testing.TB) *machine {
			return batch(t).applyAll(CallParked{ID: "c1"})
		}, ApprovalResolved{ID: "c1", Decision: "maybe"}, ErrInvalidInput},
		{"Recover with nothing in flight", batch, Recover{}, ErrUnexpectedInput},
		{"unknown error kind", func(t testing.TB) *machine { return start(t, 0).applyAll(Provisioned{}) },
			ModelFailed{Kind: "cosmic_rays"}, ErrInvalidInput},
		{"steering not from a user", func(t testing.TB) *machine {
			return start(t, 0).applyAll(Provisioned{}, ModelDone{answer("x")})
		}, SteeringDrained{Steering: []agent.Message{answer("y")}}, ErrInvalidInput},
		{"invalid follow-up", func(t testing.TB) *machine {
			return start(t, 0).applyAll(Provisioned{}, ModelDone{answer("x")})
		}, SteeringDrained{Followups: []agent.Message{{Role: agent.RoleUser}}}, ErrInvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := tt.setup(t).rec
			before := tt.setup(t).rec
			got, effects, err := Apply(rec, tt.in, 9999)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Apply = %v, want %v", err, tt.want)
			}
			if !reflect.DeepEqual(got, before) || !reflect.DeepEqual(rec, before) || effects != nil {
				t.Fatal("a refused input changed the record or produced effects")
			}
		})
	}
}

func TestInvalidRecord(t *testing.T) {
	t.Parallel()
	ok := fixtures["function_awaiting_approval"](t)
	tests := []struct {
		name   string
		mutate func(r *Record)
	}{
		{"bad session", func(r *Record) { r.SessionID = "" }},
		{"bad run", func(r *Record) { r.RunID = "a b" }},
		{"unknown state", func(r *Record) { r.State = "dreaming" }},
		{"negative turns", func(r *Record) { r.TurnCount = -1 }},
		{"batch state without work", func(r *Record) { r.Work = nil }},
		{"duplicate call", func(r *Record) { r.Work.Prepared = append(r.Work.Prepared, r.Work.Prepared[0]) }},
		{"effect of unknown call", func(r *Record) { r.Work.Effects["zz"] = CallEffect{Status: StatusStarted} }},
		{"done without result", func(r *Record) { r.Work.Effects["c2"] = CallEffect{Status: StatusDone} }},
		{"unknown status", func(r *Record) { r.Work.Effects["c2"] = CallEffect{Status: "lost"} }},
		{"parked unknown call", func(r *Record) { r.AwaitingApproval[0].FunctionCallID = "zz" }},
		{"parked and started", func(r *Record) { r.Work.Effects["c1"] = CallEffect{Status: StatusStarted} }},
		{"awaiting with nothing parked", func(r *Record) {
			r.AwaitingApproval = nil
			r.Work.Effects["c1"] = CallEffect{Status: StatusStarted}
		}},
		{"execute with only parked calls", func(r *Record) { r.State = agent.StateFunctionExecute }},
		{"parked outside a batch state", func(r *Record) { r.State = agent.StateSteeringCheck }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := ok.clone()
			tt.mutate(&rec)
			if _, _, err := Apply(rec, Abort{}, 1); !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("Apply = %v, want ErrInvalidRecord", err)
			}
			_ = Next(rec) // must not panic
		})
	}
}

// TestResultOrder finishes three calls in reverse order: results, the
// transcript and turn_end keep the model's order.
func TestResultOrder(t *testing.T) {
	t.Parallel()
	m := start(t, 0).applyAll(Provisioned{},
		ModelDone{answer("", call("a", "f", nil), call("b", "f", nil), call("c", "f", nil))},
		CallsStarted{IDs: []string{"c", "b", "a"}},
		CallDone{ID: "c", Result: agent.TextResult("C")},
		CallDone{ID: "b", Result: agent.TextResult("B")})
	effects := m.apply(CallDone{ID: "a", Result: agent.TextResult("A")})
	var ids []string
	for _, r := range m.rec.FunctionResults {
		ids = append(ids, r.FunctionCallID+"="+r.Content[0].Text)
	}
	if want := []string{"a=A", "b=B", "c=C"}; !slices.Equal(ids, want) {
		t.Fatalf("results = %v, want %v", ids, want)
	}
	var hist []string
	for _, e := range effects {
		if e.Kind == EffectAppendHistory {
			for _, msg := range e.Messages {
				hist = append(hist, msg.FunctionCallID)
			}
		}
	}
	if !slices.Equal(hist, []string{"a", "b", "c"}) {
		t.Fatalf("history = %v", hist)
	}
}

// TestBatchEndDropsEffectRecords: once a batch's results are in
// FunctionResults, the effect records that held each result once more
// are gone, so a record with a large result holds it once fewer; a
// terminating result still ends the run, and an ordinary one still
// continues to the model.
func TestBatchEndDropsEffectRecords(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 50_000)
	for _, c := range []struct {
		name      string
		result    agent.FunctionResult
		wantState agent.TurnState
	}{
		{"continue", agent.TextResult(big), agent.StateSteeringCheck},
		{"terminate", agent.FunctionResult{Content: []agent.Content{agent.Text(big)}, Terminate: true}, agent.StateStopped},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := start(t, 0).applyAll(Provisioned{},
				ModelDone{answer("", call("a", "f", nil))},
				CallsStarted{IDs: []string{"a"}})
			rec, _, err := Apply(m.rec, CallDone{ID: "a", Result: c.result}, m.now+10)
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != c.wantState || rec.Work != nil || len(rec.FunctionResults) != 1 {
				t.Fatalf("after the batch: state %s, work %v, %d results", rec.State, rec.Work, len(rec.FunctionResults))
			}
			if n := strings.Count(mustJSON(t, rec), big); n > 4 {
				t.Fatalf("the record holds the result %d times", n)
			}
			if c.wantState == agent.StateSteeringCheck {
				m.rec = Delivered(rec)
				m.apply(SteeringDrained{})
				if m.rec.State != agent.StateAssistantStreaming {
					t.Fatalf("after the steering check: %s; want the next model call", m.rec.State)
				}
			}
		})
	}
}

func TestDurations(t *testing.T) {
	t.Parallel()
	m := start(t, 0).applyAll(Provisioned{}, ModelDone{answer("", call("a", "f", nil), call("b", "f", nil))},
		CallsStarted{IDs: []string{"a"}}, CallDone{ID: "b", Result: agent.ErrorResult("denied", nil)})
	effects := m.apply(CallDone{ID: "a", Result: agent.TextResult("ok")})
	end := events(effects)[0]
	if end.Type != agent.EventFunctionExecutionEnd || end.DurationMs != 20 {
		t.Fatalf("end = %+v, want duration 20", end)
	}
}

func TestInvalidModelMessage(t *testing.T) {
	t.Parallel()
	tests := map[string]agent.Message{
		"user role":       user("hi"),
		"duplicate calls": answer("", call("c1", "f", nil), call("c1", "f", nil)),
		"bad call id":     answer("", call("c.1", "f", nil)),
	}
	for name, msg := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := start(t, 0).applyAll(Provisioned{})
			effects := m.apply(ModelDone{Message: msg})
			if m.rec.State != agent.StateFailed || m.rec.Error == nil || m.rec.Error.Kind != agent.ErrorPermanent {
				t.Fatalf("record = %+v, want failed permanent", m.rec)
			}
			want := []agent.EventType{agent.EventMessageComplete, agent.EventTurnStateChanged, agent.EventAgentEnd}
			if got := eventTypes(effects); !slices.Equal(got, want) {
				t.Fatalf("events = %v, want %v", got, want)
			}
		})
	}
}

func TestInvalidResultReplaced(t *testing.T) {
	t.Parallel()
	m := start(t, 0).applyAll(Provisioned{}, ModelDone{answer("", call("c1", "f", nil))})
	m.apply(CallDone{ID: "c1", Result: agent.FunctionResult{Content: []agent.Content{call("x", "y", nil)}}})
	r := m.rec.FunctionResults[0]
	if !r.IsError || len(r.Content) != 1 || r.Content[0].Type != agent.ContentText {
		t.Fatalf("result = %+v, want an error text", r)
	}
}

func TestHeldFollowupsRequeued(t *testing.T) {
	t.Parallel()
	m := start(t, 2).applyAll(Provisioned{}, ModelDone{answer("hi")})
	m.apply(SteeringDrained{Steering: []agent.Message{user("steer")}, Followups: []agent.Message{user("later")}})
	if len(m.rec.Followups) != 1 || m.rec.TurnCount != 2 {
		t.Fatalf("record = %+v", m.rec)
	}
	effects := m.apply(ModelDone{answer("ok")}) // max_turns reached: stop without a steering check
	fin := effects[len(effects)-1]
	if m.rec.StopReason != agent.StopEnd || fin.Kind != EffectFinish || len(fin.Finish.Requeue) != 1 ||
		fin.Finish.Requeue[0].Content[0].Text != "later" || m.rec.Followups != nil {
		t.Fatalf("finish = %+v, record followups %v", fin.Finish, m.rec.Followups)
	}
}

func TestOutboxAccumulates(t *testing.T) {
	t.Parallel()
	m := start(t, 0).applyAll(Provisioned{}, ModelDone{answer("", call("a", "f", nil), call("b", "f", nil))},
		CallsStarted{IDs: []string{"a", "b"}})
	rec, e1, err := Apply(m.rec, CallDone{ID: "a"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	rec, e2, err := Apply(rec, CallDone{ID: "b"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rec.Outbox, append(slices.Clone(e1), e2...)) {
		t.Fatal("outbox is not the effects of both inputs")
	}
	seen := map[string]bool{}
	for _, e := range rec.Outbox {
		if seen[e.ID] {
			t.Fatalf("effect id %s twice", e.ID)
		}
		seen[e.ID] = true
	}
	if Next(rec).Kind != ActionDeliver || Next(Delivered(rec)).Kind != ActionCheckSteering {
		t.Fatal("Next does not ask for delivery first")
	}
}

func TestInFlight(t *testing.T) {
	t.Parallel()
	m := start(t, 0).applyAll(Provisioned{}, ModelDone{answer("", call("a", "f", nil), call("b", "f", nil), call("c", "f", nil))},
		CallsStarted{IDs: []string{"c", "a"}})
	if got := InFlight(m.rec); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("InFlight = %v", got)
	}
	m.apply(Abort{})
	if got := InFlight(m.rec); got != nil {
		t.Fatalf("InFlight after abort = %v", got)
	}
}

func TestView(t *testing.T) {
	t.Parallel()
	rec := fixtures["function_awaiting_approval"](t)
	v := View(rec)
	if v.State != agent.StateFunctionAwaitingApproval || v.Step != rec.Step || v.TurnCount != 1 ||
		len(v.AwaitingApproval) != 1 || v.AwaitingApproval[0].ArgsHash != "h1" || v.SessionID != testSession || v.RunID != testRun {
		t.Fatalf("View = %+v", v)
	}
	v.AwaitingApproval[0].ArgsHash = "changed"
	if rec.AwaitingApproval[0].ArgsHash != "h1" {
		t.Fatal("View shares the approval list with the record")
	}
}

func TestInputName(t *testing.T) {
	t.Parallel()
	if InputName(nil) != "" || InputName(CallDone{}) != "CallDone" || InputName(Recover{}) != "Recover" {
		t.Fatal("InputName")
	}
}

func TestRetired(t *testing.T) {
	t.Parallel()
	ended := start(t, 0).applyAll(Provisioned{}, ModelDone{answer("", call("a", "f", map[string]any{"p": "/tmp"}))},
		CallsStarted{IDs: []string{"a"}}, Abort{Reason: "user"}).rec
	pending := ended
	pending.Outbox = []Effect{{Kind: EffectEmit, ID: "x"}}
	running := start(t, 0).applyAll(Provisioned{}).rec
	tests := []struct {
		name    string
		rec     Record
		retired bool
	}{
		{"terminal, delivered", ended, true},
		{"terminal, outbox not delivered", pending, false},
		{"running", running, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Retired(tt.rec)
			if !tt.retired {
				if mustJSON(t, got) != mustJSON(t, tt.rec) {
					t.Fatalf("Retired changed a record it must keep:\n%s\n%s", mustJSON(t, got), mustJSON(t, tt.rec))
				}
				return
			}
			if got.LastAssistant != nil || got.Work != nil || got.FunctionResults != nil || got.Input != nil {
				t.Fatalf("Retired kept the run's messages and calls: %s", mustJSON(t, got))
			}
			if got.SessionID != tt.rec.SessionID || got.RunID != tt.rec.RunID || got.State != tt.rec.State ||
				got.Step != tt.rec.Step || got.StopReason != tt.rec.StopReason || got.Usage != tt.rec.Usage {
				t.Fatalf("Retired lost what identifies the run: %s", mustJSON(t, got))
			}
			if Next(got).Kind != ActionNone {
				t.Fatalf("Next(retired) = %s", Next(got).Kind)
			}
			if _, _, err := Apply(got, Provisioned{}, t0+1000); !errors.Is(err, ErrUnexpectedInput) {
				t.Fatalf("Apply on a retired record: %v", err)
			}
		})
	}
}

// Fail ends a run from any state with a record that keeps only what a
// finished run needs: it is what the grain writes when a checkpoint's
// record would not fit the store.
func TestFail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state            string
		cancel, withdraw []string
		ends             int // calls not done, each ended with an error result
		leanEnds         int // of them, calls announced (their start went out)
	}{
		{state: "provisioning"},
		{state: "assistant_streaming"},
		{state: "function_execute", ends: 2},
		{state: "function_execute/started", cancel: []string{"c1"}, ends: 2, leanEnds: 1},
		{state: "function_awaiting_approval", withdraw: []string{"c1"}, ends: 1, leanEnds: 1},
		{state: "steering_check"},
	}
	for _, tt := range tests {
		for _, lean := range []bool{false, true} {
			ends := tt.ends
			if lean {
				ends = tt.leanEnds // the record names the calls; the ends are built at delivery
			}
			t.Run(fmt.Sprintf("%s/lean=%v", tt.state, lean), func(t *testing.T) {
				t.Parallel()
				failOne(t, tt.state, lean, ends, tt.cancel, tt.withdraw)
			})
		}
	}
}

// failOne applies Fail (lean or not) to the fixture of state and checks
// the failed record and its effects: ends function_execution_end events,
// the calls to cancel and to withdraw.
func failOne(t *testing.T, state string, lean bool, ends int, cancel, withdraw []string) {
	t.Helper()
	rec := fixtures[state](t)
	rec.Outbox = []Effect{{Kind: EffectEmit, ID: "undelivered", Event: &agent.Event{Type: agent.EventMessageUpdate}}}
	got, effects, err := Apply(rec, Fail{Message: "too large", Lean: lean}, 7000)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != agent.StateFailed || got.StopReason != agent.StopError || got.Error == nil ||
		got.Error.Kind != agent.ErrorPermanent || got.Error.Message != "too large" {
		t.Fatalf("record %s", mustJSON(t, got))
	}
	if got.LastAssistant != nil || got.Work != nil || got.FunctionResults != nil || got.Input != nil || got.AwaitingApproval != nil {
		t.Fatalf("the failed record kept the run's messages or calls: %s", mustJSON(t, got))
	}
	if !reflect.DeepEqual(got.Outbox, effects) {
		t.Fatalf("the undelivered outbox was kept: %v", eventTypes(got.Outbox))
	}
	types := eventTypes(effects)
	if len(types) < 3 || !slices.Equal(types[len(types)-3:], []agent.EventType{agent.EventMessageComplete, agent.EventTurnStateChanged, agent.EventAgentEnd}) ||
		count(types, agent.EventFunctionExecutionEnd) != ends {
		t.Fatalf("effects %v", types)
	}
	if lean {
		for _, e := range effects {
			if e.Kind == EffectEmit && e.Event.Type == agent.EventFunctionExecutionEnd {
				t.Fatalf("a lean failure stores an end event: %v", types)
			}
		}
	}
	mc := effects[len(effects)-4].Event.Message
	if mc.StopReason != agent.StopError || mc.ErrorMessage != "too large" {
		t.Fatalf("message_complete %+v", mc)
	}
	f := effects[len(effects)-1].Finish
	if f == nil || f.StopReason != agent.StopError || !slices.Equal(f.Cancel, cancel) || !slices.Equal(f.Withdraw, withdraw) {
		t.Fatalf("finish %+v", f)
	}
}

func count[T comparable](s []T, v T) (n int) {
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
