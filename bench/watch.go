package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/subjects"
)

// end is a run's agent_end as the watcher saw it.
type end struct {
	at     time.Time
	reason agent.StopReason
}

// watcher follows every session's events with one core NATS subscription
// on iii.events.> and hands each agent_end to the session waiting for it.
// A core subscription sees an event when it is published — at the same
// moment the stream stores it, give or take the server's queueing — and
// costs the server one delivery per event, like any reader.
type watcher struct {
	sub    *nats.Subscription
	events atomic.Int64

	mu       sync.Mutex
	sessions map[string]*watched
}

type watched struct {
	ends    chan end
	lastSeq uint64 // highest agent_end seq handed over
}

var agentEndMark = []byte(`"` + string(agent.EventAgentEnd) + `"`)

func watch(nc *nats.Conn) (*watcher, error) {
	w := &watcher{sessions: map[string]*watched{}}
	sub, err := nc.Subscribe(subjects.EventSubjectPrefix+">", w.onEvent)
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	w.sub = sub
	return w, nil
}

// expect returns the channel sid's agent_end events arrive on; call it
// before starting the run.
func (w *watcher) expect(sid string) <-chan end {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.sessions[sid]
	if !ok {
		s = &watched{ends: make(chan end, 1)}
		w.sessions[sid] = s
	}
	return s.ends
}

// forget drops sid (its turns are done). An emptied map is replaced, so
// the bench does not keep the buckets of thousands of sessions alive in
// the memory it measures.
func (w *watcher) forget(sid string) {
	w.mu.Lock()
	delete(w.sessions, sid)
	if len(w.sessions) == 0 {
		w.sessions = map[string]*watched{}
	}
	w.mu.Unlock()
}

func (w *watcher) onEvent(m *nats.Msg) {
	at := time.Now()
	w.events.Add(1)
	seq, reason, ok := parseAgentEnd(m.Data)
	if !ok {
		return
	}
	sid := strings.TrimPrefix(m.Subject, subjects.EventSubjectPrefix)
	w.mu.Lock()
	s, ok := w.sessions[sid]
	if ok && seq > s.lastSeq {
		s.lastSeq = seq
		select {
		case s.ends <- end{at: at, reason: reason}:
		default: // nobody waits for it: a duplicate publish
		}
	}
	w.mu.Unlock()
}

// parseAgentEnd reads an event; ok is false unless it is an agent_end.
// The type is the first field of an event as the orchestrator encodes it,
// so a cheap look at the head skips the other events without decoding
// them; a false hit is settled by decoding.
func parseAgentEnd(data []byte) (seq uint64, reason agent.StopReason, ok bool) {
	if !bytes.Contains(data[:min(len(data), 48)], agentEndMark) {
		return 0, "", false
	}
	var ev struct {
		Type       agent.EventType  `json:"type"`
		Seq        uint64           `json:"seq"`
		StopReason agent.StopReason `json:"stop_reason"`
	}
	if json.Unmarshal(data, &ev) != nil || ev.Type != agent.EventAgentEnd {
		return 0, "", false
	}
	return ev.Seq, ev.StopReason, true
}

func (w *watcher) close() { _ = w.sub.Unsubscribe() }
