package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/actors/session"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// compactFunction is the compaction worker's function.
const compactFunction = "compaction::compact"

// compactTimeout bounds a compaction the orchestrator waits for: the
// summary is a model call (or several) of its own.
const compactTimeout = 10 * time.Minute

// windowReserve is what a model's window keeps free for its answer:
// usable = context_window − min(windowReserve, context_window/4), the
// compaction worker's default rule.
const windowReserve = 16384

// usableWindow is the part of a model's context window a request may fill.
func usableWindow(contextWindow int) int {
	return contextWindow - min(windowReserve, contextWindow/4)
}

// requestTokens estimates a provider request with the rule the compaction
// worker uses (agent.EstimateTokens): messages, system prompt and tools.
func requestTokens(preq agent.ProviderRequest) int {
	n := agent.EstimateTokens(preq.Messages) + (len(preq.SystemPrompt)+3)/4
	if len(preq.Tools) > 0 {
		if b, err := json.Marshal(preq.Tools); err == nil {
			n += (len(b) + 3) / 4
		}
	}
	return n
}

// compactResult is the part of compaction::compact's answer used here.
type compactResult struct {
	Compacted    bool   `json:"compacted"`
	EntryID      string `json:"entry_id"`
	TokensBefore int    `json:"tokens_before"`
	TokensAfter  int    `json:"tokens_after"`
	Reason       string `json:"reason"`
}

// fitWindow compacts the session before a model call whose request would
// not fit the model's usable window: compaction::compact (reason
// overflow, waiting for one already running), then the transcript is read
// again and handed to the grain. It changes nothing when the request fits,
// the window is unknown, or no compaction could be made and the
// transcript read again is no smaller (the provider's context_overflow is
// then the last word): one made since the grain read it (the turn_end
// trigger's, mid-run) leaves nothing to compact, and the transcript as it
// is now is sent. It reports whether it replaced
// preq's messages.
func (m model) fitWindow(ctx context.Context, req session.ModelRequest, preq *agent.ProviderRequest, info agent.Model, known bool) bool {
	if !known || info.ContextWindow <= 0 || m.history == nil {
		return false
	}
	need, usable := requestTokens(*preq), usableWindow(info.ContextWindow)
	if need <= usable {
		return false
	}
	// The compaction reads the transcript, and writes: not before the
	// record that goes on to this call is written and its appends
	// delivered (ModelRequest.Committed).
	if !req.WaitCommitted(ctx) {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, compactTimeout)
	defer cancel()
	var res compactResult
	err := m.e.Trigger(cctx, compactFunction, map[string]any{
		"session_id": req.SessionID, "provider": req.Provider, "model": req.Model, "reason": "overflow", "wait": true,
	}, &res)
	if err != nil {
		m.logger.WarnContext(ctx, "the request exceeds the model's window and could not be compacted", "session_id", req.SessionID,
			"tokens", need, "usable", usable, "error", wire.From(err))
		return false
	}
	msgs, err := m.history.Load(ctx, req.SessionID)
	if err != nil {
		m.logger.WarnContext(ctx, "the compacted transcript could not be read", "session_id", req.SessionID, "error", err)
		return false
	}
	if !res.Compacted && res.Reason != "done_by_other" {
		// Nothing left to compact may mean another compaction (the
		// turn_end trigger's, since the grain read its transcript) made
		// the path short already: the transcript as it is now is sent
		// if it is smaller; else the provider's context_overflow is the
		// last word.
		now := *preq
		now.Messages = msgs
		if requestTokens(now) >= need {
			m.logger.WarnContext(ctx, "the request exceeds the model's window and there is nothing to compact", "session_id", req.SessionID,
				"tokens", need, "usable", usable, "reason", res.Reason)
			return false
		}
	}
	preq.Messages = msgs
	if req.Compacted != nil {
		req.Compacted(msgs)
	}
	if res.Compacted {
		ev := agent.Event{Type: agent.EventCompactionDone, SessionID: req.SessionID, Compaction: &agent.Compaction{
			EntryID: res.EntryID, Reason: "overflow", TokensBefore: res.TokensBefore, TokensAfter: res.TokensAfter,
		}}
		if err := m.pub.Emit(ctx, ev, fmt.Sprintf("%s:%d:compaction", req.RunID, req.Step)); err != nil {
			m.logger.WarnContext(ctx, "compaction_done not published", "session_id", req.SessionID, "error", err)
		}
	}
	return true
}
