package compaction

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Functions of other workers the compactor calls (it imports none of
// them: these are their wire contracts).
const (
	sessionGetFunction      = "session::get"
	sessionMessagesFunction = "session::messages"
	sessionEntriesFunction  = "session::entries"
	sessionAppendFunction   = "session::append"
	modelsGetFunction       = "models::get"
)

// completeFunction is the provider function that writes summaries.
func completeFunction(provider string) string { return "provider::" + provider + "::complete" }

// entryTypeCompaction is the session tree's compaction entry type.
const entryTypeCompaction = "compaction"

// payloadMargin is what a summarizer request keeps free of the bus's max
// payload for its envelope (system prompt, encoding, headers).
const payloadMargin = 64 << 10

// modelCacheTTL is how long a models::get answer is reused.
const modelCacheTTL = 30 * time.Second

// Wire shapes of the session tree, models catalog and providers.
type (
	sessionRequest struct {
		SessionID string `json:"session_id"`
	}
	sessionMeta struct {
		ActiveLeaf string `json:"active_leaf"`
	}
	readRequest struct {
		SessionID string `json:"session_id"`
		Leaf      string `json:"leaf,omitempty"`
		After     string `json:"after,omitempty"`
	}
	pathMessage struct {
		EntryID string        `json:"entry_id"`
		Message agent.Message `json:"message"`
	}
	pathStep struct {
		EntryID string `json:"entry_id"`
		Type    string `json:"type"`
	}
	messagesResponse struct {
		Leaf        string        `json:"leaf"`
		Messages    []pathMessage `json:"messages"`
		Path        []pathStep    `json:"path"`
		PathOmitted int           `json:"path_omitted"`
		Truncated   bool          `json:"truncated"`
	}
	treeEntry struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Timestamp int64  `json:"timestamp"`
		Summary   string `json:"summary"`
	}
	entriesResponse struct {
		Leaf      string      `json:"leaf"`
		Entries   []treeEntry `json:"entries"`
		Truncated bool        `json:"truncated"`
	}
	compactionEntry struct {
		Type             string `json:"type"`
		Summary          string `json:"summary"`
		FirstKeptEntryID string `json:"first_kept_entry_id"`
		TokensBefore     int64  `json:"tokens_before"`
	}
	appendRequest struct {
		SessionID string          `json:"session_id"`
		Entry     compactionEntry `json:"entry"`
		DedupID   string          `json:"dedup_id,omitempty"`
	}
	appendResponse struct {
		EntryID string `json:"entry_id"`
	}
	modelRequest struct {
		Provider string `json:"provider"`
		ModelID  string `json:"model_id"`
	}
	modelInfo struct {
		ID              string `json:"id"`
		Provider        string `json:"provider"`
		ContextWindow   int    `json:"context_window"`
		MaxOutputTokens int    `json:"max_output_tokens"`
	}
	completeResponse struct {
		Message agent.Message `json:"message"`
	}
)

// compactor runs compactions over the bus.
type compactor struct {
	e      *engine.Engine
	o      options
	log    *slog.Logger
	leases *leases

	mu     sync.Mutex
	models map[modelRequest]cachedModel
}

type cachedModel struct {
	m       modelInfo
	expires time.Time
}

// model looks the model up in the catalog (models::get), reusing an
// answer for [modelCacheTTL]. An unknown model is invalid_payload.
func (c *compactor) model(ctx context.Context, provider, id string) (modelInfo, error) {
	k := modelRequest{Provider: provider, ModelID: id}
	c.mu.Lock()
	cm, ok := c.models[k]
	c.mu.Unlock()
	if ok && time.Now().Before(cm.expires) {
		return cm.m, nil
	}
	var m *modelInfo
	if err := c.e.Trigger(ctx, modelsGetFunction, k, &m); err != nil {
		return modelInfo{}, callErr(err, "look up model %s/%s", provider, id)
	}
	if m == nil {
		return modelInfo{}, wire.Wrap(wire.CodeInvalidPayload,
			fmt.Errorf("%w: models::get knows no model %q of provider %q", ErrUnknownModel, id, provider), "")
	}
	if m.ContextWindow <= 0 {
		return modelInfo{}, wire.Wrap(wire.CodeInvalidPayload,
			fmt.Errorf("%w: model %s/%s has no context window", ErrUnknownModel, provider, id), "")
	}
	c.mu.Lock()
	if c.models == nil {
		c.models = map[modelRequest]cachedModel{}
	}
	if len(c.models) > 1024 {
		clear(c.models)
	}
	c.models[k] = cachedModel{m: *m, expires: time.Now().Add(modelCacheTTL)}
	c.mu.Unlock()
	return *m, nil
}

