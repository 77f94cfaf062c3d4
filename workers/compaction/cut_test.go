package compaction

import (
	"fmt"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

// Shorthands of a transcript: u user, a assistant text, c<id> an
// assistant call, r<id> its result; each of 10 tokens unless suffixed
// with *n (n×10 tokens).
func transcript(t testing.TB, spec string) []agent.Message {
	t.Helper()
	var out []agent.Message
	for _, tok := range strings.Fields(spec) {
		size := 10
		if i := strings.IndexByte(tok, '*'); i >= 0 {
			var n int
			if _, err := fmt.Sscanf(tok[i+1:], "%d", &n); err != nil {
				t.Fatalf("bad token %q", tok)
			}
			size *= n
			tok = tok[:i]
		}
		text := strings.Repeat("x", size*4)
		switch tok[0] {
		case 'u':
			out = append(out, agent.UserText(text, 0))
		case 'a':
			out = append(out, agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(text)}})
		case 'c':
			out = append(out, agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{
				agent.Text(text[:max(0, len(text)-8)]), {Type: agent.ContentFunctionCall, ID: tok[1:], FunctionID: "f"}}})
		case 'r':
			out = append(out, agent.Message{Role: agent.RoleFunctionResult, FunctionCallID: tok[1:], FunctionID: "f",
				Content: []agent.Content{agent.Text(text)}})
		default:
			t.Fatalf("bad token %q", tok)
		}
	}
	return out
}

func tokensOf(msgs []agent.Message) []int {
	out := make([]int, len(msgs))
	for i := range msgs {
		out[i] = MessageTokens(msgs[i])
	}
	return out
}

func TestChooseCut(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		spec      string
		keep      int
		split     bool
		want      int
		wantSplit bool
	}{
		{"empty", "", 100, true, 0, false},
		{"all fits", "u a u a", 100, true, 0, false},
		{"oldest user that fits", "u a u a u a", 40, true, 2, false},
		{"tail too big keeps last user", "u a u a*10", 30, false, 2, false},
		{"never at a result", "u c1 r1 a u a", 30, true, 4, false},
		{"user between call and result stays", "u a c1 u r1 a", 20, false, 0, false},
		{"steering user after results", "u c1 r1 u a", 20, true, 3, false},
		{"split a long turn", "u a u c1 r1*5 c2 r2*5 c3 r3", 30, true, 7, true},
		{"split off", "u a u c1 r1*5 c2 r2*5 c3 r3", 30, false, 2, false},
		{"within twice keep: no split", "u a u c1 r1 a", 30, true, 2, false},
		{"no user at all", "a c1 r1*5 c2 r2*5 a", 20, true, 5, true},
		{"no user, no split", "a c1 r1*5 c2 r2", 20, false, 0, false},
		{"parallel calls", "u c1 r1 c2 r2 a u a", 30, true, 6, false},
	}
	for _, tt := range tests {
		msgs := transcript(t, tt.spec)
		c := chooseCut(msgs, tokensOf(msgs), tt.keep, tt.split)
		if c.index != tt.want || c.split != tt.wantSplit {
			t.Errorf("%s: cut %d split %v, want %d split %v", tt.name, c.index, c.split, tt.want, tt.wantSplit)
		}
	}
}

// FuzzChooseCut builds transcripts from bytes and checks the cut's
// invariants: never between a call and its result, never at a result, the
// newest user message kept unless the turn is split, a split starts at an
// assistant message after it.
func FuzzChooseCut(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0, 1}, uint16(30), true)
	f.Add([]byte{0, 2, 3, 2, 3, 2, 3, 2, 3}, uint16(10), true)
	f.Add([]byte{0, 2, 0, 3, 1}, uint16(5), false)
	f.Fuzz(func(t *testing.T, ops []byte, keep uint16, split bool) {
		if len(ops) > 400 {
			return
		}
		var msgs []agent.Message
		var pending []string // calls without a result yet
		next := 0
		for _, op := range ops {
			size := int(op>>3) * 16
			text := strings.Repeat("x", size)
			switch op & 7 {
			case 0, 4:
				msgs = append(msgs, agent.UserText(text, 0))
			case 1:
				msgs = append(msgs, agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(text)}})
			case 2, 5: // an assistant message with one or two calls
				m := agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text(text)}}
				for range 1 + int(op&4)/4 {
					next++
					id := fmt.Sprint("c", next)
					m.Content = append(m.Content, agent.Content{Type: agent.ContentFunctionCall, ID: id, FunctionID: "f"})
					pending = append(pending, id)
				}
				msgs = append(msgs, m)
			case 3, 6: // the result of the oldest pending call
				if len(pending) == 0 {
					continue
				}
				msgs = append(msgs, agent.Message{Role: agent.RoleFunctionResult, FunctionCallID: pending[0], FunctionID: "f",
					Content: []agent.Content{agent.Text(text)}})
				pending = pending[1:]
			case 7: // an orphan result
				msgs = append(msgs, agent.Message{Role: agent.RoleFunctionResult, FunctionCallID: "orphan", FunctionID: "f"})
			}
		}
		tok := tokensOf(msgs)
		c := chooseCut(msgs, tok, int(keep), split)
		n := len(msgs)
		if c.index < 0 || (n > 0 && c.index >= n) || (n == 0 && c.index != 0) {
			t.Fatalf("cut %d of %d messages", c.index, n)
		}
		lastUser := -1
		for i := range msgs {
			if msgs[i].Role == agent.RoleUser {
				lastUser = i
			}
		}
		if c.lastUser != lastUser {
			t.Fatalf("lastUser %d, want %d", c.lastUser, lastUser)
		}
		if c.index == 0 {
			if c.split {
				t.Fatal("split without a cut")
			}
			return
		}
		first := msgs[c.index]
		if c.split {
			if !split || first.Role != agent.RoleAssistant || c.index <= lastUser {
				t.Fatalf("split cut %d at a %s message (last user %d, split allowed %v)", c.index, first.Role, lastUser, split)
			}
		} else if first.Role != agent.RoleUser || c.index > lastUser {
			t.Fatalf("cut %d at a %s message, last user %d", c.index, first.Role, lastUser)
		}
		// No result at or after the cut answers a call before it.
		before := map[string]bool{}
		for _, m := range msgs[:c.index] {
			for _, b := range m.Content {
				if b.Type == agent.ContentFunctionCall {
					before[b.ID] = true
				}
			}
		}
		for _, m := range msgs[c.index:] {
			if m.Role == agent.RoleFunctionResult && before[m.FunctionCallID] {
				t.Fatalf("cut %d separates call %s from its result", c.index, m.FunctionCallID)
			}
		}
	})
}
