package turn

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

// bytesource hands out fuzz bytes as small choices; zeros once exhausted.
type bytesource struct {
	data []byte
	pos  int
}

func (b *bytesource) more() bool { return b.pos < len(b.data) }

func (b *bytesource) n(k int) int {
	if b.pos >= len(b.data) {
		return 0
	}
	v := int(b.data[b.pos])
	b.pos++
	return v % k
}

var (
	fuzzIDs       = []string{"c0", "c1", "c2", "c3", "", "c.bad"}
	fuzzFuncs     = []string{"fs::read", "shell::exec"}
	fuzzKinds     = []agent.ErrorKind{"", agent.ErrorTransient, agent.ErrorPermanent, agent.ErrorContextOverflow, "bogus"}
	fuzzDecisions = []Decision{DecisionAllow, DecisionDeny, DecisionAborted, "maybe"}
)

func (b *bytesource) id() string { return fuzzIDs[b.n(len(fuzzIDs))] }

func (b *bytesource) messages() []agent.Message {
	var msgs []agent.Message
	for range b.n(3) {
		switch b.n(5) {
		case 0:
			msgs = append(msgs, agent.Message{Role: agent.RoleUser}) // invalid: no content
		case 1:
			msgs = append(msgs, answer("not a user"))
		default:
			msgs = append(msgs, user(fmt.Sprintf("m%d", b.pos)))
		}
	}
	return msgs
}

func (b *bytesource) result() agent.FunctionResult {
	r := agent.TextResult("r")
	r.IsError = b.n(4) == 0
	r.Terminate = b.n(8) == 0
	if b.n(10) == 0 {
		r.Content = []agent.Content{{Type: agent.ContentThinking}}
	}
	return r
}

// input builds one input: usually one that fits what Next asks for, often
// one chosen at random (most of which the machine must refuse).
func (b *bytesource) input(rec Record) Input {
	if b.n(3) > 0 {
		if in := b.guided(rec); in != nil {
			return in
		}
	}
	switch b.n(14) {
	case 0:
		return Provisioned{}
	case 1:
		return ProvisionFailed{Kind: fuzzKinds[b.n(len(fuzzKinds))], Message: "x"}
	case 2:
		return BudgetExceeded{}
	case 3:
		return ModelDone{Message: b.answer()}
	case 4:
		var p *agent.Message
		if b.n(2) == 0 {
			m := b.answer()
			p = &m
		}
		return ModelFailed{Kind: fuzzKinds[b.n(len(fuzzKinds))], Partial: p}
	case 5:
		ids := []string{b.id()}
		for range b.n(3) {
			ids = append(ids, b.id())
		}
		return CallsStarted{IDs: ids}
	case 6:
		return CallDone{ID: b.id(), Result: b.result()}
	case 7:
		return CallParked{ID: b.id(), ArgsHash: "h"}
	case 8:
		return ApprovalResolved{ID: b.id(), Decision: fuzzDecisions[b.n(len(fuzzDecisions))]}
	case 9:
		return SteeringDrained{Steering: b.messages(), Followups: b.messages()}
	case 10:
		var p *agent.Message
		if b.n(2) == 0 {
			m := b.answer()
			p = &m
		}
		return Abort{Reason: "r", Partial: p}
	case 11:
		mask := b.n(4)
		return Recover{Idempotent: func(fn string) bool { return mask&1 == 1 || fn == fuzzFuncs[mask>>1] }}
	case 12:
		return Fail{Message: "too large"}
	default:
		return nil
	}
}

func (b *bytesource) answer() agent.Message {
	var calls []agent.Content
	for range b.n(4) {
		calls = append(calls, call(b.id(), fuzzFuncs[b.n(len(fuzzFuncs))], map[string]any{"n": float64(b.pos)}))
	}
	m := answer("t", calls...)
	if b.n(16) == 0 {
		m.Role = agent.RoleUser
	}
	return m
}