// compact serves one compaction: the model's window, the session's lease
// (or the answer that another compaction holds it), then [compactor.run].
// staleBefore, when not 0, makes a path whose last compaction is that
// recent (Unix ms) answer done_by_other: the threshold trigger passes the
// time of the turn whose usage it saw. A caller that waited for another
// compaction tries again under the lease, with staleBefore the other
// one's start when it passed none: it answers done_by_other when the
// other compaction wrote its entry, and compacts when it failed or its
// holder crashed (which wrote nothing).
func (c *compactor) compact(ctx context.Context, req CompactRequest, staleBefore int64) (CompactResponse, error) {
	if err := req.Validate(); err != nil {
		return CompactResponse{}, err
	}
	if req.Reason == "" {
		req.Reason = ReasonManual
	}
	m, err := c.model(ctx, req.Provider, req.Model)
	if err != nil {
		return CompactResponse{}, err
	}
	var l *lease
	for {
		var holder leaseValue
		l, holder, err = c.leases.acquire(ctx, req.SessionID, req.Reason)
		if err != nil {
			return CompactResponse{}, err
		}
		if l != nil {
			break
		}
		if !req.Wait {
			return CompactResponse{Reason: OutcomeInProgress}, nil
		}
		if err := c.leases.wait(ctx, req.SessionID, holder.Owner); err != nil {
			return CompactResponse{}, err
		}
		if staleBefore == 0 {
			if holder.StartedAt <= 0 {
				// A foreign lease, without its start: nothing to
				// tell its compaction by.
				return CompactResponse{Reason: OutcomeDoneByOther}, nil
			}
			// The other compaction may have failed or crashed
			// without writing anything: try again, and answer
			// done_by_other only if the path's last compaction is
			// no older than the other one's start.
			staleBefore = holder.StartedAt
		}
		// The threshold trigger tries again: if the other compaction
		// came after its turn, the stale check skips it.
	}
	defer l.release(ctx)
	hctx, cancel := l.hold(ctx)
	defer cancel()
	resp, err := c.run(hctx, req, m, staleBefore)
	if err != nil && hctx.Err() != nil {
		// A lost lease (or a shutdown) explains the failure better than
		// the canceled call it caused.
		err = busErr(hctx, err, "compact session %s", req.SessionID)
	}
	return resp, err
}

