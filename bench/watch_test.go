package bench

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

func TestParseAgentEnd(t *testing.T) {
	t.Parallel()
	end, _ := json.Marshal(agent.Event{Type: agent.EventAgentEnd, SessionID: "s1", Seq: 16, StopReason: agent.StopEnd})
	upd, _ := json.Marshal(agent.Event{Type: agent.EventMessageUpdate, SessionID: "agent_end", Seq: 3, Delta: `"agent_end"`})
	tests := []struct {
		name   string
		in     []byte
		seq    uint64
		reason agent.StopReason
		ok     bool
	}{
		{"agent_end", end, 16, agent.StopEnd, true},
		{"update named like it", upd, 0, "", false},
		{"late type", []byte(`{"seq":1,"session_id":"s","stop_reason":"end","type":"agent_end"}`), 0, "", false},
		{"truncated", end[:30], 0, "", false},
		{"empty", nil, 0, "", false},
	}
	for _, tt := range tests {
		seq, reason, ok := parseAgentEnd(tt.in)
		if seq != tt.seq || reason != tt.reason || ok != tt.ok {
			t.Errorf("%s: parseAgentEnd = %d, %q, %v", tt.name, seq, reason, ok)
		}
	}
}

func FuzzParseAgentEnd(f *testing.F) {
	end, _ := json.Marshal(agent.Event{Type: agent.EventAgentEnd, SessionID: "s1", Seq: 16, StopReason: agent.StopEnd})
	f.Add(end)
	f.Add([]byte(`{"type":"agent_end"`))
	f.Fuzz(func(t *testing.T, in []byte) {
		seq, reason, ok := parseAgentEnd(in)
		if !ok && (seq != 0 || reason != "") {
			t.Fatalf("not an agent_end, yet %d %q", seq, reason)
		}
	})
}

func TestWarnCounter(t *testing.T) {
	t.Parallel()
	h := newWarnCounter(nil)
	l := slog.New(h).With("worker", "orchestrator").WithGroup("g")
	l.Warn("session grain halted", "session_id", "s1")
	l.Error("session grain halted")
	l.Info("not counted")
	l.Warn("other")
	before := map[string]int{"other": 1}
	got := since(before, h.snapshot())
	if len(got) != 1 || got["session grain halted"] != 2 {
		t.Fatalf("since = %v (all %v)", got, h.snapshot())
	}
	if h.Enabled(context.Background(), slog.LevelInfo) {
		t.Error("info enabled without a next handler")
	}
}
