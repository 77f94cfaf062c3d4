package orchestrator

import (
	"sync"

	"github.com/nats-io/nuid"

	"github.com/iii-on-nats/iii/agent"
)

// sentTranscripts is what this process sent each session's provider, so a
// model call can carry only the messages added since the last one
// ([agent.TranscriptRef]): a continuation is sent once the provider
// confirmed it keeps the transcript (transcript_kept in its answer) and
// while the grain's history only grew (same history id, same provider).
// Anything else sends the whole transcript under a new id.
type sentTranscripts struct {
	mu sync.Mutex
	m  map[string]*sentTranscript
}

type sentTranscript struct {
	hist, fn, id string
	n            int  // messages the provider confirmed keeping under id
	confirmed    bool // the provider answered transcript_kept = id
}

func newSentTranscripts() *sentTranscripts {
	return &sentTranscripts{m: map[string]*sentTranscript{}}
}

// prepare fills preq's transcript reference for a call of provider
// function fn whose whole transcript is msgs: a continuation of what the
// provider keeps, or the whole transcript under a new id. hist "" (the
// history has no identity, or the call compacted it) sends the whole
// transcript without a reference. It returns whether preq is a
// continuation.
func (s *sentTranscripts) prepare(sid, hist, fn string, msgs []agent.Message, preq *agent.ProviderRequest) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if hist == "" {
		delete(s.m, sid)
		preq.Messages, preq.Transcript = msgs, nil
		return false
	}
	if st := s.m[sid]; st != nil && st.confirmed && st.hist == hist && st.fn == fn && st.n > 0 && st.n <= len(msgs) {
		preq.Messages = nil
		preq.Transcript = &agent.TranscriptRef{ID: st.id, Base: st.n, More: msgs[st.n:]}
		return true
	}
	id := nuid.Next()
	s.m[sid] = &sentTranscript{hist: hist, fn: fn, id: id}
	preq.Messages, preq.Transcript = msgs, &agent.TranscriptRef{ID: id}
	return false
}

// kept records a provider's transcript_kept answer to a call that sent
// n messages in all.
func (s *sentTranscripts) kept(sid, id string, n int) {
	if s == nil || id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.m[sid]; st != nil && st.id == id {
		st.n, st.confirmed = n, true
	}
}

// Forget drops what was sent for sid (a refused continuation, or the
// grain passivated).
func (s *sentTranscripts) Forget(sid string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, sid)
}

// size is how many sessions have an entry (tests).
func (s *sentTranscripts) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