// guided answers the action Next asks for, the way a grain would.
func (b *bytesource) guided(rec Record) Input {
	act := Next(Delivered(rec))
	switch act.Kind {
	case ActionProvision:
		return Provisioned{}
	case ActionStreamModel:
		return ModelDone{Message: b.answer()}
	case ActionExecuteCalls:
		c := act.Calls[b.n(len(act.Calls))]
		switch b.n(4) {
		case 0:
			if !c.Approved {
				return CallParked{ID: c.ID, ArgsHash: "h"}
			}
			return CallsStarted{IDs: []string{c.ID}}
		case 1:
			return CallDone{ID: c.ID, Result: b.result()}
		default:
			return CallsStarted{IDs: []string{c.ID}}
		}
	case ActionWait:
		ids := InFlight(rec)
		return CallDone{ID: ids[b.n(len(ids))], Result: b.result()}
	case ActionPark:
		p := rec.AwaitingApproval[b.n(len(rec.AwaitingApproval))]
		return ApprovalResolved{ID: p.FunctionCallID, Decision: fuzzDecisions[b.n(3)]}
	case ActionCheckSteering:
		return SteeringDrained{Steering: b.messages(), Followups: b.messages()}
	}
	return nil
}

// runLog tracks what a run emitted, to check the machine's promises.
type runLog struct {
	starts, ends map[string]int // by "<turn>/<call id>"
	agentEnds    int
	finished     bool
	lastEvent    agent.EventType
}

func (l *runLog) add(t *testing.T, rec Record, effects []Effect) {
	for i, e := range effects {
		if e.ID == "" {
			t.Fatalf("effect %d has no id", i)
		}
		if l.finished {
			t.Fatalf("effect after the finish effect: %+v", e)
		}
		if e.Kind == EffectFinish {
			l.finished = true
		}
		if e.Kind != EffectEmit {
			continue
		}
		key := fmt.Sprintf("%d/%s", rec.TurnCount, e.Event.FunctionCallID)
		switch e.Event.Type {
		case agent.EventFunctionExecutionStart:
			l.starts[key]++
		case agent.EventFunctionExecutionEnd:
			l.ends[key]++
			if l.starts[key] == 0 {
				t.Fatalf("function_execution_end before start for %s", key)
			}
		case agent.EventAgentEnd:
			if effects[len(effects)-1].Kind != EffectFinish || i != len(effects)-2 {
				t.Fatal("agent_end is not followed by the finish effect alone")
			}
			l.agentEnds++
		}
		l.lastEvent = e.Event.Type
	}
}