// run compacts the session's active path under its lease.
func (c *compactor) run(ctx context.Context, req CompactRequest, m modelInfo, staleBefore int64) (CompactResponse, error) {
	sid := req.SessionID
	view, err := c.readView(ctx, sid)
	if err != nil {
		return CompactResponse{}, callErr(err, "read session %s", sid)
	}
	msgs := make([]agent.Message, len(view.Messages))
	tok := make([]int, len(view.Messages))
	before := 0
	for i := range view.Messages {
		msgs[i] = view.Messages[i].Message
		tok[i] = MessageTokens(msgs[i])
		before += tok[i]
	}
	resp := CompactResponse{TokensBefore: before, TokensAfter: before}

	// The previous summary, when the path has one: it comes first. Its
	// path step says so; when the answer left that step out (a path read
	// in pages comes without steps), the entry itself says.
	start, prev := 0, ""
	if len(view.Messages) > 0 {
		first := view.Messages[0].EntryID
		if typ, known := stepType(view.Path, first); !known || typ == entryTypeCompaction {
			en, err := c.findEntry(ctx, sid, view.Leaf, first)
			if err != nil {
				return CompactResponse{}, callErr(err, "read session %s", sid)
			}
			if en.Type == entryTypeCompaction {
				start, prev = 1, en.Summary
				if staleBefore > 0 && en.Timestamp >= staleBefore {
					resp.Reason = OutcomeDoneByOther
					return resp, nil
				}
			}
		}
	}

	usable := c.o.usableWindow(m.ContextWindow)
	keep := req.KeepTokens
	if keep == 0 {
		keep = c.o.keepTokens(usable)
	}
	rest := msgs[start:]
	cu := chooseCut(rest, tok[start:], keep, c.o.splitTurns)
	if cu.index == 0 {
		resp.Reason = OutcomeNothingToCompact
		return resp, nil
	}
	old, kept := rest[:cu.index], rest[cu.index:]

	s := summarizer{
		complete:   c.completer(req.Provider, req.Model, sid),
		usable:     usable,
		maxTokens:  c.o.reserveFor(m.ContextWindow),
		pruneBytes: c.o.pruneBytes,
		maxBytes:   max(int(c.e.Conn().MaxPayload())-payloadMargin, minChunkBytes*4),
	}
	if m.MaxOutputTokens > 0 {
		s.maxTokens = min(s.maxTokens, m.MaxOutputTokens)
	}
	summary, calls, err := s.run(ctx, prev, old)
	resp.SummaryCalls = calls
	if err != nil {
		if errors.Is(err, ErrWindowTooSmall) {
			return CompactResponse{}, wire.Wrap(wire.CodeInternal, err, "model %s/%s (usable window %d tokens)", req.Provider, req.Model, usable)
		}
		return CompactResponse{}, busErr(ctx, err, "summarize session %s", sid)
	}
	quote := ""
	if cu.split {
		if cu.lastUser >= 0 {
			quote = messageText(rest[cu.lastUser])
		} else {
			quote = latestRequest(prev)
		}
		// At most the turn size the cut keeps whole: twice keep, in
		// estimated tokens.
		quote = shorten(quote, max(tokenBytes(2*keep), minChunkBytes))
	}
	room := summaryRoom(c.o.maxEntrySize, c.e.Conn().MaxPayload())
	if summary, err = entrySummary(summary, quote, room); err != nil {
		return CompactResponse{}, wire.Wrap(wire.CodeInternal, err,
			"session %s: %d bytes of entry limit left for the summary (max_entry_size %d, server max payload %d)",
			sid, room, c.o.maxEntrySize, c.e.Conn().MaxPayload())
	}

	if err := context.Cause(ctx); err != nil {
		return CompactResponse{}, busErr(ctx, err, "compact session %s", sid)
	}
	firstKept := view.Messages[start+cu.index].EntryID
	var app appendResponse
	err = c.e.Trigger(ctx, sessionAppendFunction, appendRequest{SessionID: sid, Entry: compactionEntry{
		Type: entryTypeCompaction, Summary: summary, FirstKeptEntryID: firstKept, TokensBefore: int64(before),
	}, DedupID: compactionDedupID(sid, view.Leaf, firstKept)}, &app)
	if err != nil {
		if wire.From(err).Code == wire.CodeInvalidPayload && c.leftPath(ctx, sid, firstKept) {
			return CompactResponse{}, wire.Wrap(wire.CodeConflict, ErrPathChanged,
				"session %s: entry %s is no longer on the active path", sid, firstKept)
		}
		return CompactResponse{}, callErr(err, "append the compaction of session %s", sid)
	}
	resp.Compacted = true
	resp.EntryID = app.EntryID
	resp.FirstKeptEntryID = firstKept
	resp.TokensAfter = MessageTokens(agent.UserText(summary, 0)) + EstimateTokens(kept)
	c.log.Info("session compacted",
		slog.String("session_id", sid), slog.String("reason", string(req.Reason)),
		slog.String("entry_id", app.EntryID), slog.String("first_kept_entry_id", firstKept),
		slog.Int("tokens_before", resp.TokensBefore), slog.Int("tokens_after", resp.TokensAfter),
		slog.Int("summarized_messages", len(old)), slog.Int("summary_calls", calls), slog.Bool("split_turn", cu.split))
	return resp, nil
}

// compactionDedupID names one compaction of session sid: of the path to
// leaf, keeping from firstKept on. An append the session tree stored
// although its call failed (the lease lost, a timeout) is then answered
// to a retry of the same compaction instead of stored twice.
func compactionDedupID(sid, leaf, firstKept string) string {
	h := sha256.Sum256([]byte(sid + "\x00" + leaf + "\x00" + firstKept))
	return "compaction-" + hex.EncodeToString(h[:16])
}

// leftPath reports whether the session's active path no longer holds
// entry id (the active leaf moved to another branch): the session tree
// then refuses a compaction keeping from id, which is not the caller's
// fault. It reads the active leaf (session::get), then asks
// session::entries for the path to it after id, which the session tree
// refuses (invalid_payload) when id is not on that path: one path read,
// whatever the path's size (a session::messages answer cut to the max
// payload has no path steps to look in). A failed read answers false.
func (c *compactor) leftPath(ctx context.Context, sid, id string) bool {
	var meta sessionMeta
	if err := c.e.Trigger(ctx, sessionGetFunction, sessionRequest{SessionID: sid}, &meta); err != nil || meta.ActiveLeaf == "" {
		return false
	}
	err := c.e.Trigger(ctx, sessionEntriesFunction, readRequest{SessionID: sid, Leaf: meta.ActiveLeaf, After: id}, nil)
	return err != nil && wire.From(err).Code == wire.CodeInvalidPayload
}

