package compaction

import (
	"unicode"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/subjects"
)

// Reason says why a compaction was asked for.
type Reason string

// Reasons of a [CompactRequest].
const (
	// ReasonThreshold: a turn's usage reached the model's usable window
	// (the worker's own trigger).
	ReasonThreshold Reason = "threshold"
	// ReasonOverflow: the next model request would not fit (the
	// orchestrator, before a model call).
	ReasonOverflow Reason = "overflow"
	// ReasonManual: a user or a client asked (the default).
	ReasonManual Reason = "manual"
)

// Valid reports whether r is a known reason or empty (manual).
func (r Reason) Valid() bool {
	return r == "" || r == ReasonThreshold || r == ReasonOverflow || r == ReasonManual
}

// Outcome says why a [CompactResponse] has compacted false.
type Outcome string

// Outcomes of a compaction that wrote nothing.
const (
	// OutcomeInProgress: another compaction of the session holds the lease
	// (and the request did not ask to wait).
	OutcomeInProgress Outcome = "in_progress"
	// OutcomeNothingToCompact: everything after the previous summary is
	// kept (it fits in keep_tokens, or no cut is allowed before it).
	OutcomeNothingToCompact Outcome = "nothing_to_compact"
	// OutcomeDoneByOther: another compaction wrote its entry meanwhile
	// (the request waited for it, or the threshold event predates it);
	// re-read the session. A waiting request whose other compaction
	// wrote nothing compacts instead.
	OutcomeDoneByOther Outcome = "done_by_other"
)

// Bounds of a request.
const (
	// MaxModelLen bounds a model name.
	MaxModelLen = 256
	// MaxKeepTokens bounds keep_tokens.
	MaxKeepTokens = 1 << 30
)

// CompactRequest is the request of compaction::compact.
type CompactRequest struct {
	SessionID string `json:"session_id"`
	// Provider and Model are the session's: the summary is written by
	// provider::<provider>::complete with this model, and the model's
	// catalog entry (models::get) gives the window.
	Provider string `json:"provider"`
	Model    string `json:"model"`
	// Reason is recorded in logs and the lease (default manual).
	Reason Reason `json:"reason,omitempty"`
	// Wait makes a caller that finds another compaction running wait for
	// it and answer done_by_other (or compact, when the other one wrote
	// nothing), instead of answering in_progress at once.
	Wait bool `json:"wait,omitempty"`
	// KeepTokens is how much of the newest history stays verbatim
	// (estimated tokens); 0 means a quarter of the model's usable window.
	KeepTokens int `json:"keep_tokens,omitempty"`
}

// Validate checks the request: a session id (an id, or "<region>.<name>"
// for a session homed in a region: subjects.ValidateSessionID), a
// provider that is an id ([A-Za-z0-9_-], 1 to 128), a model name (1 to
// [MaxModelLen] bytes of UTF-8 without whitespace or control characters),
// a known reason and keep_tokens in [0, [MaxKeepTokens]]. Errors wrap
// [ErrInvalidRequest].
func (r CompactRequest) Validate() error {
	if err := subjects.ValidateSessionID(r.SessionID); err != nil {
		return invalid("%v", err)
	}
	if err := subjects.ValidateID("provider", r.Provider); err != nil {
		return invalid("%v", err)
	}
	if err := validModel(r.Model); err != nil {
		return err
	}
	if !r.Reason.Valid() {
		return invalid("reason %.64q is not threshold, overflow or manual", r.Reason)
	}
	if r.KeepTokens < 0 || r.KeepTokens > MaxKeepTokens {
		return invalid("keep_tokens %d not in [0, %d]", r.KeepTokens, MaxKeepTokens)
	}
	return nil
}

func validModel(m string) error {
	if m == "" {
		return invalid("model is missing")
	}
	if len(m) > MaxModelLen {
		return invalid("model is longer than %d bytes", MaxModelLen)
	}
	if !utf8.ValidString(m) {
		return invalid("model is not valid UTF-8")
	}
	for _, r := range m {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return invalid("model %.64q contains whitespace or a control character", m)
		}
	}
	return nil
}

// CompactResponse is the answer of compaction::compact.
type CompactResponse struct {
	// Compacted is true when this call appended a compaction entry.
	Compacted bool `json:"compacted"`
	// EntryID is the compaction entry; FirstKeptEntryID the first message
	// kept verbatim after its summary.
	EntryID          string `json:"entry_id,omitempty"`
	FirstKeptEntryID string `json:"first_kept_entry_id,omitempty"`
	// TokensBefore and TokensAfter estimate ([EstimateTokens]) what the
	// model saw before (the whole path's messages) and sees after (the
	// summary and the kept messages). Both are 0 when the session was not
	// read (in_progress, done_by_other after a wait for a lease without
	// its start).
	TokensBefore int `json:"tokens_before"`
	TokensAfter  int `json:"tokens_after"`
	// Reason is set when Compacted is false.
	Reason Outcome `json:"reason,omitempty"`
	// SummaryCalls counts the model calls of the summary: more than one
	// when the old part did not fit in the window at once.
	SummaryCalls int `json:"summary_calls,omitempty"`
}