// FuzzMachine drives the machine with sequences of inputs: it never panics,
// a refused input changes nothing, an accepted one adds exactly one step, a
// terminal record stays terminal, every record it returns is valid, and
// when a run stops every prepared call of its last batch has exactly one
// result and one start/end pair.
func FuzzMachine(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Add([]byte{2, 3, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps"))
	f.Fuzz(checkMachine)
}

func checkMachine(t *testing.T, data []byte) {
	{
		b := &bytesource{data: data}
		rec, effects, err := New(runStart(b.n(4)), testRun, t0)
		if err != nil {
			t.Fatal(err)
		}
		log := &runLog{starts: map[string]int{}, ends: map[string]int{}}
		log.add(t, rec, effects)
		now := t0
		for steps := 0; b.more() && steps < 200; steps++ {
			if b.n(4) > 0 {
				rec = Delivered(rec)
			}
			in := b.input(rec)
			_ = Next(rec)
			before, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			now += int64(b.n(50))
			next, effects, err := Apply(rec, in, now)
			after, _ := json.Marshal(rec)
			if string(before) != string(after) {
				t.Fatalf("Apply(%s) modified the record it was given", InputName(in))
			}
			if err != nil {
				if !errors.Is(err, ErrUnexpectedInput) && !errors.Is(err, ErrInvalidInput) {
					t.Fatalf("Apply(%s) = %v: not a documented error", InputName(in), err)
				}
				if effects != nil {
					t.Fatal("refused input produced effects")
				}
				if !reflect.DeepEqual(next, rec) {
					t.Fatal("refused input returned a changed record")
				}
				continue
			}
			if rec.State.Terminal() {
				t.Fatalf("terminal record accepted %s", InputName(in))
			}
			if next.Step != rec.Step+1 {
				t.Fatalf("step %d → %d", rec.Step, next.Step)
			}
			if err := next.Validate(); err != nil {
				t.Fatalf("Apply(%s) returned an invalid record: %v", InputName(in), err)
			}
			if len(next.Outbox) < len(effects) {
				t.Fatal("effects missing from the outbox")
			}
			log.add(t, next, effects)
			rec = next
		}
		if !rec.State.Terminal() {
			if log.agentEnds != 0 {
				t.Fatal("agent_end before the run ended")
			}
			return
		}
		if log.agentEnds != 1 || log.lastEvent != agent.EventAgentEnd {
			t.Fatalf("run ended with %d agent_end, last event %s", log.agentEnds, log.lastEvent)
		}
		if Next(Delivered(rec)).Kind != ActionNone {
			t.Fatal("Next of a terminal record is not none")
		}
		if rec.Work == nil {
			return
		}
		if len(rec.FunctionResults) != len(rec.Work.Prepared) {
			t.Fatalf("%d results for %d calls", len(rec.FunctionResults), len(rec.Work.Prepared))
		}
		for i, c := range rec.Work.Prepared {
			e := rec.Work.Effects[c.ID]
			if e.Status != StatusDone || e.Result == nil || rec.FunctionResults[i].FunctionCallID != c.ID {
				t.Fatalf("call %s ends as %+v / result %d for %s", c.ID, e, i, rec.FunctionResults[i].FunctionCallID)
			}
			key := fmt.Sprintf("%d/%s", rec.TurnCount, c.ID)
			if log.starts[key] != 1 || log.ends[key] != 1 {
				t.Fatalf("call %s: %d starts, %d ends", key, log.starts[key], log.ends[key])
			}
		}
	}
}

// FuzzRecord decodes arbitrary JSON as a record: Validate, Next, View and
// Apply never panic, and Apply refuses whatever Validate refuses.
func FuzzRecord(f *testing.F) {
	for _, name := range []string{"function_execute/started", "function_awaiting_approval", "stopped"} {
		b, _ := json.Marshal(fixtures[name](f))
		f.Add(b)
	}
	f.Add([]byte(`{"session_id":"s","run_id":"r","state":"function_execute","work":{"prepared":[{"id":"a"}],"effects":{"a":{"status":"done"}}}}`))
	f.Add([]byte(`{"session_id":"s","run_id":"r","state":"function_awaiting_approval","work":{"prepared":[{"id":"a"}]},"awaiting_approval":[{"function_call_id":"a"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var rec Record
		if json.Unmarshal(data, &rec) != nil {
			return
		}
		valid := rec.Validate() == nil
		_ = Next(rec)
		_ = View(rec)
		_ = InFlight(rec)
		for _, in := range []Input{
			Provisioned{}, ModelDone{Message: answer("x", call("a", "f", nil))}, CallsStarted{IDs: []string{"a"}},
			CallDone{ID: "a"}, CallParked{ID: "a"}, ApprovalResolved{ID: "a", Decision: DecisionDeny},
			SteeringDrained{}, Recover{}, Abort{}, Fail{Message: "x"},
		} {
			next, _, err := Apply(rec, in, 1)
			if !valid && !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("Apply(%s) on an invalid record = %v", InputName(in), err)
			}
			if err == nil {
				if verr := next.Validate(); verr != nil {
					t.Fatalf("Apply(%s) returned an invalid record: %v", InputName(in), verr)
				}
			}
		}
	})
}