// maxViewPages bounds the pages of one view read.
const maxViewPages = 10_000

// readView reads sid's active path with session::messages, every page:
// an answer that would outgrow the server's max payload is cut
// (truncated) and the rest read after its last message on the same leaf.
// The path steps are the first page's: the newest steps when it holds
// every message, none when it was cut (the caller then reads the entry).
func (c *compactor) readView(ctx context.Context, sid string) (messagesResponse, error) {
	var view messagesResponse
	if err := c.e.Trigger(ctx, sessionMessagesFunction, readRequest{SessionID: sid}, &view); err != nil {
		return view, err
	}
	for page := 1; view.Truncated; page++ {
		if len(view.Messages) == 0 || page == maxViewPages {
			return view, wire.Errorf(wire.CodeInternal, "session::messages answered truncated after %d messages in %d pages", len(view.Messages), page)
		}
		var next messagesResponse
		req := readRequest{SessionID: sid, Leaf: view.Leaf, After: view.Messages[len(view.Messages)-1].EntryID}
		if err := c.e.Trigger(ctx, sessionMessagesFunction, req, &next); err != nil {
			return view, err
		}
		if len(next.Messages) == 0 && next.Truncated {
			return view, wire.Errorf(wire.CodeInternal, "session::messages answered an empty truncated page")
		}
		view.Messages = append(view.Messages, next.Messages...)
		view.Truncated = next.Truncated
	}
	return view, nil
}

// findEntry reads entry id of the path to leaf with session::entries,
// page after page (a path whose entries outgrow one answer comes
// truncated) until it has it. An entry the path does not hold is
// internal: the caller found it on the path.
func (c *compactor) findEntry(ctx context.Context, sid, leaf, id string) (treeEntry, error) {
	req := readRequest{SessionID: sid, Leaf: leaf}
	for page := 1; ; page++ {
		var ents entriesResponse
		if err := c.e.Trigger(ctx, sessionEntriesFunction, req, &ents); err != nil {
			return treeEntry{}, err
		}
		for _, en := range ents.Entries {
			if en.ID == id {
				return en, nil
			}
		}
		if !ents.Truncated || len(ents.Entries) == 0 || page == maxViewPages {
			return treeEntry{}, wire.Errorf(wire.CodeInternal, "entry %s is not on the path to %s (%d pages of session::entries)", id, leaf, page)
		}
		req.Leaf, req.After = ents.Leaf, ents.Entries[len(ents.Entries)-1].ID
	}
}

// stepType is the type of entry id among the path's steps; known is
// false when the steps do not hold it.
func stepType(path []pathStep, id string) (typ string, known bool) {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].EntryID == id {
			return path[i].Type, true
		}
	}
	return "", false
}

// completer asks provider::<provider>::complete for one summary
// (agent.ProviderRequest without tools): the system prompt, one user
// message, a bound on the output. An answer without text, or one that
// did not stop at its end (cut by the bound), is an error.
func (c *compactor) completer(provider, model, sid string) completeFunc {
	id := completeFunction(provider)
	return func(ctx context.Context, system, user string, maxTokens int) (string, error) {
		req := agent.ProviderRequest{
			SystemPrompt: system, Model: model, MaxTokens: maxTokens, SessionID: sid,
			Messages: []agent.Message{agent.UserText(user, time.Now().UnixMilli())},
		}
		var resp completeResponse
		if err := c.e.Trigger(ctx, id, req, &resp); err != nil {
			return "", callErr(err, "summarize with %s", id)
		}
		if sr := resp.Message.StopReason; sr != "" && sr != agent.StopEnd {
			return "", wire.Wrap(wire.CodeInternal, ErrTruncatedSummary, "%s stopped with %q (max_tokens %d)", id, sr, maxTokens)
		}
		var b strings.Builder
		for _, blk := range resp.Message.Content {
			if blk.Type == agent.ContentText {
				b.WriteString(blk.Text)
			}
		}
		out := strings.TrimSpace(b.String())
		if out == "" {
			return "", wire.Wrap(wire.CodeInternal, ErrEmptySummary, "%s", id)
		}
		return out, nil
	}
}
